//! AVX2 packing of 6-bit symbols, four to three bytes, big-endian: the base64 layout, with
//! Wojciech Muła's and Daniel Lemire's base64 kernels ("Faster Base64 Encoding and
//! Decoding using AVX2 Instructions", 2018). The scalar code in the parent module writes
//! the same bytes (tested).

use std::arch::x86_64::*;

/// Packs 32 values at a time (24 bytes); returns how many were packed. `dst` must hold
/// `values.len() / 4 * 3` bytes.
#[target_feature(enable = "avx2")]
pub(super) fn pack6(values: &[u8], dst: &mut [u8]) -> usize {
    let groups = values.len() / 32;
    assert!(dst.len() >= groups * 24);
    // Per 32-bit lane [a b c d] -> a << 18 | b << 12 | c << 6 | d.
    let ab = _mm256_set1_epi32(0x0140_0140);
    let abcd = _mm256_set1_epi32(0x0001_1000);
    // The three bytes of each lane, most significant first, 12 per 128-bit lane.
    let bytes = _mm256_setr_epi8(
        2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1, 2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13,
        12, -1, -1, -1, -1,
    );
    for g in 0..groups {
        // SAFETY: g < values.len() / 32, so bytes 32g..32g + 32 are inside `values`.
        let v = unsafe { _mm256_loadu_si256(values.as_ptr().add(32 * g).cast()) };
        let v = _mm256_madd_epi16(_mm256_maddubs_epi16(v, ab), abcd);
        let v = _mm256_shuffle_epi8(v, bytes);
        let lo = _mm256_castsi256_si128(v);
        let hi = _mm256_extracti128_si256::<1>(v);
        let mut out = [0u8; 32];
        // SAFETY: `out` is 32 bytes; two 16-byte stores at 0 and 12 fit.
        unsafe {
            _mm_storeu_si128(out.as_mut_ptr().cast(), lo);
            _mm_storeu_si128(out.as_mut_ptr().add(12).cast(), hi);
        }
        dst[24 * g..24 * g + 24].copy_from_slice(&out[..24]);
    }
    groups * 32
}

/// Unpacks 32 values at a time from 24 bytes, while 28 bytes can be read (the second
/// 16-byte load starts 12 bytes in); returns how many were unpacked.
#[target_feature(enable = "avx2")]
pub(super) fn unpack6(src: &[u8], out: &mut [u8]) -> usize {
    let groups = (out.len() / 32).min(src.len().saturating_sub(4) / 24);
    // Each 32-bit lane gets the bytes [s1 s0 s2 s1] of its three.
    let spread = _mm256_setr_epi8(
        1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10, 1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10,
        9, 11, 10,
    );
    let m0 = _mm256_set1_epi32(0x0FC0_FC00);
    let k0 = _mm256_set1_epi32(0x0400_0040);
    let m1 = _mm256_set1_epi32(0x003F_03F0);
    let k1 = _mm256_set1_epi32(0x0100_0010);
    for g in 0..groups {
        // SAFETY: g < (src.len() - 4) / 24, so 24g + 12 + 16 <= src.len(): both 16-byte
        // loads are inside `src`.
        let v = unsafe {
            let lo = _mm_loadu_si128(src.as_ptr().add(24 * g).cast());
            let hi = _mm_loadu_si128(src.as_ptr().add(24 * g + 12).cast());
            _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi)
        };
        let v = _mm256_shuffle_epi8(v, spread);
        let a = _mm256_mulhi_epu16(_mm256_and_si256(v, m0), k0);
        let b = _mm256_mullo_epi16(_mm256_and_si256(v, m1), k1);
        let v = _mm256_or_si256(a, b);
        // SAFETY: g < out.len() / 32, so bytes 32g..32g + 32 are inside `out`.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(32 * g).cast(), v) };
    }
    groups * 32
}

/// Rebuilds 32 two-byte words at a time from byte planes `p0`, `p1`: interleaves them,
/// rotates each word right by `r` bits (0 or 1) and XORs `base` if given. Returns the
/// words written (a multiple of 32); the caller does the rest.
#[target_feature(enable = "avx2")]
pub(super) fn join2(p0: &[u8], p1: &[u8], base: Option<&[u8]>, r: u32, out: &mut [u8]) -> usize {
    let n = (out.len() / 2).min(p0.len()).min(p1.len());
    assert!(base.is_none_or(|b| b.len() >= 2 * n));
    let groups = n / 32;
    for g in 0..groups {
        // SAFETY: g < groups = n / 32 and both planes hold at least n bytes.
        let (a, b) = unsafe {
            (
                _mm256_loadu_si256(p0.as_ptr().add(32 * g).cast()),
                _mm256_loadu_si256(p1.as_ptr().add(32 * g).cast()),
            )
        };
        // Interleaving works in 128-bit lanes (elements 0-7 | 16-23, 8-15 | 24-31);
        // `permute2x128` restores the order.
        let lo = _mm256_unpacklo_epi8(a, b);
        let hi = _mm256_unpackhi_epi8(a, b);
        let words = [
            _mm256_permute2x128_si256::<0x20>(lo, hi),
            _mm256_permute2x128_si256::<0x31>(lo, hi),
        ];
        for (k, v) in words.into_iter().enumerate() {
            let v = match r {
                0 => v,
                _ => _mm256_or_si256(_mm256_srli_epi16::<1>(v), _mm256_slli_epi16::<15>(v)),
            };
            let at = 64 * g + 32 * k;
            finish(v, base, at, out);
        }
    }
    groups * 32
}

/// [`join2`] for four byte planes and four-byte words.
#[target_feature(enable = "avx2")]
pub(super) fn join4(p: [&[u8]; 4], base: Option<&[u8]>, r: u32, out: &mut [u8]) -> usize {
    let n = (out.len() / 4).min(p.iter().map(|p| p.len()).min().unwrap_or(0));
    assert!(base.is_none_or(|b| b.len() >= 4 * n));
    let groups = n / 32;
    for g in 0..groups {
        // SAFETY: g < groups = n / 32 and every plane holds at least n bytes.
        let [a, b, c, d] = p.map(|p| unsafe { _mm256_loadu_si256(p.as_ptr().add(32 * g).cast()) });
        // Interleaving works in 128-bit lanes: words 0-3 | 16-19, 4-7 | 20-23, 8-11 |
        // 24-27, 12-15 | 28-31; `permute2x128` restores the order.
        let (ab_lo, ab_hi) = (_mm256_unpacklo_epi8(a, b), _mm256_unpackhi_epi8(a, b));
        let (cd_lo, cd_hi) = (_mm256_unpacklo_epi8(c, d), _mm256_unpackhi_epi8(c, d));
        let w0 = _mm256_unpacklo_epi16(ab_lo, cd_lo);
        let w1 = _mm256_unpackhi_epi16(ab_lo, cd_lo);
        let w2 = _mm256_unpacklo_epi16(ab_hi, cd_hi);
        let w3 = _mm256_unpackhi_epi16(ab_hi, cd_hi);
        let words = [
            _mm256_permute2x128_si256::<0x20>(w0, w1),
            _mm256_permute2x128_si256::<0x20>(w2, w3),
            _mm256_permute2x128_si256::<0x31>(w0, w1),
            _mm256_permute2x128_si256::<0x31>(w2, w3),
        ];
        for (k, v) in words.into_iter().enumerate() {
            let v = match r {
                0 => v,
                _ => _mm256_or_si256(_mm256_srli_epi32::<1>(v), _mm256_slli_epi32::<31>(v)),
            };
            finish(v, base, 128 * g + 32 * k, out);
        }
    }
    groups * 32
}

/// XORs `v` with `base[at..at + 32]` if given and stores it at `out[at..at + 32]`.
#[target_feature(enable = "avx2")]
fn finish(v: __m256i, base: Option<&[u8]>, at: usize, out: &mut [u8]) {
    let b = base.map(|b| &b[at..at + 32]);
    let o = &mut out[at..at + 32];
    // SAFETY: `b` and `o` are 32-byte slices (checked by the indexing above), and
    // unaligned loads and stores have no other requirement.
    unsafe {
        let v = match b {
            Some(b) => _mm256_xor_si256(v, _mm256_loadu_si256(b.as_ptr().cast())),
            None => v,
        };
        _mm256_storeu_si256(o.as_mut_ptr().cast(), v);
    }
}

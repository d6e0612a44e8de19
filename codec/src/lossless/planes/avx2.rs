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

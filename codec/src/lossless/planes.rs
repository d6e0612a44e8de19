//! Plane transforms: XOR against a base, rotate floats, cut words into planes, and back.
//!
//! A float word is rotated left by one bit before cutting, so the sign moves to bit 0
//! and the exponent fills the top byte (bf16, f32) or its top bits (f16, f64): the plane
//! that holds the exponent then has few distinct values and codes well. XOR with a base of
//! the same dtype is applied to the word first (rotation and XOR commute).
//!
//! Three cuts:
//!
//! - bytes ([`split`], [`join`]): plane `k` holds byte `k` (little-endian) of each word;
//! - head ([`split_head`], [`join_head`], floats of 2, 4 or 8 bytes), top down: the top
//!   [`HEAD_BITS`] bits (the exponent and the top mantissa bits, one joint symbol), then
//!   bytes, then the last [`TAIL_BITS`] bits (low mantissa bits and the sign);
//! - differences ([`split_difference`], [`join_difference`], f32 deltas): as bytes, of the
//!   zigzagged wrapping difference of the words instead of their XOR (no rotation).

use super::rans::Symbol;
use crate::cpu::Simd;

#[cfg(target_arch = "x86_64")]
mod avx2;

/// Splits `data` (and `data ^ base`) into `W` planes of `n` bytes in `planes`
/// (`planes.len() == data.len()`): plane `k` holds byte `k` (little-endian) of each word.
pub(crate) fn split<const W: usize>(
    data: &[u8],
    base: Option<&[u8]>,
    rotate: bool,
    planes: &mut [u8],
) {
    Simd::detect().run(
        #[inline(always)]
        || split_words::<W>(data, base, rotate, planes),
    );
}

/// The word loops of [`split`].
#[inline(always)]
fn split_words<const W: usize>(data: &[u8], base: Option<&[u8]>, rotate: bool, planes: &mut [u8]) {
    let n = data.len() / W;
    let (p0, rest) = planes.split_at_mut(n);
    match W {
        1 => match base {
            Some(b) => {
                for ((p, &d), &b) in p0.iter_mut().zip(data).zip(b) {
                    *p = d ^ b;
                }
            }
            None => p0.copy_from_slice(data),
        },
        2 => split2(data, base, rotate, p0, rest),
        4 => split4(data, base, rotate, p0, rest),
        _ => split_generic::<W>(data, base, rotate, planes),
    }
}

#[inline(always)]
fn split2(data: &[u8], base: Option<&[u8]>, rotate: bool, p0: &mut [u8], p1: &mut [u8]) {
    let r = u32::from(rotate);
    // Fixed-size chunks (`as_chunks`) rather than `chunks_exact`: the loops vectorize.
    let words = data.as_chunks::<2>().0;
    let planes = p0.iter_mut().zip(p1.iter_mut());
    match base {
        Some(b) => {
            for ((d, b), (a0, a1)) in words.iter().zip(b.as_chunks::<2>().0).zip(planes) {
                let w = (u16::from_le_bytes(*d) ^ u16::from_le_bytes(*b)).rotate_left(r);
                [*a0, *a1] = w.to_le_bytes();
            }
        }
        None => {
            for (d, (a0, a1)) in words.iter().zip(planes) {
                let w = u16::from_le_bytes(*d).rotate_left(r);
                [*a0, *a1] = w.to_le_bytes();
            }
        }
    }
}

#[inline(always)]
fn split4(data: &[u8], base: Option<&[u8]>, rotate: bool, p0: &mut [u8], rest: &mut [u8]) {
    let r = u32::from(rotate);
    let words = data
        .as_chunks::<4>()
        .0
        .iter()
        .map(|d| u32::from_le_bytes(*d));
    match base {
        Some(bs) => {
            let bases = bs.as_chunks::<4>().0.iter().map(|b| u32::from_le_bytes(*b));
            cut4(
                p0,
                rest,
                words.zip(bases).map(|(d, b)| (d ^ b).rotate_left(r)),
            );
        }
        None => cut4(p0, rest, words.map(|d| d.rotate_left(r))),
    }
}

/// Cuts 4-byte `words` into planes: byte `k` of word `i` goes to `p0[i]` for `k == 0`, and
/// to `rest[(k - 1) * n + i]` after (`n == p0.len()`, `rest` three planes of `n`).
#[inline(always)]
fn cut4(p0: &mut [u8], rest: &mut [u8], words: impl Iterator<Item = u32>) {
    let n = p0.len();
    let (p1, rest) = rest.split_at_mut(n);
    let (p2, p3) = rest.split_at_mut(n);
    let planes = p0
        .iter_mut()
        .zip(p1.iter_mut())
        .zip(p2.iter_mut().zip(p3.iter_mut()));
    for (w, ((a0, a1), (a2, a3))) in words.zip(planes) {
        [*a0, *a1, *a2, *a3] = w.to_le_bytes();
    }
}

#[inline(always)]
fn split_generic<const W: usize>(
    data: &[u8],
    base: Option<&[u8]>,
    rotate: bool,
    planes: &mut [u8],
) {
    let n = data.len() / W;
    for (i, d) in data.chunks_exact(W).enumerate() {
        let mut w = word::<W>(d);
        if let Some(b) = base {
            w ^= word::<W>(&b[i * W..i * W + W]);
        }
        if rotate {
            w = rotl::<W>(w);
        }
        for k in 0..W {
            planes[k * n + i] = (w >> (8 * k)) as u8;
        }
    }
}

/// The inverse of [`split`]: rebuilds words from `W` plane slices (each `n` bytes, or one
/// constant byte), un-rotates, XORs with `base`, and writes `out` (`n * W` bytes).
pub(crate) fn join<const W: usize>(
    planes: &[Plane<'_>; W],
    base: Option<&[u8]>,
    rotate: bool,
    out: &mut [u8],
) {
    let n = out.len() / W;
    if W == 2 || W == 4 {
        // Constant planes become filled ones, so that the word loops below take slices.
        let filled = constant_fills(planes, n);
        let p = plane_slices(planes, &filled);
        match p.as_slice() {
            [a, b] => return join2(Simd::detect(), a, b, base, rotate, out),
            [a, b, c, d] => return join4(Simd::detect(), [a, b, c, d], base, rotate, out),
            _ => {}
        }
    }
    for i in 0..n {
        let mut w = 0u64;
        for (k, p) in planes.iter().enumerate() {
            w |= u64::from(p.at(i)) << (8 * k);
        }
        if rotate {
            w = rotr::<W>(w);
        }
        let dst = &mut out[i * W..i * W + W];
        dst.copy_from_slice(&w.to_le_bytes()[..W]);
        if let Some(b) = base {
            for (o, &b) in dst.iter_mut().zip(&b[i * W..i * W + W]) {
                *o ^= b;
            }
        }
    }
}

/// The leading words of a 2- or 4-byte join done with SIMD; returns how many (0 with
/// [`Simd::Scalar`]).
fn join_simd(simd: Simd, p: &[&[u8]], base: Option<&[u8]>, r: u32, out: &mut [u8]) -> usize {
    match simd {
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => match p {
            // SAFETY: `Simd::Avx2` is only chosen when the CPU has AVX2 (`Simd::detect`),
            // the one requirement of the call.
            [a, b] => unsafe { avx2::join2(a, b, base, r, out) },
            // SAFETY: as above.
            [a, b, c, d] => unsafe { avx2::join4([a, b, c, d], base, r, out) },
            _ => 0,
        },
        Simd::Scalar => {
            let _ = (p, base, r, out);
            0
        }
    }
}

fn join2(simd: Simd, p0: &[u8], p1: &[u8], base: Option<&[u8]>, rotate: bool, out: &mut [u8]) {
    let r = u32::from(rotate);
    let done = join_simd(simd, &[p0, p1], base, r, out);
    let (p0, p1, out) = (&p0[done..], &p1[done..], &mut out[2 * done..]);
    let base = base.map(|b| &b[2 * done..]);
    let words = out.chunks_exact_mut(2).zip(p0.iter().zip(p1));
    match base {
        Some(b) => {
            for ((o, (&a, &c)), b) in words.zip(b.chunks_exact(2)) {
                let w =
                    u16::from_le_bytes([a, c]).rotate_right(r) ^ u16::from_le_bytes([b[0], b[1]]);
                o.copy_from_slice(&w.to_le_bytes());
            }
        }
        None => {
            for (o, (&a, &c)) in words {
                o.copy_from_slice(&u16::from_le_bytes([a, c]).rotate_right(r).to_le_bytes());
            }
        }
    }
}

fn join4(simd: Simd, p: [&[u8]; 4], base: Option<&[u8]>, rotate: bool, out: &mut [u8]) {
    let r = u32::from(rotate);
    let done = join_simd(simd, &p, base, r, out);
    let p = p.map(|p| &p[done..]);
    let (out, base) = (&mut out[4 * done..], base.map(|b| &b[4 * done..]));
    let planes = p[0].iter().zip(p[1]).zip(p[2].iter().zip(p[3]));
    let words = out.chunks_exact_mut(4).zip(planes);
    match base {
        Some(b) => {
            for ((o, ((&a0, &a1), (&a2, &a3))), b) in words.zip(b.chunks_exact(4)) {
                let w = u32::from_le_bytes([a0, a1, a2, a3]).rotate_right(r) ^ le32(b);
                o.copy_from_slice(&w.to_le_bytes());
            }
        }
        None => {
            for (o, ((&a0, &a1), (&a2, &a3))) in words {
                let w = u32::from_le_bytes([a0, a1, a2, a3]).rotate_right(r);
                o.copy_from_slice(&w.to_le_bytes());
            }
        }
    }
}

fn xor_in_place(out: &mut [u8], base: &[u8]) {
    for (o, &b) in out.iter_mut().zip(base) {
        *o ^= b;
    }
}

/// Splits f32 `data` into 4 byte planes of its zigzagged differences from `base`
/// (`planes.len() == data.len() == base.len()`): plane `k` holds byte `k` of
/// `zigzag(data_word - base_word)`, the words as wrapping `i32`s.
pub(crate) fn split_difference(data: &[u8], base: &[u8], planes: &mut [u8]) {
    Simd::detect().run(
        #[inline(always)]
        || split_difference_words(data, base, planes),
    );
}

/// The word loop of [`split_difference`].
#[inline(always)]
fn split_difference_words(data: &[u8], base: &[u8], planes: &mut [u8]) {
    let (p0, rest) = planes.split_at_mut(data.len() / 4);
    let words = data.as_chunks::<4>().0.iter().zip(base.as_chunks::<4>().0);
    cut4(
        p0,
        rest,
        words.map(|(d, b)| zigzag(u32::from_le_bytes(*d).wrapping_sub(u32::from_le_bytes(*b)))),
    );
}

/// The inverse of [`split_difference`]: `out` (`4 * m` bytes for the first `m` elements)
/// gets `base_word + unzigzag(word)`; `base` is at least as long as `out`.
pub(crate) fn join_difference(planes: &[Plane<'_>; 4], base: &[u8], out: &mut [u8]) {
    let n = out.len() / 4;
    let filled = constant_fills(planes, n);
    let p = plane_slices(planes, &filled);
    let p = [&p[0][..n], &p[1][..n], &p[2][..n], &p[3][..n]];
    join_difference_with(Simd::detect(), p, base, out);
}

/// [`join_difference`]'s word loop in the variant `simd`.
fn join_difference_with(simd: Simd, planes: [&[u8]; 4], base: &[u8], out: &mut [u8]) {
    simd.run(
        #[inline(always)]
        || join_difference_words(planes, base, out),
    );
}

/// The word loop of [`join_difference`], over planes of at least `out.len() / 4` bytes.
#[inline(always)]
fn join_difference_words(planes: [&[u8]; 4], base: &[u8], out: &mut [u8]) {
    let [p0, p1, p2, p3] = planes;
    let planes = p0.iter().zip(p1).zip(p2.iter().zip(p3));
    let words = out
        .as_chunks_mut::<4>()
        .0
        .iter_mut()
        .zip(base.as_chunks::<4>().0);
    for ((o, b), ((&a0, &a1), (&a2, &a3))) in words.zip(planes) {
        let d = unzigzag(u32::from_le_bytes([a0, a1, a2, a3]));
        *o = u32::from_le_bytes(*b).wrapping_add(d).to_le_bytes();
    }
}

/// A wrapping `i32` difference (as `u32` bits) with its sign moved to bit 0.
fn zigzag(d: u32) -> u32 {
    (d << 1) ^ ((d as i32 >> 31) as u32)
}

fn unzigzag(z: u32) -> u32 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

/// Elements of the sample [`differences_code_smaller`] measures: runs of [`SAMPLE_RUN`]
/// spread over the block.
const SAMPLE: usize = 8192;
const SAMPLE_RUN: usize = 64;
/// How much smaller (a fraction) the differences' estimate must be for them to be chosen:
/// the estimate is order-0 per plane, while the XOR cut's exponent plane may code below
/// its order-0 entropy (marked, ADR 0019).
const DIFFERENCE_MARGIN: f64 = 0.01;

/// Whether the zigzagged differences of f32 `data` from `base` code smaller than their
/// rotated XOR, by the order-0 entropies of the four byte planes of a sample of the block.
pub(crate) fn differences_code_smaller(data: &[u8], base: &[u8]) -> bool {
    let (d, b) = (data.as_chunks::<4>().0, base.as_chunks::<4>().0);
    let n = d.len().min(b.len());
    if n == 0 {
        return false;
    }
    let runs = (SAMPLE / SAMPLE_RUN).min(n.div_ceil(SAMPLE_RUN));
    let stride = n / runs;
    // Two tables per plane, for elements in turn, so that repeated bytes (the top planes'
    // zeros, mostly) do not wait on each other's stores.
    let mut xor = [[[0u32; 256]; 4]; 2];
    let mut diff = [[[0u32; 256]; 4]; 2];
    let mut count = |t: usize, d: &[u8; 4], b: &[u8; 4]| {
        let (d, b) = (u32::from_le_bytes(*d), u32::from_le_bytes(*b));
        let x = (d ^ b).rotate_left(1).to_le_bytes();
        let z = zigzag(d.wrapping_sub(b)).to_le_bytes();
        for k in 0..4 {
            xor[t][k][usize::from(x[k])] += 1;
            diff[t][k][usize::from(z[k])] += 1;
        }
    };
    let mut sampled = 0usize;
    for r in 0..runs {
        let start = r * stride;
        let end = (start + SAMPLE_RUN).min(n);
        let (d, b) = (&d[start..end], &b[start..end]);
        sampled += d.len();
        let pairs = d.chunks_exact(2).zip(b.chunks_exact(2));
        for (d, b) in pairs {
            count(0, &d[0], &b[0]);
            count(1, &d[1], &b[1]);
        }
        if d.len() % 2 == 1 {
            count(0, &d[d.len() - 1], &b[d.len() - 1]);
        }
    }
    let bits = |h: &[[[u32; 256]; 4]; 2]| -> f64 {
        (0..4)
            .map(|k| {
                let counts = h[0][k].iter().zip(&h[1][k]).map(|(a, b)| a + b);
                sample_bits(sampled, counts)
            })
            .sum()
    };
    bits(&diff) < bits(&xor) * (1.0 - DIFFERENCE_MARGIN)
}

/// The order-0 entropy in bits of `total` (at most [`SAMPLE`]) sampled symbols with these
/// counts: `total log2 total - sum c log2 c`, from a table of `c log2 c` computed once.
fn sample_bits(total: usize, counts: impl Iterator<Item = u32>) -> f64 {
    static N_LOG_N: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    let table = N_LOG_N.get_or_init(|| {
        (0..=SAMPLE)
            .map(|c| {
                if c == 0 {
                    0.0
                } else {
                    c as f64 * (c as f64).log2()
                }
            })
            .collect()
    });
    let own: f64 = counts.map(|c| table[c as usize]).sum();
    table[total] - own
}

/// One decoded plane: its bytes, or a single byte repeated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plane<'a> {
    /// `n` bytes.
    Bytes(&'a [u8]),
    /// The same byte `n` times.
    Constant(u8),
}

impl Plane<'_> {
    #[inline(always)]
    pub(crate) fn at(&self, i: usize) -> u8 {
        match self {
            Plane::Bytes(b) => b[i],
            Plane::Constant(c) => *c,
        }
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn word<const W: usize>(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a[..W].copy_from_slice(&b[..W]);
    u64::from_le_bytes(a)
}

fn mask<const W: usize>() -> u64 {
    if W >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * W)) - 1
    }
}

fn rotl<const W: usize>(w: u64) -> u64 {
    ((w << 1) | (w >> (8 * W - 1))) & mask::<W>()
}

fn rotr<const W: usize>(w: u64) -> u64 {
    ((w >> 1) | (w << (8 * W - 1))) & mask::<W>()
}

/// Bits of the head plane of the head cut.
pub(crate) const HEAD_BITS: u32 = 10;
/// Bits of the last plane of the head cut.
pub(crate) const TAIL_BITS: u32 = 6;

/// Splits `data` (and `data ^ base`) into the head cut (`W` is 2 or 4): `head` gets the
/// top [`HEAD_BITS`] bits of each rotated word; `rest` (`(W - 1) * n` bytes) gets the next
/// `W - 2` bytes, top down, one plane each, then the low [`TAIL_BITS`] bits.
pub(crate) fn split_head<const W: usize>(
    data: &[u8],
    base: Option<&[u8]>,
    head: &mut [u16],
    rest: &mut [u8],
) {
    Simd::detect().run(
        #[inline(always)]
        || split_head_words::<W>(data, base, head, rest),
    );
}

/// The word loops of [`split_head`].
#[inline(always)]
fn split_head_words<const W: usize>(
    data: &[u8],
    base: Option<&[u8]>,
    head: &mut [u16],
    rest: &mut [u8],
) {
    let n = head.len();
    match W {
        2 => {
            let tail = &mut rest[..n];
            let words = data.as_chunks::<2>().0.iter();
            match base {
                Some(b) => {
                    for (((h, t), d), b) in head
                        .iter_mut()
                        .zip(tail)
                        .zip(words)
                        .zip(b.as_chunks::<2>().0)
                    {
                        let w = (u16::from_le_bytes(*d) ^ u16::from_le_bytes(*b)).rotate_left(1);
                        *h = w >> TAIL_BITS;
                        *t = (w & 0x3F) as u8;
                    }
                }
                None => {
                    for ((h, t), d) in head.iter_mut().zip(tail).zip(words) {
                        let w = u16::from_le_bytes(*d).rotate_left(1);
                        *h = w >> TAIL_BITS;
                        *t = (w & 0x3F) as u8;
                    }
                }
            }
        }
        _ => {
            let (p1, rest) = rest.split_at_mut(n);
            let (p2, p3) = rest.split_at_mut(n);
            let planes = head
                .iter_mut()
                .zip(p1.iter_mut())
                .zip(p2.iter_mut().zip(p3.iter_mut()));
            let put = |((h, a), (b, c)): ((&mut u16, &mut u8), (&mut u8, &mut u8)), w: u32| {
                *h = (w >> 22) as u16;
                *a = (w >> 14) as u8;
                *b = (w >> 6) as u8;
                *c = (w & 0x3F) as u8;
            };
            match base {
                Some(bs) => {
                    let words = data.as_chunks::<4>().0.iter().zip(bs.as_chunks::<4>().0);
                    for ((d, b), p) in words.zip(planes) {
                        put(
                            p,
                            (u32::from_le_bytes(*d) ^ u32::from_le_bytes(*b)).rotate_left(1),
                        );
                    }
                }
                None => {
                    for (d, p) in data.as_chunks::<4>().0.iter().zip(planes) {
                        put(p, u32::from_le_bytes(*d).rotate_left(1));
                    }
                }
            }
        }
    }
}

/// The head plane of the head cut when decoded: its symbols, or one repeated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Head<'a> {
    /// `n` symbols.
    Words(&'a [u16]),
    /// The same symbol `n` times.
    Constant(u16),
}

/// The inverse of [`split_head`]: rebuilds words from the head and the `W - 1` other
/// planes (symbols below `2^HEAD_BITS`, `2^8` and `2^TAIL_BITS`), un-rotates, XORs with
/// `base`, and writes `out` (`n * W` bytes).
pub(crate) fn join_head<const W: usize>(
    head: Head<'_>,
    rest: &[Plane<'_>],
    base: Option<&[u8]>,
    out: &mut [u8],
) {
    let n = out.len() / W;
    // Constant planes become filled ones, so that the word loops below take slices.
    let head_words;
    let h = match head {
        Head::Words(w) => w,
        Head::Constant(c) => {
            head_words = vec![c; n];
            &head_words
        }
    };
    let filled = constant_fills(rest, n);
    let p = plane_slices(rest, &filled);
    join_head_from::<W>(0, h, &p, base, out);
}

/// The end of a head decoded by `rans::decode_joined`: joins the words of elements
/// `joined..` (the kernel wrote the first `joined`) from the head symbols `h` and the other
/// planes `p` (as slices, see [`plane_slices`]), then XORs `base` in.
pub(crate) fn join_head_from<const W: usize>(
    joined: usize,
    h: &[u16],
    p: &[&[u8]],
    base: Option<&[u8]>,
    out: &mut [u8],
) {
    let mut rest = [&[][..]; 3];
    for (r, s) in rest.iter_mut().zip(p) {
        *r = &s[joined..];
    }
    let rest = &rest[..p.len()];
    join_head_words_with(Simd::detect(), &h[joined..], rest, &mut out[joined * W..]);
    if let Some(b) = base {
        xor_in_place(out, b);
    }
}

/// [`join_head_words`] with the instruction set `simd`.
fn join_head_words_with(simd: Simd, h: &[u16], p: &[&[u8]], out: &mut [u8]) {
    simd.run(
        #[inline(always)]
        || join_head_words(h, p, out),
    );
}

/// The word loops of [`join_head`]: head symbols `h` and the other planes `p` into words.
#[inline(always)]
fn join_head_words(h: &[u16], p: &[&[u8]], out: &mut [u8]) {
    match p {
        [t] => {
            let words = out.as_chunks_mut::<2>().0.iter_mut().zip(h.iter().zip(*t));
            for (o, (&h, &t)) in words {
                *o = (h << TAIL_BITS | u16::from(t))
                    .rotate_right(1)
                    .to_le_bytes();
            }
        }
        [a, b, c] => {
            let planes = h.iter().zip(*a).zip(b.iter().zip(*c));
            for (o, ((&h, &a), (&b, &c))) in out.as_chunks_mut::<4>().0.iter_mut().zip(planes) {
                let w = u32::from(h) << 22 | u32::from(a) << 14 | u32::from(b) << 6 | u32::from(c);
                *o = w.rotate_right(1).to_le_bytes();
            }
        }
        // Only 2- and 4-byte words are cut this way.
        _ => {}
    }
}

/// Appends `values` packed at `bits` (1..=16) bits each, most significant bit first (the
/// first value's top bit is the top bit of the first byte, as in base64): `ceil(n * bits /
/// 8)` bytes, the unused low bits of the last byte zero. Values must be below `2^bits`.
pub(crate) fn pack<S: Symbol>(values: &[S], bits: u32, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + packed_len(values.len(), bits), 0);
    let dst = &mut out[start..];
    let mut done = 0;
    if bits == 6 {
        if let Some(v) = S::as_bytes(values) {
            done = pack6(v, dst);
        }
    }
    let mut acc = 0u64;
    let mut held = 0;
    let mut at = done / 4 * 3;
    for &v in &values[done..] {
        acc = acc << bits | v.index() as u64;
        held += bits;
        while held >= 8 {
            held -= 8;
            dst[at] = (acc >> held) as u8;
            at += 1;
        }
    }
    if held > 0 {
        dst[at] = (acc << (8 - held)) as u8;
    }
}

/// Bytes that [`pack`] writes for `n` values of `bits` bits (saturating: an element count
/// read from a header, however large, gives a length no stored plane has).
pub(crate) fn packed_len(n: usize, bits: u32) -> usize {
    n.saturating_mul(bits as usize).div_ceil(8)
}

/// The inverse of [`pack`]: fills `out` from `src`, which must be exactly
/// `packed_len(out.len(), bits)` bytes. `false` if the unused bits of the last byte are
/// not zero.
pub(crate) fn unpack<S: Symbol>(src: &[u8], bits: u32, out: &mut [S]) -> bool {
    let mut done = 0;
    if bits == 6 {
        if let Some(o) = S::as_bytes_mut(out) {
            done = unpack6(src, o);
        }
    }
    let mask = (1u64 << bits) - 1;
    let mut acc = 0u64;
    let mut held = 0;
    let mut bytes = src[(done / 4 * 3).min(src.len())..].iter();
    for o in &mut out[done..] {
        while held < bits {
            acc = acc << 8 | u64::from(bytes.next().copied().unwrap_or(0));
            held += 8;
        }
        held -= bits;
        *o = S::from_index((acc >> held & mask) as u32);
    }
    acc & ((1 << held) - 1) == 0
}

/// Packs whole groups of four 6-bit values into three bytes each (`a << 18 | b << 12 | c
/// << 6 | d`, big-endian); returns the values packed, a multiple of 4.
fn pack6(values: &[u8], dst: &mut [u8]) -> usize {
    pack6_with(Simd::detect(), values, dst)
}

/// [`pack6`] with the given kernel (the tests compare them).
fn pack6_with(simd: Simd, values: &[u8], dst: &mut [u8]) -> usize {
    let done = match simd {
        // SAFETY: `Simd::Avx2` is only chosen when the CPU has AVX2 (`Simd::detect`), the
        // one requirement of the call.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { avx2::pack6(values, dst) },
        Simd::Scalar => 0,
    };
    for (v, d) in values[done..]
        .chunks_exact(4)
        .zip(dst[done / 4 * 3..].chunks_exact_mut(3))
    {
        let w =
            u32::from(v[0]) << 18 | u32::from(v[1]) << 12 | u32::from(v[2]) << 6 | u32::from(v[3]);
        d.copy_from_slice(&w.to_be_bytes()[1..]);
    }
    values.len() / 4 * 4
}

/// The inverse of [`pack6`]: unpacks whole groups; returns the values written.
fn unpack6(src: &[u8], out: &mut [u8]) -> usize {
    unpack6_with(Simd::detect(), src, out)
}

/// [`unpack6`] with the given kernel (the tests compare them).
fn unpack6_with(simd: Simd, src: &[u8], out: &mut [u8]) -> usize {
    let done = match simd {
        // SAFETY: `Simd::Avx2` is only chosen when the CPU has AVX2 (`Simd::detect`), the
        // one requirement of the call.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { avx2::unpack6(src, out) },
        Simd::Scalar => 0,
    };
    for (o, s) in out[done..]
        .chunks_exact_mut(4)
        .zip(src[done / 4 * 3..].chunks_exact(3))
    {
        let w = u32::from_be_bytes([0, s[0], s[1], s[2]]);
        o[0] = (w >> 18) as u8;
        o[1] = (w >> 12 & 0x3F) as u8;
        o[2] = (w >> 6 & 0x3F) as u8;
        o[3] = (w & 0x3F) as u8;
    }
    out.len() / 4 * 4
}

/// For each constant plane, its `n` bytes (empty for the others).
pub(crate) fn constant_fills(planes: &[Plane<'_>], n: usize) -> Vec<Vec<u8>> {
    planes
        .iter()
        .map(|p| match p {
            Plane::Constant(c) => vec![*c; n],
            Plane::Bytes(_) => Vec::new(),
        })
        .collect()
}

/// Every plane as a slice: its bytes, or its fill from [`constant_fills`].
pub(crate) fn plane_slices<'a>(planes: &'a [Plane<'a>], filled: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
    planes
        .iter()
        .zip(filled)
        .map(|(p, f)| match p {
            Plane::Bytes(b) => *b,
            Plane::Constant(_) => f.as_slice(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SplitMix64;

    #[test]
    fn six_bit_packing_is_the_same_with_and_without_simd() {
        let mut rng = SplitMix64::new(0x9E37_79B9);
        for n in [0, 4, 32, 36, 1000, 65_536 + 12] {
            let values: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8 & 0x3F).collect();
            let groups = n / 4 * 4;
            let (mut a, mut b) = (vec![0u8; groups / 4 * 3], vec![0u8; groups / 4 * 3]);
            assert_eq!(pack6_with(Simd::detect(), &values, &mut a), groups);
            assert_eq!(pack6_with(Simd::Scalar, &values, &mut b), groups);
            assert_eq!(a, b, "{n} values");
            let (mut c, mut d) = (vec![0u8; groups], vec![0u8; groups]);
            assert_eq!(unpack6_with(Simd::detect(), &a, &mut c), groups);
            assert_eq!(unpack6_with(Simd::Scalar, &a, &mut d), groups);
            assert_eq!(c, d);
            assert_eq!(c, values[..groups]);
        }
    }

    #[test]
    fn joins_match_a_plain_transpose() {
        let mut rng = SplitMix64::new(0x2545_F491);
        let mut byte = move || rng.next_u64() as u8;
        for n in [0usize, 1, 31, 32, 33, 100, 1000] {
            for rotate in [false, true] {
                for with_base in [false, true] {
                    let p: Vec<Vec<u8>> =
                        (0..4).map(|_| (0..n).map(|_| byte()).collect()).collect();
                    let base: Vec<u8> = (0..4 * n).map(|_| byte()).collect();
                    let b = with_base.then_some(base.as_slice());
                    let r = u32::from(rotate);
                    // Every kernel (the scalar one is the reference) against the transpose.
                    for simd in [Simd::Scalar, Simd::detect()] {
                        let mut out2 = vec![0u8; 2 * n];
                        join2(
                            simd,
                            &p[0],
                            &p[1],
                            b.map(|b| &b[..2 * n]),
                            rotate,
                            &mut out2,
                        );
                        let mut out4 = vec![0u8; 4 * n];
                        join4(simd, [&p[0], &p[1], &p[2], &p[3]], b, rotate, &mut out4);
                        for i in 0..n {
                            let w = u16::from_le_bytes([p[0][i], p[1][i]]).rotate_right(r);
                            let w =
                                w ^ b.map_or(0, |b| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]));
                            assert_eq!(out2[2 * i..2 * i + 2], w.to_le_bytes(), "{n} {rotate} {i}");
                            let w = u32::from_le_bytes([p[0][i], p[1][i], p[2][i], p[3][i]]);
                            let w = w.rotate_right(r) ^ b.map_or(0, |b| le32(&b[4 * i..]));
                            assert_eq!(out4[4 * i..4 * i + 4], w.to_le_bytes(), "{n} {rotate} {i}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sample_bits_are_the_order0_entropy() {
        let mut rng = SplitMix64::new(0x5A3B_1E00);
        for total in [1usize, 2, 100, 4096, SAMPLE] {
            for spread in [1u64, 3, 40, 256] {
                let mut counts = [0u32; 256];
                for _ in 0..total {
                    counts[(rng.next_u64() % spread) as usize] += 1;
                }
                let exact = super::super::rans::order0_bits(&counts);
                let got = sample_bits(total, counts.iter().copied());
                assert!(
                    (got - exact).abs() <= 1e-9 * exact.max(1.0),
                    "{total} symbols of {spread}: {got} against {exact}"
                );
            }
        }
    }

    #[test]
    fn difference_joins_are_the_same_with_and_without_simd() {
        let mut rng = SplitMix64::new(0x0D1F_F00D);
        for n in [0usize, 1, 7, 8, 9, 31, 32, 33, 1000] {
            let data: Vec<u8> = (0..4 * n).map(|_| rng.next_u64() as u8).collect();
            let base: Vec<u8> = (0..4 * n).map(|_| rng.next_u64() as u8).collect();
            let mut planes = vec![0u8; 4 * n];
            split_difference(&data, &base, &mut planes);
            let p: Vec<&[u8]> = planes.chunks(n.max(1)).collect();
            let p = if n == 0 {
                [&[][..]; 4]
            } else {
                [p[0], p[1], p[2], p[3]]
            };
            for simd in [Simd::Scalar, Simd::detect()] {
                let mut out = vec![0xA5u8; 4 * n];
                join_difference_with(simd, p, &base, &mut out);
                assert_eq!(out, data, "{n} words, {simd:?}");
            }
        }
    }

    #[test]
    fn head_joins_are_the_same_with_and_without_simd() {
        let mut rng = SplitMix64::new(0x1234_5677);
        for n in [0usize, 1, 15, 16, 17, 100, 1000] {
            let h: Vec<u16> = (0..n).map(|_| rng.next_u64() as u16 & 0x3FF).collect();
            let p: Vec<Vec<u8>> = (0..3)
                .map(|_| (0..n).map(|_| rng.next_u64() as u8).collect())
                .collect();
            let two = [&p[0][..]];
            let four = [&p[0][..], &p[1][..], &p[2][..]];
            for (planes, w) in [(&two[..], 2), (&four[..], 4)] {
                let mut a = vec![0u8; w * n];
                let mut b = vec![0u8; w * n];
                join_head_words_with(Simd::detect(), &h, planes, &mut a);
                join_head_words_with(Simd::Scalar, &h, planes, &mut b);
                assert_eq!(a, b, "{n} values, {w}-byte words");
            }
        }
    }
}

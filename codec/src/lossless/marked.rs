//! Method 5: the exponent plane of a bf16 or f32 delta, coded only where the lower planes
//! say an exponent can have changed.
//!
//! When a weight moves by a small step, its exponent changes only where it crosses a
//! power of two, and then its top mantissa bit flips too; or where it crosses zero, and
//! then its sign flips. The XOR delta's lower planes are decoded first, so both bits are
//! known when the exponent plane (the last byte plane, `W - 1`) is decoded: element `i` is
//! *marked* when bit 0 of plane 0 (the sign) or bit 7 of plane `W - 2` (the top mantissa
//! bit: of plane 0 for bf16, plane 2 for f32) is set. Only marked elements' exponent bytes
//! are coded; the others are zero, but for a few *exceptions* (large relative moves)
//! listed by position. On fine-tuning deltas about 1 % of the elements are marked, so the
//! plane decodes in a scan instead of one rANS symbol per element, and codes smaller
//! (ADR 0019).
//!
//! # Body layout
//!
//! | bytes | field |
//! |---|---|
//! | varint | `e`, the number of exceptions, at most the element count |
//! | `e` times: varint, 1 | the exception's position minus the previous one's plus one (the first: its position), then its byte; positions are unmarked |
//! | 1 | inner method of the `m` marked elements' bytes (in element order): 0 raw (`m` bytes), 2 constant (1 byte, `m >= 1`), 3 rANS, 4 rANS with base contexts (as the plane methods, the contexts being those of the marked elements) |
//! | ... | the inner body, to the end |
//!
//! Varints are LEB128: 7 bits a byte, least significant first, at most 10 bytes, the
//! value below `2^64`.

use super::planes::Plane;
use super::sparse::{ListError, ListReader, ListWriter};
use super::LosslessError;

/// Whether element `i` is marked (`sign`: plane 0, `mantissa`: plane `W - 2`).
#[inline(always)]
fn mark(sign: &Plane<'_>, mantissa: &Plane<'_>, i: usize) -> usize {
    usize::from((sign.at(i) & 1) | (mantissa.at(i) >> 7))
}

/// The marks of 8 elements from `at`, one per byte (bit 0), as a little-endian word.
#[inline(always)]
fn marks8(sign: &Plane<'_>, mantissa: &Plane<'_>, at: usize) -> u64 {
    let word = |p: &Plane<'_>| match p {
        Plane::Bytes(b) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(a)
        }
        Plane::Constant(c) => u64::from(*c) * ONES,
    };
    (word(sign) | (word(mantissa) >> 7)) & ONES
}

/// The marked elements among the first `n`, in order. Both planes hold at least `n`
/// elements (the caller's planes of one block).
pub(super) fn marked(sign: &Plane<'_>, mantissa: &Plane<'_>, n: usize) -> Vec<usize> {
    #[inline(always)]
    fn add(out: &mut Vec<usize>, at: usize, mut m: u64) {
        while m != 0 {
            out.push(at + m.trailing_zeros() as usize / 8);
            m &= m - 1;
        }
    }
    let full = n / 8 * 8;
    let mut out = Vec::with_capacity(count(sign, mantissa, n));
    match (sign, mantissa) {
        (Plane::Bytes(s), Plane::Bytes(t)) => {
            // 64 elements at a time, their marks gathered into one bit each: a word without
            // marks costs no branch per 8 elements, and a word with some costs one
            // predictable loop over its set bits.
            let wide = n / 64 * 64;
            let (s64, t64) = (s[..wide].as_chunks::<64>().0, t[..wide].as_chunks::<64>().0);
            for (k, (a, b)) in s64.iter().zip(t64).enumerate() {
                let mut bits = marks64(a, b);
                while bits != 0 {
                    out.push(64 * k + bits.trailing_zeros() as usize);
                    bits &= bits - 1;
                }
            }
            let (s, t) = (
                s[wide..full].as_chunks::<8>().0,
                t[wide..full].as_chunks::<8>().0,
            );
            for (k, (a, b)) in s.iter().zip(t).enumerate() {
                let m = word(a, b);
                if m != 0 {
                    add(&mut out, wide + 8 * k, m);
                }
            }
        }
        _ => {
            for at in (0..full).step_by(8) {
                add(&mut out, at, marks8(sign, mantissa, at));
            }
        }
    }
    for i in full..n {
        if mark(sign, mantissa, i) != 0 {
            out.push(i);
        }
    }
    out
}

const ONES: u64 = 0x0101_0101_0101_0101;

/// The marks of 64 elements, one per bit (element `i` at bit `i`).
#[inline(always)]
fn marks64(sign: &[u8; 64], mantissa: &[u8; 64]) -> u64 {
    let (s, t) = (sign.as_chunks::<8>().0, mantissa.as_chunks::<8>().0);
    let mut bits = 0;
    for (j, (a, b)) in s.iter().zip(t).enumerate() {
        bits |= gather_bytes(word(a, b)) << (8 * j);
    }
    bits
}

/// Bit 0 of each byte of `m` (whose other bits are clear) moved to bit `i` for byte `i`.
///
/// The product places byte `i`'s bit at bit `56 + i` for every pair of terms whose byte
/// and multiplier indices sum to 7; the pairs summing to `s < 7` land in bits
/// `7s + 7 ..= 8s + 7`, below 56 and apart from each other, so no carry reaches the top
/// byte, and those summing to more than 7 overflow out of the word.
#[inline(always)]
fn gather_bytes(m: u64) -> u64 {
    m.wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// The marks of 8 elements, one per byte, from their sign and mantissa bytes.
#[inline(always)]
fn word(sign: &[u8; 8], mantissa: &[u8; 8]) -> u64 {
    (u64::from_le_bytes(*sign) | u64::from_le_bytes(*mantissa) >> 7) & ONES
}

/// The number of marked elements among the first `n`.
pub(super) fn count(sign: &Plane<'_>, mantissa: &Plane<'_>, n: usize) -> usize {
    let full = n / 8 * 8;
    let words: usize = match (sign, mantissa) {
        (Plane::Bytes(s), Plane::Bytes(t)) => {
            let (s, t) = (s[..full].as_chunks::<8>().0, t[..full].as_chunks::<8>().0);
            s.iter()
                .zip(t)
                .map(|(a, b)| word(a, b).count_ones() as usize)
                .sum()
        }
        _ => (0..full)
            .step_by(8)
            .map(|at| marks8(sign, mantissa, at).count_ones() as usize)
            .sum(),
    };
    words + (full..n).map(|i| mark(sign, mantissa, i)).sum::<usize>()
}

/// `src` at the marked elements `marked` (each inside `src`; 0 for one that is not).
pub(super) fn gather(marked: &[usize], src: &[u8]) -> Vec<u8> {
    marked
        .iter()
        .map(|&i| src.get(i).copied().unwrap_or(0))
        .collect()
}

/// Appends a LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint at `*pos`; `None` if truncated, longer than 10 bytes or over
/// `2^64 - 1`.
pub(super) fn get_varint(src: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for k in 0..10 {
        let b = *src.get(*pos)?;
        *pos += 1;
        let bits = u64::from(b & 0x7F);
        if k == 9 && bits > 1 {
            return None;
        }
        v |= bits << (7 * k);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Writes the exceptions of `plane` (unmarked elements whose byte is not zero) to `out`;
/// `None`, with `out` unspecified, if there are more than `max`.
pub(super) fn put_exceptions(
    sign: &Plane<'_>,
    mantissa: &Plane<'_>,
    plane: &[u8],
    max: usize,
    out: &mut Vec<u8>,
) -> Option<()> {
    let mut list = Vec::new();
    let mut add = |i: usize| -> Option<()> {
        if list.len() == max {
            return None;
        }
        list.push((i, plane[i]));
        Some(())
    };
    // Eight elements a word: most words are zero; the others' exceptions are the bits of
    // their non-zero bytes without a mark, visited in order.
    let (words, rest) = plane.as_chunks::<8>();
    for (k, w) in words.iter().enumerate() {
        let p = u64::from_le_bytes(*w);
        if p == 0 {
            continue;
        }
        let at = 8 * k;
        let mut exceptions = nonzero_bytes(p) & !marks8(sign, mantissa, at);
        while exceptions != 0 {
            add(at + exceptions.trailing_zeros() as usize / 8)?;
            exceptions &= exceptions - 1;
        }
    }
    let full = plane.len() - rest.len();
    for (i, &b) in rest.iter().enumerate() {
        if b != 0 && mark(sign, mantissa, full + i) == 0 {
            add(full + i)?;
        }
    }
    put_varint(out, list.len() as u64);
    let mut records = ListWriter::default();
    for (i, s) in list {
        records.push(out, i, s);
    }
    Some(())
}

/// Bit 0 of byte `i` set where byte `i` of `p` is not zero, every other bit clear.
#[inline(always)]
fn nonzero_bytes(p: u64) -> u64 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    // A byte's top bit of `(b & 0x7F) + 0x7F` is set when its low 7 bits are not all zero
    // (the sum is at most 0xFE: no carry into the next byte); or-ed with `b`, when b != 0.
    ((((p & LOW7) + LOW7) | p) >> 7) & ONES
}

/// The parsed head of a method-5 body.
pub(super) struct Body<'a> {
    /// The exception records (varint gap, byte), checked.
    exceptions: &'a [u8],
    /// How many.
    count: usize,
    /// The inner method.
    pub(super) inner: u8,
    /// The inner body.
    pub(super) rest: &'a [u8],
    /// The marked elements, in order.
    pub(super) marked: Vec<usize>,
}

/// Parses and checks a method-5 body of plane `plane` of `n` elements against the marks of
/// its first `m` (`m <= n`; the planes hold `m`): every exception inside the plane, and
/// unmarked when it is among the first `m`; the inner method known and its length right
/// for `raw` and `constant` (when `m < n`, at least what the first `m` need). The marked
/// elements listed are those among the first `m`.
pub(super) fn parse<'a>(
    body: &'a [u8],
    plane: usize,
    sign: &Plane<'_>,
    mantissa: &Plane<'_>,
    m: usize,
    n: usize,
) -> Result<Body<'a>, LosslessError> {
    let bad = |reason: &'static str| LosslessError::Marked { plane, reason };
    let mut pos = 0;
    let count = get_varint(body, &mut pos).ok_or(bad("bad exception count"))?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&c| c <= n)
        .ok_or(bad("more exceptions than elements"))?;
    let start = pos;
    let mut records = ListReader::new(body, pos, n);
    let zero_or_marked = "exception zero or at a marked element";
    for _ in 0..count {
        let (at, _) = records.read().map_err(|e| {
            bad(match e {
                ListError::Truncated => "truncated exceptions",
                ListError::Outside => "exception outside the plane",
                ListError::Zero => zero_or_marked,
            })
        })?;
        if at < m && mark(sign, mantissa, at) != 0 {
            return Err(bad(zero_or_marked));
        }
    }
    let pos = records.pos;
    let exceptions = &body[start..pos];
    let &inner = body.get(pos).ok_or(bad("no inner method"))?;
    let rest = &body[pos + 1..];
    let marked = marked(sign, mantissa, m);
    let (k, whole) = (marked.len(), m == n);
    let ok = match inner {
        0 => rest.len() == k || !whole && rest.len() > k,
        2 => rest.len() == 1 && (k > 0 || !whole),
        3 | 4 => !rest.is_empty() && (k > 0 || !whole),
        _ => false,
    };
    if !ok {
        return Err(bad("inner method or length invalid"));
    }
    Ok(Body {
        exceptions,
        count,
        inner,
        rest,
        marked,
    })
}

impl Body<'_> {
    /// Writes the plane's first `dst.len()` bytes (the `m` of [`parse`]) from the marked
    /// elements' bytes `sub` (one per marked element) and the exceptions.
    pub(super) fn scatter(&self, sub: &[u8], dst: &mut [u8]) {
        dst.fill(0);
        for (&i, &s) in self.marked.iter().zip(sub) {
            if let Some(d) = dst.get_mut(i) {
                *d = s;
            }
        }
        // Checked by `parse`.
        let mut records = ListReader::new(self.exceptions, 0, usize::MAX);
        for _ in 0..self.count {
            let Ok((at, v)) = records.read() else { break };
            if let Some(d) = dst.get_mut(at) {
                *d = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn gathered_bytes_are_the_marks_in_order() {
        for mask in 0..=255u64 {
            let spread = (0..8).fold(0, |m, i| m | ((mask >> i) & 1) << (8 * i));
            assert_eq!(gather_bytes(spread), mask);
        }
    }

    #[test]
    fn nonzero_bytes_marks_each_non_zero_byte() {
        for at in 0..8 {
            for b in 0..=255u64 {
                let p = b << (8 * at) | 0x01 << (8 * ((at + 3) % 8));
                let want = u64::from(b != 0) << (8 * at) | 0x01 << (8 * ((at + 3) % 8));
                assert_eq!(nonzero_bytes(p), want, "byte {at} = {b:#x}");
            }
        }
        assert_eq!(nonzero_bytes(0), 0);
        assert_eq!(nonzero_bytes(u64::MAX), ONES);
    }

    /// [`put_exceptions`] one element at a time.
    fn exceptions_by_element(
        sign: &Plane<'_>,
        mantissa: &Plane<'_>,
        plane: &[u8],
        max: usize,
    ) -> Option<Vec<u8>> {
        let list: Vec<(usize, u8)> = (0..plane.len())
            .filter(|&i| plane[i] != 0 && mark(sign, mantissa, i) == 0)
            .map(|i| (i, plane[i]))
            .collect();
        if list.len() > max {
            return None;
        }
        let mut out = Vec::new();
        put_varint(&mut out, list.len() as u64);
        let mut records = ListWriter::default();
        for (i, b) in list {
            records.push(&mut out, i, b);
        }
        Some(out)
    }

    proptest! {
        #[test]
        fn exceptions_are_the_unmarked_non_zero_bytes(
            planes in proptest::collection::vec(
                (
                    any::<u8>().prop_map(|b| b & 0x81),
                    any::<u8>().prop_map(|b| b & 0x81),
                    prop_oneof![8 => Just(0u8), 1 => any::<u8>()],
                ),
                0..300,
            ),
            constant in proptest::option::of(any::<u8>()),
            max in 0usize..12,
        ) {
            let s: Vec<u8> = planes.iter().map(|p| p.0).collect();
            let t: Vec<u8> = planes.iter().map(|p| p.1).collect();
            let plane: Vec<u8> = planes.iter().map(|p| p.2).collect();
            let sign = match constant {
                Some(c) => Plane::Constant(c & 0x81),
                None => Plane::Bytes(&s),
            };
            let mantissa = Plane::Bytes(&t);
            let mut out = Vec::new();
            let got = put_exceptions(&sign, &mantissa, &plane, max, &mut out).map(|()| out);
            prop_assert_eq!(got, exceptions_by_element(&sign, &mantissa, &plane, max));
        }

        #[test]
        fn marked_lists_every_marked_element(
            planes in proptest::collection::vec(
                (prop_oneof![6 => Just(0u8), 1 => any::<u8>()], any::<u8>().prop_map(|b| b & 0x81)),
                0..300,
            ),
        ) {
            let (s, t): (Vec<u8>, Vec<u8>) = planes.into_iter().unzip();
            let (sign, mantissa) = (Plane::Bytes(&s), Plane::Bytes(&t));
            let want: Vec<usize> = (0..s.len())
                .filter(|&i| mark(&sign, &mantissa, i) != 0)
                .collect();
            prop_assert_eq!(count(&sign, &mantissa, s.len()), want.len());
            prop_assert_eq!(marked(&sign, &mantissa, s.len()), want);
        }

        #[test]
        fn varints_round_trip(v in any::<u64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut pos = 0;
            prop_assert_eq!(get_varint(&out, &mut pos), Some(v));
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn varints_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut pos = 0;
            let _ = get_varint(&bytes, &mut pos);
            prop_assert!(pos <= bytes.len());
        }
    }
}

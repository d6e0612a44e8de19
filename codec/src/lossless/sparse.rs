//! Method 6: a byte plane that is almost all zeros, stored as the list of its non-zero
//! elements.
//!
//! The top byte plane of an f32 delta taken as integer differences (ADR 0032) is zero
//! wherever a value moved by less than 2^23 units in the last place: on a fine-tuning
//! series, all but about 0.1 % of the elements. rANS codes such a plane near its entropy
//! but decodes it one symbol per element; the list decodes by filling the plane with zeros
//! and writing the listed bytes (ADR 0033).
//!
//! # Body layout
//!
//! | bytes | field |
//! |---|---|
//! | varint | `k`, the number of non-zero elements, at most the element count |
//! | `k` times: varint, 1 | the element's position minus the previous one's plus one (the first: its position), then its byte, not zero |
//!
//! Varints are LEB128, as in method 5 ([`super::marked`]). Nothing follows the list.

use super::marked::{get_varint, put_varint};
use super::LosslessError;

/// The number of non-zero bytes of `plane`, or `None` as soon as there are more than
/// `limit` (a plane that is not sparse is not counted to its end).
pub(super) fn count_at_most(plane: &[u8], limit: usize) -> Option<usize> {
    let ones = 0x0101_0101_0101_0101u64;
    let (words, rest) = plane.as_chunks::<8>();
    let mut k = rest.iter().filter(|&&b| b != 0).count();
    for w in words {
        // A byte is non-zero when any of its bits is: fold them into its low bit.
        let v = u64::from_le_bytes(*w);
        let v = v | v >> 4;
        let v = v | v >> 2;
        k += ((v | v >> 1) & ones).count_ones() as usize;
        if k > limit {
            return None;
        }
    }
    (k <= limit).then_some(k)
}

/// Writes a list of (position, byte) records: each position as its gap from the one after
/// the previous record (method 6's elements, method 5's exceptions).
#[derive(Default)]
pub(super) struct ListWriter {
    next: usize,
}

impl ListWriter {
    /// Appends the record of byte `b` at position `i` (above the previous record's).
    pub(super) fn push(&mut self, out: &mut Vec<u8>, i: usize, b: u8) {
        put_varint(out, (i - self.next) as u64);
        out.push(b);
        self.next = i + 1;
    }
}

/// Reads the records [`ListWriter`] writes, checking each: its position below `n`, its
/// byte not zero.
pub(super) struct ListReader<'a> {
    body: &'a [u8],
    /// The offset of the next record in `body`.
    pub(super) pos: usize,
    next: usize,
    n: usize,
}

/// What is wrong with a record [`ListReader`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListError {
    /// The body ends inside it.
    Truncated,
    /// Its position is `n` or more.
    Outside,
    /// Its byte is zero.
    Zero,
}

impl<'a> ListReader<'a> {
    /// A reader of the records from offset `pos` of `body`, positions below `n`.
    pub(super) fn new(body: &'a [u8], pos: usize, n: usize) -> Self {
        ListReader {
            body,
            pos,
            next: 0,
            n,
        }
    }

    /// The next record's position and byte.
    pub(super) fn read(&mut self) -> Result<(usize, u8), ListError> {
        let gap = get_varint(self.body, &mut self.pos).ok_or(ListError::Truncated)?;
        let at = usize::try_from(gap)
            .ok()
            .and_then(|g| self.next.checked_add(g))
            .filter(|&at| at < self.n)
            .ok_or(ListError::Outside)?;
        let &v = self.body.get(self.pos).ok_or(ListError::Truncated)?;
        self.pos += 1;
        if v == 0 {
            return Err(ListError::Zero);
        }
        self.next = at + 1;
        Ok((at, v))
    }
}

/// Appends the body of `plane` as a list of its non-zero elements, of which there are
/// `nonzero` (from [`count_at_most`]).
pub(super) fn put(plane: &[u8], nonzero: usize, out: &mut Vec<u8>) {
    put_varint(out, nonzero as u64);
    let mut list = ListWriter::default();
    for_each_nonzero(plane, |i, b| list.push(out, i, b));
}

/// Calls `f` with the position and byte of each non-zero byte of `plane`, in order, eight
/// bytes at a time: in a plane this sparse most words are zero.
pub(super) fn for_each_nonzero(plane: &[u8], mut f: impl FnMut(usize, u8)) {
    let (words, rest) = plane.as_chunks::<8>();
    for (k, w) in words.iter().enumerate() {
        if u64::from_le_bytes(*w) != 0 {
            for (j, &b) in w.iter().enumerate() {
                if b != 0 {
                    f(8 * k + j, b);
                }
            }
        }
    }
    let full = words.len() * 8;
    for (j, &b) in rest.iter().enumerate() {
        if b != 0 {
            f(full + j, b);
        }
    }
}

/// The histograms [`super::rans::histograms`] counts (with `ctx`, `n` contexts; without,
/// one), of a byte plane with few non-zero bytes, from those bytes alone: each context's
/// zeros are its elements (`per_context[k]` of context `k` over the plane, which `ctx`
/// covers exactly) less its non-zero bytes. The same counts, without a pass of table
/// increments over the zeros.
pub(super) fn histograms(plane: &[u8], contexts: Option<(&[u8], usize, &[u32])>) -> Vec<Vec<u32>> {
    let n = contexts.map_or(1, |c| c.1);
    let mut hists = vec![vec![0u32; 256]; n];
    match contexts {
        Some((ctx, _, _)) => for_each_nonzero(plane, |i, b| {
            hists[usize::from(ctx[i])][usize::from(b)] += 1;
        }),
        None => for_each_nonzero(plane, |_, b| hists[0][usize::from(b)] += 1),
    }
    for (k, h) in hists.iter_mut().enumerate() {
        let elements = contexts.map_or(plane.len() as u32, |c| c.2[k]);
        h[0] = elements - h[1..].iter().sum::<u32>();
    }
    hists
}

/// Decodes the first `dst.len()` elements of plane `plane` of `n` elements from its body.
///
/// The list is read as far as `dst` reaches; when `dst` holds the whole plane, the body is
/// checked to its end (no bytes after the list).
///
/// # Errors
/// [`LosslessError::Sparse`] for a count over `n`, a truncated list, a position outside
/// the plane, a zero byte or bytes after the list.
pub(super) fn decode(
    body: &[u8],
    plane: usize,
    n: usize,
    dst: &mut [u8],
) -> Result<(), LosslessError> {
    let bad = |reason: &'static str| LosslessError::Sparse { plane, reason };
    let mut pos = 0;
    let count = get_varint(body, &mut pos).ok_or(bad("bad count"))?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&c| c <= n)
        .ok_or(bad("more non-zero elements than elements"))?;
    dst.fill(0);
    let mut list = ListReader::new(body, pos, n);
    for _ in 0..count {
        let (at, v) = list.read().map_err(|e| {
            bad(match e {
                ListError::Truncated => "truncated list",
                ListError::Outside => "position outside the plane",
                ListError::Zero => "a listed byte is zero",
            })
        })?;
        match dst.get_mut(at) {
            Some(d) => *d = v,
            // A prefix: the rest of the list is past it.
            None => return Ok(()),
        }
    }
    if list.pos != body.len() && dst.len() == n {
        return Err(bad("bytes after the list"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sparse_plane() -> impl Strategy<Value = Vec<u8>> {
        (1usize..3000).prop_flat_map(|n| {
            proptest::collection::vec((0..n, any::<u8>()), 0..40).prop_map(move |hits| {
                let mut p = vec![0u8; n];
                for (i, b) in hits {
                    p[i] = b;
                }
                p
            })
        })
    }

    proptest! {
        #[test]
        fn round_trips_every_prefix(plane in sparse_plane(), cut in any::<prop::sample::Index>()) {
            let k = plane.iter().filter(|&&b| b != 0).count();
            prop_assert_eq!(count_at_most(&plane, k), Some(k));
            prop_assert_eq!(count_at_most(&plane, k.saturating_sub(1)), (k == 0).then_some(0));
            let mut body = Vec::new();
            put(&plane, k, &mut body);
            let mut out = vec![0xAAu8; plane.len()];
            decode(&body, 3, plane.len(), &mut out).unwrap();
            prop_assert_eq!(&out, &plane);
            let m = cut.index(plane.len() + 1);
            let mut prefix = vec![0x55u8; m];
            decode(&body, 3, plane.len(), &mut prefix).unwrap();
            prop_assert_eq!(&prefix[..], &plane[..m]);
        }

        #[test]
        fn histograms_match_a_full_count(plane in sparse_plane(), seed in any::<u64>(), n in 1usize..17) {
            let mut rng = crate::testing::SplitMix64::new(seed);
            let ctx: Vec<u8> = plane.iter().map(|_| (rng.next_u64() % n as u64) as u8).collect();
            let mut elements = super::super::rans::histogram(&ctx);
            elements.truncate(n);
            prop_assert_eq!(
                histograms(&plane, Some((&ctx, n, &elements))),
                super::super::rans::histograms(&plane, &ctx, n)
            );
            prop_assert_eq!(
                histograms(&plane, None),
                vec![super::super::rans::histogram(&plane)]
            );
        }

        #[test]
        fn bad_bodies_are_errors_not_panics(
            body in proptest::collection::vec(any::<u8>(), 0..64),
            n in 0usize..64,
        ) {
            let mut out = vec![0u8; n];
            match decode(&body, 1, n, &mut out) {
                Ok(()) => {
                    // What decoded is what the body lists, and it lists every byte.
                    let mut again = Vec::new();
                    put(&out, count_at_most(&out, n).unwrap_or(n), &mut again);
                    prop_assert_eq!(again, body);
                }
                Err(e) => {
                    let sparse = matches!(e, LosslessError::Sparse { plane: 1, .. });
                    prop_assert!(sparse, "{}", e);
                }
            }
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let reason = |body: &[u8], n: usize| match decode(body, 0, n, &mut vec![0; n]) {
            Err(LosslessError::Sparse { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(reason(&[], 4), "bad count");
        assert_eq!(reason(&[5], 4), "more non-zero elements than elements");
        assert_eq!(reason(&[1, 4, 7], 4), "position outside the plane");
        assert_eq!(reason(&[1, 2], 4), "truncated list");
        assert_eq!(reason(&[1, 2, 0], 4), "a listed byte is zero");
        assert_eq!(reason(&[1, 2, 9, 0], 4), "bytes after the list");
        // The same trailing byte is not read by a prefix that ends before the list does.
        assert!(decode(&[1, 2, 9, 0], 0, 4, &mut [0; 2]).is_ok());
    }
}

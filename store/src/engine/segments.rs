//! Content-addressed, reference-counted segment storage in the `segments`, `chunks` and
//! `tails` tables.
//!
//! A segment is stored once per content address (xxh3-128 of its bytes), under a local
//! segment id taken from a counter, so its pieces are always appended in ascending key
//! order. redb gives each B-tree leaf a power-of-two number of 4 KiB pages and splits full
//! leaves in half, except when appending at the right end of a tree, where it leaves the full
//! leaf packed. The layout leans on both:
//! - `chunks` holds the body cut into pieces that each fill one leaf of `4 KiB << k`
//!   exactly (binary decomposition of the length, largest first), so a 40 KiB segment takes
//!   40 KiB of pages, not the 64 KiB page a single value would get;
//! - `tails` holds the rest (under 4 KiB) in pieces of at most [`TAIL_PIECE`] bytes, which
//!   pack densely into shared leaves because they are appended in key order to their own
//!   tree. Small segments (biases, norms) are all tail.

use redb::{ReadableTable, Table};
use twox_hash::XxHash3_128;

use super::buffers::POOL;
use super::tables::NEXT_SEGMENT_ID_KEY;
use crate::error::{Corruption, DbContext, Result, StoreError};
use crate::record::{piece_key, segment_key, SegmentInfo, Stored};

/// redb's page size (the default; redb does not let applications change it).
pub(crate) const PAGE: usize = 4096;
/// Bytes a leaf spends on one entry besides its value: 4 bytes of page header, a 4-byte
/// value end offset, the fixed 12-byte key.
const LEAF_OVERHEAD: usize = 4 + 4 + 12;
/// Largest chunk page order: chunks are at most `4 KiB << MAX_ORDER` (64 KiB). redb's
/// compaction moves pages from the end of the file to the lowest free run of the same size,
/// and stops at the first it cannot move: with chunks up to 4 MiB, a store whose saves free
/// and rewrite keyframes and anchors (ADR 0006) kept 2.1 MB past its pages after compaction
/// on the shared dev_ft series (a 20 MB file), where 64 KiB chunks leave 0.08 MB. Reading is
/// a range scan either way; fewer page sizes also round small stores' files less.
const MAX_ORDER: u32 = 4;
/// Largest tail piece: eight full pieces with their 16 bytes of key and offset each fill a
/// 4 KiB leaf exactly (`4 + 8 * (16 + 495) = 4092`); small enough that a leaf wastes little
/// at its end, large enough that the per-piece overhead stays near 3 %.
pub(crate) const TAIL_PIECE: usize = 495;
/// Largest segment the store reads (a 1 GiB block that did not compress, with headroom).
pub(crate) const MAX_SEGMENT_BYTES: u64 = (1 << 30) + (1 << 20);

/// The content address of a segment.
pub(crate) fn address_of(segment: &[u8]) -> u128 {
    XxHash3_128::oneshot(segment)
}

fn capacity(order: u32) -> usize {
    (PAGE << order) - LEAF_OVERHEAD
}

/// How a segment of `len` bytes is cut: chunk lengths (each fills a leaf exactly, largest
/// first) and tail piece lengths (all [`TAIL_PIECE`] but the last).
pub(crate) fn layout(len: usize) -> (Vec<usize>, Vec<usize>) {
    let mut chunks = Vec::new();
    let mut rem = len;
    while rem >= capacity(0) {
        let order = (0..=MAX_ORDER)
            .rev()
            .find(|&k| capacity(k) <= rem)
            .unwrap_or(0);
        chunks.push(capacity(order));
        rem -= capacity(order);
    }
    let mut tail = Vec::with_capacity(rem.div_ceil(TAIL_PIECE));
    while rem > 0 {
        let piece = rem.min(TAIL_PIECE);
        tail.push(piece);
        rem -= piece;
    }
    (chunks, tail)
}

/// Why a segment could not be fetched.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// No segment at this address.
    Missing,
    /// The stored pieces do not add up.
    Damaged(String),
    /// The database failed.
    Store(StoreError),
}

impl From<StoreError> for FetchError {
    fn from(e: StoreError) -> Self {
        FetchError::Store(e)
    }
}

/// The store error for a failed fetch of the segment at `address`, held for block `block` of
/// `(name, step)`.
pub(crate) fn fetch_error(
    e: FetchError,
    name: &str,
    step: u64,
    block: u64,
    address: u128,
) -> StoreError {
    let reason = match e {
        FetchError::Store(e) => return e,
        FetchError::Missing => "is not stored".to_string(),
        FetchError::Damaged(r) => r,
    };
    StoreError::Corrupt(Corruption::SegmentStorage {
        tensor: name.to_string(),
        step,
        block,
        address,
        reason,
    })
}

/// Reads the index entry of a segment.
pub(crate) fn info(
    segments: &impl ReadableTable<u128, &'static [u8]>,
    address: u128,
) -> Result<Option<SegmentInfo>, FetchError> {
    let Some(v) = segments.get(address).ctx("reading the segment index")? else {
        return Ok(None);
    };
    SegmentInfo::from_stored(&segment_key(address), v.value())
        .map(Some)
        .map_err(|e| FetchError::Damaged(format!("index entry: {e}")))
}

/// Reads a whole segment, checking its piece counts, lengths and content address.
pub(crate) fn fetch(
    segments: &impl ReadableTable<u128, &'static [u8]>,
    chunks: &impl ReadableTable<[u8; 12], &'static [u8]>,
    tails: &impl ReadableTable<[u8; 12], &'static [u8]>,
    address: u128,
) -> Result<Vec<u8>, FetchError> {
    let info = info(segments, address)?.ok_or(FetchError::Missing)?;
    if info.len > MAX_SEGMENT_BYTES {
        return Err(FetchError::Damaged(format!(
            "index says {} bytes, over the {MAX_SEGMENT_BYTES}-byte limit",
            info.len
        )));
    }
    let mut out = POOL.take(info.len as usize);
    let found_chunks = read_pieces(chunks, info.id, info.len, &mut out, "chunk")?;
    let found_tail = read_pieces(tails, info.id, info.len, &mut out, "tail piece")?;
    if found_chunks != info.chunks || found_tail != info.tail_pieces || out.len() as u64 != info.len
    {
        return Err(FetchError::Damaged(format!(
            "found {found_chunks} chunks and {found_tail} tail pieces holding {} bytes, index \
             says {} chunks, {} tail pieces, {} bytes",
            out.len(),
            info.chunks,
            info.tail_pieces,
            info.len
        )));
    }
    let actual = address_of(&out);
    if actual != address {
        return Err(FetchError::Damaged(format!(
            "content hash is {actual:032x}: stored bytes changed"
        )));
    }
    Ok(out)
}

/// Appends the pieces of segment `id` from one table to `out`; returns how many there were.
fn read_pieces(
    table: &impl ReadableTable<[u8; 12], &'static [u8]>,
    id: u64,
    limit: u64,
    out: &mut Vec<u8>,
    what: &str,
) -> Result<u32, FetchError> {
    let mut next = 0u32;
    for entry in table
        .range(piece_key(id, 0)..=piece_key(id, u32::MAX))
        .ctx("reading segment pieces")?
    {
        let (key, value) = entry.ctx("reading segment pieces")?;
        let k = key.value();
        let index = u32::from_be_bytes([k[8], k[9], k[10], k[11]]);
        if index != next {
            return Err(FetchError::Damaged(format!(
                "{what} {next} missing (found {what} {index})"
            )));
        }
        let piece = value.value();
        if (out.len() + piece.len()) as u64 > limit {
            return Err(FetchError::Damaged(format!(
                "pieces hold more than the {limit} bytes the index says"
            )));
        }
        out.extend_from_slice(piece);
        next += 1;
    }
    Ok(next)
}

/// The write side: adds and drops references inside a write transaction.
pub(crate) struct SegmentWriter<'a, 'txn> {
    pub(crate) meta: &'a mut Table<'txn, &'static [u8], &'static [u8]>,
    pub(crate) segments: &'a mut Table<'txn, u128, &'static [u8]>,
    pub(crate) chunks: &'a mut Table<'txn, [u8; 12], &'static [u8]>,
    pub(crate) tails: &'a mut Table<'txn, [u8; 12], &'static [u8]>,
}

impl SegmentWriter<'_, '_> {
    /// Adds one reference to `address`, storing `bytes` if the segment is new. Returns
    /// whether the segment was new. `bytes` may be `None` only for a segment known to be
    /// stored (a reference block).
    pub(crate) fn add_ref(
        &mut self,
        address: u128,
        bytes: Option<&[u8]>,
    ) -> Result<bool, FetchError> {
        if let Some(mut info) = info(self.segments, address)? {
            info.refcount += 1;
            self.segments
                .insert(address, info.to_stored(&segment_key(address)).as_slice())
                .ctx("updating the segment index")?;
            return Ok(false);
        }
        let bytes = bytes.ok_or(FetchError::Missing)?;
        let id = self.next_id()?;
        let (chunks, tail) = layout(bytes.len());
        let mut at = 0;
        for (table, sizes) in [(&mut *self.chunks, &chunks), (&mut *self.tails, &tail)] {
            for (i, len) in sizes.iter().enumerate() {
                table
                    .insert(piece_key(id, i as u32), &bytes[at..at + len])
                    .ctx("writing segment pieces")?;
                at += len;
            }
        }
        let info = SegmentInfo {
            refcount: 1,
            len: bytes.len() as u64,
            id,
            chunks: chunks.len() as u32,
            tail_pieces: tail.len() as u32,
        };
        self.segments
            .insert(address, info.to_stored(&segment_key(address)).as_slice())
            .ctx("writing the segment index")?;
        Ok(true)
    }

    /// Takes the next segment id from the counter in the meta table.
    fn next_id(&mut self) -> Result<u64, FetchError> {
        let current = match self
            .meta
            .get(NEXT_SEGMENT_ID_KEY)
            .ctx("reading the segment id counter")?
        {
            Some(v) => {
                let b: [u8; 8] = v.value().try_into().map_err(|_| {
                    FetchError::Damaged("the segment id counter is not 8 bytes".into())
                })?;
                u64::from_le_bytes(b)
            }
            None => 0,
        };
        let next = current
            .checked_add(1)
            .ok_or_else(|| FetchError::Damaged("segment ids exhausted".into()))?;
        self.meta
            .insert(NEXT_SEGMENT_ID_KEY, next.to_le_bytes().as_slice())
            .ctx("writing the segment id counter")?;
        Ok(current)
    }

    /// Drops one reference to `address`, deleting the segment when none is left.
    pub(crate) fn release(&mut self, address: u128) -> Result<(), FetchError> {
        let mut info = info(self.segments, address)?.ok_or(FetchError::Missing)?;
        info.refcount = info.refcount.saturating_sub(1);
        if info.refcount > 0 {
            self.segments
                .insert(address, info.to_stored(&segment_key(address)).as_slice())
                .ctx("updating the segment index")?;
            return Ok(());
        }
        self.segments.remove(address).ctx("removing a segment")?;
        for i in 0..info.chunks {
            self.chunks
                .remove(piece_key(info.id, i))
                .ctx("removing segment pieces")?;
        }
        for i in 0..info.tail_pieces {
            self.tails
                .remove(piece_key(info.id, i))
                .ctx("removing segment pieces")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segment ids are XXH3-128 (stores and remotes are keyed by them): known answers from
    /// the reference implementation, for the empty input and 5000 bytes.
    #[test]
    fn ids_are_xxh3_128() {
        let d: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        assert_eq!(
            XxHash3_128::oneshot(&[]),
            0x99aa_06d3_0147_98d8_6001_c324_468d_497f
        );
        assert_eq!(
            XxHash3_128::oneshot(&d),
            0x703d_7421_6a88_c98d_e096_9ae2_b59a_afcc
        );
    }

    #[test]
    fn layout_fills_pages_and_cuts_the_tail() {
        assert_eq!(layout(0), (vec![], vec![]));
        assert_eq!(layout(10), (vec![], vec![10]));
        assert_eq!(layout(capacity(0)), (vec![capacity(0)], vec![]));
        let n = capacity(3) + capacity(1) + 600;
        assert_eq!(layout(n), (vec![capacity(3), capacity(1)], vec![495, 105]));
        for len in [1usize, 4000, 4075, 4076, 70_000, 1 << 20, 50 << 20] {
            let (c, t) = layout(len);
            assert_eq!(c.iter().sum::<usize>() + t.iter().sum::<usize>(), len);
            assert!(c.iter().all(|&x| x <= capacity(MAX_ORDER)));
            assert!(t.iter().sum::<usize>() < capacity(0));
        }
    }
}

//! A least-recently-used cache of decoded blocks, bounded in bytes.
//!
//! Keyed by segment content address: a segment decodes to the same bytes wherever it is
//! used (a delta's base is pinned by the hash in its header), so entries never go stale
//! when versions are deleted, overwritten or re-based.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

use super::buffers::POOL;
use crate::record::CheckpointRecord;

/// Decoded block bytes shared between the cache and readers.
pub(crate) type Block = Arc<Vec<u8>>;

/// How many bytes of the blocks it writes one write may still put in the cache.
///
/// A write keeps a copy of each block it writes, so that the next version of the tensor
/// finds its base decoded. Once a checkpoint has written a cache's worth, later copies
/// would only evict its first blocks, which the next checkpoint (written in the same order)
/// reads first; so the first cache's worth is kept, and the rest is not copied at all.
#[derive(Debug)]
pub(crate) struct CacheRoom(AtomicUsize);

impl CacheRoom {
    /// Room for `bytes`.
    pub(crate) fn new(bytes: usize) -> Self {
        CacheRoom(AtomicUsize::new(bytes))
    }

    /// Takes room for `len` bytes; `false` (taking nothing) if there is not that much left.
    pub(crate) fn take(&self, len: usize) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(len)
            })
            .is_ok()
    }
}

/// The cache. Blocks larger than the whole budget are not kept.
#[derive(Debug)]
pub(crate) struct BlockCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

#[derive(Debug)]
struct Inner {
    lru: LruCache<u128, Block>,
    bytes: usize,
}

impl BlockCache {
    pub(crate) fn new(capacity: usize) -> Self {
        BlockCache {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
            capacity,
        }
    }

    /// Whether a block of `len` bytes would be kept (callers skip copying data otherwise).
    pub(crate) fn wants(&self, len: usize) -> bool {
        len <= self.capacity
    }

    /// The byte budget.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn get(&self, address: u128) -> Option<Block> {
        if self.capacity == 0 {
            return None;
        }
        self.inner.lock().lru.get(&address).cloned()
    }

    /// Keeps `block`, evicting the least recently used blocks past the budget. An evicted
    /// block no reader holds goes back to the buffer pool: a long import inserts a block per
    /// block it writes, and fresh buffers would cost a page fault per 4 KiB each.
    pub(crate) fn insert(&self, address: u128, block: Block) {
        let len = block.len();
        if !self.wants(len) {
            return;
        }
        let mut evicted = Vec::new();
        {
            let mut inner = self.inner.lock();
            if let Some(old) = inner.lru.put(address, block) {
                inner.bytes -= old.len();
                evicted.push(old);
            }
            inner.bytes += len;
            while inner.bytes > self.capacity {
                match inner.lru.pop_lru() {
                    Some((_, b)) => {
                        inner.bytes -= b.len();
                        evicted.push(b);
                    }
                    None => break,
                }
            }
        }
        for b in evicted {
            if let Ok(buf) = Arc::try_unwrap(b) {
                POOL.give(buf);
            }
        }
    }

    /// Drops the block at `address`, if held: a write drops the copy of a block the block
    /// it just wrote supersedes as the base of the tensor's next version.
    pub(crate) fn forget(&self, address: u128) {
        let dropped = {
            let mut inner = self.inner.lock();
            let dropped = inner.lru.pop(&address);
            if let Some(b) = &dropped {
                inner.bytes -= b.len();
            }
            dropped
        };
        if let Some(b) = dropped {
            if let Ok(buf) = Arc::try_unwrap(b) {
                POOL.give(buf);
            }
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

/// Decoded pack parts a transaction read, and the cache of their blocks (the part before is
/// the base of the next): reading a checkpoint's packed tensors decodes each part once.
///
/// Under it lies the store's [`PartCache`], shared by its transactions: a `get` of one small
/// tensor after another (each its own transaction) finds its part and its checkpoint's record
/// decoded.
pub(crate) struct PartMemo {
    pub(super) cache: PartCache,
    pub(super) parts: Mutex<Vec<(PartKey, Arc<Vec<u8>>)>>,
    /// The checkpoint record last read for a packed tensor, by step: a checkpoint's packed
    /// tensors are read one after another.
    pub(super) checkpoint: Mutex<Option<(u64, Arc<CheckpointRecord>)>>,
}

/// A decoded part: its name, step and content hash (which a re-encoding keeps).
pub(super) type PartKey = (String, u64, Option<u64>);

/// Parts a [`PartMemo`] keeps decoded.
pub(super) const MEMO_PARTS: usize = 8;
/// Bytes of blocks a [`PartCache`] holds: 128 parts of 64 KiB with their chains.
const PART_CACHE_BYTES: usize = 8 << 20;
/// Checkpoint records a [`PartCache`] keeps decoded.
const SHARED_RECORDS: usize = 4;

/// What reads of packed tensors share across a store's transactions: the decoded blocks of
/// pack parts and of the links of their chains, by content address (never stale, as
/// [`BlockCache`]), and the last checkpoint records decoded, by their stored bytes (a record
/// is reused only while the table holds the same bytes). Kept apart from the store's own
/// cache, so that it exists when that cache is off (`cache_bytes` 0) and a large read does
/// not evict it.
#[derive(Debug)]
pub(crate) struct SharedParts {
    pub(super) blocks: BlockCache,
    records: Mutex<VecDeque<SharedRecord>>,
}

/// A checkpoint record decoded from `bytes` at `step`.
#[derive(Debug)]
struct SharedRecord {
    step: u64,
    bytes: Box<[u8]>,
    record: Arc<CheckpointRecord>,
}

/// A store's [`SharedParts`], held by each of its transactions.
pub(crate) type PartCache = Arc<SharedParts>;

/// A new [`PartCache`]: one per store, and a private one for a read that must see the disk
/// (verify).
pub(crate) fn part_cache() -> PartCache {
    Arc::new(SharedParts {
        blocks: BlockCache::new(PART_CACHE_BYTES),
        records: Mutex::new(VecDeque::new()),
    })
}

impl SharedParts {
    /// The checkpoint record stored at `step` as `bytes`: the one decoded before from the
    /// same bytes, or `decode`'s, kept for the next read.
    pub(crate) fn record<E>(
        &self,
        step: u64,
        bytes: &[u8],
        decode: impl FnOnce() -> Result<CheckpointRecord, E>,
    ) -> Result<Arc<CheckpointRecord>, E> {
        let held = self
            .records
            .lock()
            .iter()
            .find(|r| r.step == step && *r.bytes == *bytes)
            .map(|r| r.record.clone());
        if let Some(record) = held {
            return Ok(record);
        }
        let record = Arc::new(decode()?);
        let mut records = self.records.lock();
        records.retain(|r| r.step != step);
        if records.len() == SHARED_RECORDS {
            records.pop_front();
        }
        records.push_back(SharedRecord {
            step,
            bytes: bytes.into(),
            record: record.clone(),
        });
        Ok(record)
    }
}

impl PartMemo {
    /// A memo over `cache`.
    pub(crate) fn new(cache: PartCache) -> Self {
        PartMemo {
            cache,
            parts: Mutex::new(Vec::new()),
            checkpoint: Mutex::new(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_taken_until_it_runs_out() {
        let room = CacheRoom::new(100);
        assert!(room.take(60));
        assert!(!room.take(50), "only 40 left");
        assert!(room.take(40));
        assert!(!room.take(1));
    }

    #[test]
    fn a_shared_record_is_decoded_once_per_stored_bytes() {
        let shared = part_cache();
        let decodes = std::cell::Cell::new(0);
        let get = |step: u64, bytes: &[u8]| {
            shared
                .record(step, bytes, || {
                    decodes.set(decodes.get() + 1);
                    Ok::<_, ()>(CheckpointRecord::new(
                        String::from_utf8(bytes.to_vec()).unwrap(),
                        Vec::new(),
                    ))
                })
                .unwrap()
        };
        let first = get(5, b"a");
        assert!(Arc::ptr_eq(&first, &get(5, b"a")), "same bytes: reused");
        assert_eq!(decodes.get(), 1);
        assert_eq!(
            get(5, b"b").metadata,
            "b",
            "the record changed: decoded again"
        );
        assert_eq!(get(6, b"b").metadata, "b", "another step: its own entry");
        assert_eq!(decodes.get(), 3);
        for step in 10..10 + SHARED_RECORDS as u64 {
            get(step, b"c");
        }
        assert_eq!(decodes.get(), 3 + SHARED_RECORDS);
        get(5, b"b");
        assert_eq!(decodes.get(), 4 + SHARED_RECORDS, "evicted past the bound");
    }

    #[test]
    fn evicts_to_the_byte_budget() {
        let c = BlockCache::new(100);
        c.insert(1, Arc::new(vec![0; 60]));
        c.insert(2, Arc::new(vec![0; 30]));
        assert!(c.get(1).is_some());
        c.insert(3, Arc::new(vec![0; 30]));
        assert!(c.get(2).is_none(), "least recently used goes first");
        assert!(c.get(1).is_some() && c.get(3).is_some());
        assert_eq!(c.bytes(), 90);
        c.insert(4, Arc::new(vec![0; 101]));
        assert!(c.get(4).is_none());
        c.forget(3);
        assert!(c.get(3).is_none());
        assert_eq!(c.bytes(), 60);
        c.forget(3);
        assert_eq!(c.bytes(), 60, "forgetting a block not held changes nothing");
        let off = BlockCache::new(0);
        off.insert(1, Arc::new(vec![1]));
        assert!(off.get(1).is_none());
    }
}

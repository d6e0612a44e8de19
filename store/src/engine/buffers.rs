//! Reused byte buffers for the read path.
//!
//! Every read of a delta chain assembles each segment into a buffer and decodes each link
//! into another, a few MiB each. The system allocator serves such sizes with fresh mapped
//! pages, so every read paid a page fault per 4 KiB and an unmap per buffer: a third of a
//! 4 MiB `get` at depth 5 was system time (ADR 0006). Buffers go back to this pool after
//! use and the next read takes them.

use parking_lot::Mutex;

/// Buffers smaller than this are not worth keeping.
const MIN_KEEP: usize = 64 << 10;
/// At most this many buffers are kept...
const MAX_BUFFERS: usize = 64;
/// ...holding at most this many bytes.
const MAX_BYTES: usize = 128 << 20;

/// A bounded pool of byte buffers shared by every store of the process.
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

/// The process's pool.
pub(crate) static POOL: BufferPool = BufferPool {
    free: Mutex::new(Vec::new()),
};

impl BufferPool {
    /// An empty buffer with room for at least `capacity` bytes: the smallest kept buffer
    /// that is large enough, or a new one.
    pub(crate) fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity >= MIN_KEEP {
            let mut free = self.free.lock();
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= capacity)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return free.swap_remove(i);
            }
        }
        Vec::with_capacity(capacity)
    }

    /// A buffer of exactly `len` bytes (contents unspecified but initialized), for a decoder
    /// that overwrites all of it.
    pub(crate) fn take_filled(&self, len: usize) -> Vec<u8> {
        let mut b = self.take(len);
        b.resize(len, 0);
        b
    }

    /// Returns a buffer for reuse (dropped if small or if the pool is full).
    pub(crate) fn give(&self, mut buf: Vec<u8>) {
        if buf.capacity() < MIN_KEEP {
            return;
        }
        buf.clear();
        let mut free = self.free.lock();
        let held: usize = free.iter().map(Vec::capacity).sum();
        if free.len() < MAX_BUFFERS && held + buf.capacity() <= MAX_BYTES {
            free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_bounded() {
        let pool = BufferPool {
            free: Mutex::new(Vec::new()),
        };
        let a = pool.take(1 << 20);
        let ptr = a.as_ptr();
        pool.give(a);
        let b = pool.take(1 << 19);
        assert_eq!(b.as_ptr(), ptr, "a large enough buffer is reused");
        assert!(b.is_empty() && b.capacity() >= 1 << 19);
        let filled = pool.take_filled(100);
        assert_eq!(filled, vec![0u8; 100]);
        for _ in 0..(MAX_BUFFERS + 10) {
            pool.give(Vec::with_capacity(MIN_KEEP));
        }
        assert_eq!(pool.free.lock().len(), MAX_BUFFERS);
        pool.give(vec![0u8; 10]);
        assert_eq!(pool.free.lock().len(), MAX_BUFFERS);
    }
}

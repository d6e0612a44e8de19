//! Compactions the store runs by itself: the one that ends a committed pass
//! ([`Store::retain`], [`Store::age`]), and the trim as a writer's handle closes (ADR 0028).
//! The pass is committed before its compaction runs, and a close has no caller to fail, so a
//! compaction that cannot run (another process holds a read, an I/O error) is reported in the
//! pass's report or skipped at close, never returned as an error: that would tell the caller a
//! committed pass had failed.

use crate::engine::Handle;
use crate::error::StoreError;
use crate::store::Store;
use crate::StoreStats;

/// Why a compaction did not run while a read was in progress.
const READ_IN_PROGRESS: &str =
    "a read is in progress (another process has the store open to read, or a reader of this \
     handle is still alive)";

impl Store {
    /// Compacts the file after a committed pass: `None` if it did, or why it did not, in
    /// words. The freed pages are then reused by later writes, and a later compaction shrinks
    /// the file.
    pub(crate) fn compact_after_commit(&mut self) -> Option<String> {
        match self.compact() {
            Ok(_) => None,
            Err(e) if e.is_compaction_blocked_by_read() => Some(READ_IN_PROGRESS.to_string()),
            Err(e) => Some(e.to_string()),
        }
    }

    /// The trim of a writer's handle as it closes ([`crate::Options::trim_on_close`]):
    /// compacts the file if [`worth_trimming`] says its length misleads. Anything that stops
    /// it (a read in progress here or in another process, an I/O error) leaves the file as it
    /// is, which is a store as good as a trimmed one: a close never fails for it. Not while
    /// the thread unwinds from a panic, nor on a custom backend (its length is its size).
    pub(crate) fn trim_on_close(&mut self) {
        if !self.opts.trim_on_close || self.has_backend() || std::thread::panicking() {
            return;
        }
        let (Ok(file_bytes), Ok(disk_bytes)) = (self.file_bytes(), self.disk_bytes()) else {
            return;
        };
        // The cheap test first: the allocated pages need a write transaction.
        if !exceeds_by_a_tenth(file_bytes, disk_bytes) {
            return;
        }
        let Ok(Some(allocated_bytes)) = self.allocated_bytes() else {
            return;
        };
        if worth_trimming(file_bytes, disk_bytes, allocated_bytes) {
            if let Handle::Writer(db) = &mut self.db {
                let _ = db.compact();
            }
        }
    }
}

impl StoreStats {
    /// Whether compacting the file is worth it to make its length tell its size, as closing a
    /// writer's handle judges it: its length exceeds both its bytes on disk and redb's
    /// allocated pages by more than a tenth. `false` on a read-only handle's stats.
    pub fn worth_trimming(&self) -> bool {
        self.allocated_bytes
            .is_some_and(|allocated| worth_trimming(self.file_bytes, self.disk_bytes, allocated))
    }
}

/// Whether a file `file_bytes` long should be compacted so that its length tells its size: it
/// exceeds the `disk_bytes` it takes on disk by more than a tenth (unwritten room at its end,
/// which `ls -l` counts and the store's ratio does not), and redb's `allocated_bytes` in use
/// by more than a tenth (else compaction frees nothing: a file system that compresses blocks
/// also makes a file take less than its length).
fn worth_trimming(file_bytes: u64, disk_bytes: u64, allocated_bytes: u64) -> bool {
    exceeds_by_a_tenth(file_bytes, disk_bytes) && exceeds_by_a_tenth(file_bytes, allocated_bytes)
}

/// `a > 1.1 * b`, in integers.
fn exceeds_by_a_tenth(a: u64, b: u64) -> bool {
    a > b.saturating_add(b / 10)
}

impl StoreError {
    /// Whether the error is a compaction ([`Store::compact`]) that could not run because a
    /// read is in progress: in another process ([`Store::open_read_only`]), or a reader of
    /// this handle (a [`crate::CheckpointReader`]). Nothing changed; it can run once the read
    /// is over.
    pub fn is_compaction_blocked_by_read(&self) -> bool {
        matches!(
            self,
            StoreError::Compaction { source }
                if matches!(**source, redb::CompactionError::TransactionInProgress)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::worth_trimming;

    #[test]
    fn trims_only_room_beyond_a_tenth_of_both_sizes() {
        // Growth room: twice the length of what is on disk and in use.
        assert!(worth_trimming(200, 100, 100));
        // Within a tenth: left alone.
        assert!(!worth_trimming(110, 100, 100));
        assert!(worth_trimming(111, 100, 100));
        // Shorter on disk than in use (a compressing file system): nothing to free.
        assert!(!worth_trimming(200, 100, 195));
        // Free pages written to disk: its length does not mislead.
        assert!(!worth_trimming(200, 200, 100));
    }
}

//! The compaction that ends a committed pass ([`Store::retain`], [`Store::age`]). The pass
//! is committed before it runs, so a compaction that cannot run (another process holds a
//! read, an I/O error) is reported in the pass's report, never returned as the pass's error:
//! that would tell the caller a committed pass had failed.

use crate::error::StoreError;
use crate::store::Store;

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

//! The redb handle a [`crate::Store`] holds: a writer, or a read-only follower of another
//! process's writer.
//!
//! Both open the file in redb's `SingleWriter` concurrency mode: one process writes, any
//! number of processes open it read-only and see each commit whole (ADR 0017).

use std::path::Path;

use redb::{
    Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, StorageError, TransactionError,
    WriteTransaction,
};

use crate::error::{DbContext, InvalidInput, Result, StoreError};

/// The open database.
pub(crate) enum Handle {
    /// This process writes.
    Writer(Database),
    /// This process only reads; a writer elsewhere may commit meanwhile.
    Reader(ReadOnlyDatabase),
    /// Closed: what a dropped [`crate::Store`] leaves while its database closes.
    Closed,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handle::Writer(_) => "Handle::Writer",
            Handle::Reader(_) => "Handle::Reader",
            Handle::Closed => "Handle::Closed",
        })
    }
}

impl Handle {
    /// Begins a read transaction on the latest commit.
    pub(crate) fn begin_read(&self) -> std::result::Result<ReadTransaction, TransactionError> {
        match self {
            Handle::Writer(db) => db.begin_read(),
            Handle::Reader(db) => db.begin_read(),
            Handle::Closed => Err(TransactionError::Storage(StorageError::Io(
                std::io::Error::other("the store is closed"),
            ))),
        }
    }

    /// The writable database, or [`InvalidInput::ReadOnly`] naming `op`.
    pub(crate) fn writer(&self, path: &Path, op: &'static str) -> Result<&Database> {
        match self {
            Handle::Writer(db) => Ok(db),
            Handle::Reader(_) | Handle::Closed => {
                Err(StoreError::Invalid(InvalidInput::ReadOnly {
                    path: path.to_path_buf(),
                    op,
                }))
            }
        }
    }

    /// The writable database, mutably (compaction), or [`InvalidInput::ReadOnly`].
    pub(crate) fn writer_mut(&mut self, path: &Path, op: &'static str) -> Result<&mut Database> {
        match self {
            Handle::Writer(db) => Ok(db),
            Handle::Reader(_) | Handle::Closed => {
                Err(StoreError::Invalid(InvalidInput::ReadOnly {
                    path: path.to_path_buf(),
                    op,
                }))
            }
        }
    }

    /// Begins a write transaction, or fails with [`InvalidInput::ReadOnly`] naming `op`.
    pub(crate) fn begin_write(&self, path: &Path, op: &'static str) -> Result<WriteTransaction> {
        self.writer(path, op)?.begin_write().ctx(op)
    }
}

//! Repairs by readers, told apart from writers.
//!
//! A store whose last writer crashed must be repaired before it is read, and only a
//! writer's open can repair it: [`crate::Store::open_read_only`] then opens it as a writer
//! for the time of the repair. A trainer restarting at that moment would get
//! [`crate::OpenError::InUse`] from a reader. So the reader holds an exclusive lock on a
//! marker file beside the store, `<store>.repair`, while it repairs, and deletes it after; a
//! writer that gets `InUse` while the marker is locked waits for the repair (at most
//! [`REPAIR_WAIT`]) and opens then. `InUse` with no repair in progress is returned at once:
//! another writer holds the store.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{OpenError, Result, StoreError};

/// The longest a writer waits for a reader's repair (a repair reads the whole file).
pub const REPAIR_WAIT: Duration = Duration::from_secs(600);

/// How often a waiting writer looks again.
const POLL: Duration = Duration::from_millis(20);

/// The marker file of the store at `path`.
fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".repair");
    PathBuf::from(name)
}

/// An exclusive lock on the marker of a store being repaired by a reader; dropped, it
/// deletes the marker and unlocks it.
#[derive(Debug)]
pub(crate) struct RepairMarker {
    file: File,
    path: PathBuf,
}

impl RepairMarker {
    /// Creates (or opens) the marker of the store at `store` and locks it, waiting for
    /// another reader's repair.
    pub(crate) fn hold(store: &Path) -> Result<RepairMarker> {
        let path = marker_path(store);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        file.lock().map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(RepairMarker { file, path })
    }
}

impl Drop for RepairMarker {
    fn drop(&mut self) {
        // Deleted while locked: a writer that opened it meanwhile finds it unlocked next.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// Whether a reader is repairing the store at `store` now.
fn repairing(store: &Path) -> bool {
    let Ok(file) = File::open(marker_path(store)) else {
        return false;
    };
    matches!(file.try_lock_shared(), Err(TryLockError::WouldBlock))
}

/// Runs a writer's `open` of the store at `path`; while it fails with `InUse` because a
/// reader is repairing the store, waits for the repair and tries again, for at most
/// `wait`.
pub(crate) fn open_beside_repairs<T>(
    path: &Path,
    wait: Duration,
    mut open: impl FnMut() -> Result<T>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        match open() {
            Err(StoreError::Open(OpenError::InUse { .. })) if start.elapsed() < wait => {
                // A repair that ended between the open and this look released the file:
                // try once more before reporting a writer.
                let repair = repairing(path);
                std::thread::sleep(POLL);
                if !repair && !repairing(path) {
                    return open();
                }
            }
            other => return other,
        }
    }
}

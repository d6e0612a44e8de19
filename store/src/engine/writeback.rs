//! Background writeback of a large write's pages, so the commit does not wait for all of them.
//!
//! redb keeps at most half its page cache of dirty pages in memory and writes the rest to the
//! file as a write transaction goes on: into the operating system's page cache, which sends
//! them to the disk only when memory runs short or the commit's fsync asks. An import of a
//! large checkpoint then encoded for seconds with the disk idle, and its commit waited for the
//! disk to take the whole checkpoint with the CPUs idle. While a [`Writeback`] lives, a thread
//! calls `fdatasync` on the store file every [`INTERVAL`], so the disk takes the pages as they
//! come and the commit's fsync finds little left (ADR 0014, addendum of 2026-11-25).
//!
//! Crash safety is redb's, unchanged: syncing early only makes durable pages that no committed
//! header refers to yet (an abandoned or crashed write leaves them free, as before), and the
//! commit still orders its own syncs around the header it writes. A failed writeback is left to
//! the commit: Linux (4.13 and later) reports a writeback error to the next fsync of every
//! descriptor open on the file when it happened, redb's included, so the commit fails as it
//! would have without this thread.

use std::fs::File;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// Time between two syncs. Short enough that the disk never idles long during an import; each
/// sync that finds nothing dirty costs a system call.
const INTERVAL: Duration = Duration::from_millis(50);

/// A thread syncing a file's data every [`INTERVAL`] until dropped (the drop waits for it).
#[derive(Debug)]
pub(crate) struct Writeback {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<u64>>,
}

impl Writeback {
    /// Starts syncing the file at `path`; `None` (nothing to do, the commit syncs as always)
    /// if it cannot be opened or no thread can be started.
    pub(crate) fn start(path: &Path) -> Option<Writeback> {
        let file = File::open(path).ok()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("strata-writeback".into())
            .spawn(move || {
                let mut syncs = 0u64;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(INTERVAL) {
                    // An error is the commit's to report (see the module docs).
                    if file.sync_data().is_ok() {
                        syncs += 1;
                    }
                }
                syncs
            })
            .ok()?;
        Some(Writeback {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread and returns how many syncs it made.
    #[cfg(test)]
    fn finish(mut self) -> u64 {
        self.stop_thread()
    }

    fn stop_thread(&mut self) -> u64 {
        drop(self.stop.take());
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn syncs_until_finished() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        let mut f = File::create(&path).expect("create");
        let w = Writeback::start(&path).expect("writeback starts");
        f.write_all(&[7u8; 1 << 16]).expect("write");
        std::thread::sleep(INTERVAL * 10);
        assert!(w.finish() >= 1, "the thread synced while it ran");
        assert!(Writeback::start(&dir.path().join("missing")).is_none());
    }
}

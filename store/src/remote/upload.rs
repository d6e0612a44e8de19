//! Automatic upload ([`UploadOptions`] in [`crate::Options::upload`]): each checkpoint the
//! store commits is pushed from a background thread, off the writer's path. The writer hands
//! over a read snapshot taken right after its commit, so the upload reads exactly what was
//! committed while later writes go on. [`crate::Store::flush`] (and dropping the store)
//! waits for the queue to drain.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::object::Remote;
use super::sync::{push_steps, RemoteState};
use crate::engine::{checkpoint_steps, tag_list, ReadTxn};
use crate::error::RemoteError;

/// Where and how committed checkpoints are pushed in the background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadOptions {
    /// The remote's URL (see [`Remote::open`]).
    pub url: String,
}

impl UploadOptions {
    /// Uploads to `url`.
    pub fn new(url: impl Into<String>) -> Self {
        UploadOptions { url: url.into() }
    }
}

#[derive(Default)]
struct Status {
    /// Jobs queued or running.
    pending: usize,
    /// Steps whose upload failed and will be retried with the next job.
    failed: BTreeSet<u64>,
    /// The latest failure.
    error: Option<RemoteError>,
}

#[derive(Default)]
struct Shared {
    status: Mutex<Status>,
    idle: Condvar,
}

struct Job {
    step: u64,
    snapshot: ReadTxn,
}

/// The background uploader of a store.
pub(crate) struct Uploader {
    queue: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Uploader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Uploader")
    }
}

impl Uploader {
    /// Opens the remote (no request yet) and starts the thread.
    pub(crate) fn start(opts: &UploadOptions) -> Result<Uploader, RemoteError> {
        let remote = Remote::open(&opts.url)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared::default());
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("strata-upload".into())
            .spawn(move || run(&remote, &rx, &worker))
            .map_err(|source| RemoteError::Io {
                path: "(upload thread)".into(),
                source,
            })?;
        Ok(Uploader {
            queue: Some(tx),
            thread: Some(thread),
            shared,
        })
    }

    /// Queues checkpoint `step` of the committed `snapshot`.
    pub(crate) fn enqueue(&self, step: u64, snapshot: ReadTxn) {
        self.shared.status.lock().pending += 1;
        let sent = self
            .queue
            .as_ref()
            .is_some_and(|q| q.send(Job { step, snapshot }).is_ok());
        if !sent {
            let mut s = self.shared.status.lock();
            s.pending -= 1;
            s.failed.insert(step);
        }
    }

    /// Waits until every queued upload has run; the latest error if a step is still not
    /// uploaded.
    pub(crate) fn flush(&self) -> Result<(), RemoteError> {
        let mut s = self.shared.status.lock();
        while s.pending > 0 {
            self.shared.idle.wait(&mut s);
        }
        match (s.failed.is_empty(), s.error.take()) {
            (false, Some(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(remote: &Remote, rx: &mpsc::Receiver<Job>, shared: &Shared) {
    let mut state = RemoteState::default();
    while let Ok(job) = rx.recv() {
        let mut steps: BTreeSet<u64> = shared.status.lock().failed.clone();
        steps.insert(job.step);
        let result = upload(remote, &job.snapshot, &mut state, &mut steps);
        drop(job);
        let mut s = shared.status.lock();
        match result {
            Ok(()) => {
                s.failed.retain(|x| !steps.contains(x));
                if s.failed.is_empty() {
                    s.error = None;
                }
            }
            Err(e) => {
                s.failed.extend(steps);
                s.error = Some(e);
            }
        }
        s.pending -= 1;
        if s.pending == 0 {
            shared.idle.notify_all();
        }
    }
}

/// Pushes `steps` (those the snapshot still holds) and the tags naming them.
fn upload(
    remote: &Remote,
    r: &ReadTxn,
    state: &mut RemoteState,
    steps: &mut BTreeSet<u64>,
) -> Result<(), RemoteError> {
    let present: BTreeSet<u64> = checkpoint_steps(&r.checkpoints)?.into_iter().collect();
    steps.retain(|s| present.contains(s));
    let tags = tag_list(&r.tags)?;
    let list: Vec<u64> = steps.iter().copied().collect();
    remote.block_on(async {
        // One small request per checkpoint; it also finds a remote that was emptied.
        remote.check_format(true).await?;
        state.refresh(remote).await?;
        push_steps(remote, r, state, &list, &tags, None, false)
            .await
            .map(|_| ())
    })
}

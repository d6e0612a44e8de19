//! Remotes: a store's checkpoints in object storage (S3 and compatibles, a folder), shared
//! by many machines (ADR 0018).
//!
//! A remote is a prefix in a bucket (`s3://bucket/prefix`) or a folder (`file:///path`):
//!
//! ```text
//! strata-remote.json          {"format": "strata-remote", "version": 1}, created once
//! segments/<32 hex digits>    a segment, named by its content address (xxh3-128); created
//!                             once, never changed
//! checkpoints/<20-digit step> a checkpoint's manifest (manifest.rs), created with
//!                             If-None-Match: *, never changed: a step is visible whole once
//!                             its manifest exists, and two writers of one step cannot both win
//! parts/<step>/<part>         one process's part of a checkpoint, joined by `commit_parts`
//! tags/<hex of the name>      a tag: the step it names, as decimal text
//! trash/<step>-<unix ms>      the manifest of a deleted checkpoint, kept for the grace period
//! intents/<ms>-<nonce>        a push in progress: a manifest naming the segments it is about
//!                             to name, deleted once its manifests exist
//! leases/gc-<ms>-<nonce>      a garbage collection in progress, deleted when it is done
//! ```
//!
//! Segments go up before the manifest that names them, and a push decides what the remote
//! holds only once no garbage collection that could miss its intent is running (module
//! `lease`), so a reader never sees a checkpoint with a missing segment, whatever the
//! interleaving of pushes, gcs, retention and pulls; a push killed midway leaves only
//! unreferenced segments and an intent, which [`gc`] removes once older than the grace
//! period. A push sends again what a checkpoint it finds on the remote lacks (repair).

mod gc;
mod lease;
mod manifest;
mod object;
mod pull;
mod push;
mod reader;
mod sync;
mod upload;

pub use crate::error::RemoteError;
pub use gc::{gc, gc_at, gc_with_segments_aged, retain, GcReport, MIN_GRACE};
pub use object::{Remote, RequestCounts, DEFAULT_REQUEST_TIMEOUT, TIMEOUT_ENV};
pub use pull::{pull, PullReport};
pub use push::{commit_parts, push, push_part};
pub use reader::{RemoteStore, DEFAULT_CACHE_BYTES};
pub use sync::{Progress, PushReport};
pub use upload::UploadOptions;
pub(crate) use upload::Uploader;

#[cfg(test)]
mod tests;

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
//! ```
//!
//! Segments go up before the manifest that names them, so a reader never sees a checkpoint
//! with a missing segment; a push killed midway leaves only unreferenced segments, which the
//! next push reuses and [`gc`] removes once older than the grace period.

mod gc;
mod manifest;
mod object;
mod pull;
mod push;
mod reader;
mod sync;
mod upload;

pub use crate::error::RemoteError;
pub use gc::{gc, gc_at, retain, GcReport};
pub use object::{Remote, RequestCounts};
pub use pull::{pull, PullReport};
pub use push::{commit_parts, push, push_part};
pub use reader::{RemoteStore, DEFAULT_CACHE_BYTES};
pub use sync::{Progress, PushReport};
pub use upload::UploadOptions;
pub(crate) use upload::Uploader;

#[cfg(test)]
mod tests;

//! Errors of remotes: each says which URL or object and what went wrong.

use thiserror::Error;

use crate::error::StoreError;
use crate::record::ManifestError;

/// Everything that can go wrong talking to a remote.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// A URL this build cannot use.
    #[error("cannot use remote URL {url:?}: {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The object store refused or failed a request (after its retries): no server, missing
    /// credentials, a 5xx, a dropped connection.
    #[error("remote {op} of {object} failed: {source}")]
    Request {
        /// The operation (`get`, `put`, `list`, `delete`).
        op: &'static str,
        /// The object's path in the bucket or folder.
        object: String,
        /// object_store's error.
        #[source]
        source: Box<object_store::Error>,
    },
    /// A checkpoint already in the remote at this step holds different content.
    #[error("the remote already holds a different checkpoint at step {step} ({object}); refusing to replace it")]
    Conflict {
        /// The step.
        step: u64,
        /// The manifest object.
        object: String,
    },
    /// A local version differs from the remote's version of the same tensor and step.
    #[error(
        "tensor {tensor:?} step {step}: the local store holds a different version than the remote"
    )]
    VersionConflict {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
    },
    /// The remote was written by a newer Strata (its format object or a manifest).
    #[error("remote object {object} has format {found}, newer than this build reads ({supported}); upgrade Strata")]
    NewerFormat {
        /// The object.
        object: String,
        /// The format found.
        found: u64,
        /// The newest format this build reads.
        supported: u64,
    },
    /// The prefix holds objects but no Strata format object.
    #[error("{object} is not a Strata remote format object: {reason}")]
    NotARemote {
        /// The object.
        object: String,
        /// Why.
        reason: String,
    },
    /// A segment's bytes do not hash to its address, or have the wrong length.
    #[error("remote segment {object} is damaged: {reason}")]
    BadSegment {
        /// The object.
        object: String,
        /// What does not match.
        reason: String,
    },
    /// A manifest could not be decoded.
    #[error("remote manifest {object} is damaged: {source}")]
    BadManifest {
        /// The object.
        object: String,
        /// The decoder's error.
        #[source]
        source: ManifestError,
    },
    /// A version with tiered blocks: a remote carries exact versions only.
    #[error("tensor {tensor:?} step {step} is tiered (quantized or Tier 0); a remote holds exact versions only: set an exact policy and run maintain, or leave this checkpoint local")]
    Tiered {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
    },
    /// Parts of one checkpoint that cannot be joined.
    #[error("parts of step {step}: {reason}")]
    Parts {
        /// The step.
        step: u64,
        /// Why.
        reason: String,
    },
    /// The local store failed.
    #[error(transparent)]
    Store(StoreError),
    /// A local file (the cache) failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or folder.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl From<StoreError> for RemoteError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Remote(r) => *r,
            e => RemoteError::Store(e),
        }
    }
}

impl RemoteError {
    /// The error for a failed request `op` on `object`.
    pub(crate) fn request(
        op: &'static str,
        object: &object_store::path::Path,
    ) -> impl FnOnce(object_store::Error) -> RemoteError {
        let object = object.to_string();
        move |e| RemoteError::Request {
            op,
            object,
            source: Box::new(e),
        }
    }
}

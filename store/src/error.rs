//! The store's errors: every variant says what went wrong and where (file, tensor, step,
//! block).
//!
//! [`StoreError`] is what every call returns. Its variants group the errors a caller tells
//! apart by kind, each kind an enum of its own that converts into it, as redb splits its
//! errors: [`OpenError`] (the file cannot be used), [`NotFound`], [`InvalidInput`] (nothing
//! changed), [`Corruption`] (damaged data, never returned as a result), [`TierFailure`]; the
//! rest (I/O, the database, the codec, safetensors files) are variants of their own.
//!
//! ```no_run
//! use strata_store::{NotFound, Store, StoreError};
//! let store = Store::open("run.strata")?;
//! match store.get("layer.0.w", 100) {
//!     Ok(t) => println!("{} bytes", t.data.len()),
//!     Err(StoreError::NotFound(NotFound::Version { step, .. })) => println!("no step {step}"),
//!     Err(e) if e.is_corrupt() => eprintln!("damaged store: {e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), StoreError>(())
//! ```

use std::path::PathBuf;

use strata_codec::segment::SegmentError;
use thiserror::Error;

use crate::record::RecordError;
use crate::tensor::Fidelity;

/// Shorthand for results of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in a [`crate::Store`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A tensor, version, checkpoint, tag or policy rule that does not exist.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// Input the store refused; nothing was changed.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// Damaged stored data.
    #[error(transparent)]
    Corrupt(#[from] Corruption),
    /// A tiered read or operation that cannot give what was asked.
    #[error(transparent)]
    Tier(#[from] TierFailure),
    /// An I/O error on the store file, or on a file being imported or exported.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An error of the underlying database (redb) during an operation.
    #[error("database error while {op}: {source}")]
    Database {
        /// The operation in progress.
        op: &'static str,
        /// redb's error.
        #[source]
        source: Box<redb::Error>,
    },
    /// Compaction could not run.
    #[error("compaction failed: {source}")]
    Compaction {
        /// redb's error.
        #[source]
        source: Box<redb::CompactionError>,
    },
    /// Encoding a block failed.
    #[error("tensor {tensor:?} step {step} block {block}: encoding failed: {source}")]
    Encode {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
        /// The codec's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A safetensors file could not be written (an export); the safetensors crate's error is
    /// the source. A file refused on import is [`InvalidInput::SafeTensorsFile`].
    #[error("safetensors file {path}: {source}")]
    SafeTensors {
        /// The file.
        path: PathBuf,
        /// What the safetensors crate reported.
        #[source]
        source: Box<safetensors::SafeTensorError>,
    },
    /// A remote (object storage) failed: a push, pull or background upload.
    #[cfg(feature = "remote")]
    #[error(transparent)]
    Remote(Box<RemoteError>),
    /// A tensor read whole could not be given its buffer: the memory could not be
    /// allocated (a tensor larger than memory; read it block by block with
    /// [`crate::Store::get_blocks`] instead).
    #[error("tensor {tensor:?} step {step}: {bytes} bytes could not be allocated")]
    OutOfMemory {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// The tensor's bytes.
        bytes: u64,
    },
}

/// Why a store could not be opened ([`crate::Store::open`]).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// [`crate::Store::open_read_only`] of a file that does not exist.
    #[error("store {path} does not exist")]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// Another process (or another handle in this one) has the file open.
    #[error("store {path} is in use by another process or handle")]
    InUse {
        /// The file.
        path: PathBuf,
    },
    /// The file exists but is not a Strata store.
    #[error("{path} is not a Strata store: {reason}")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// The store was written by a format this build does not read.
    #[error(
        "{path}: store format version {found} is not supported (this build reads {supported})"
    )]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// The file is damaged at the database level (redb found it inconsistent).
    #[error("store {path} is damaged: {reason}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What redb reported.
        reason: String,
    },
}

/// What was asked for does not exist.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NotFound {
    /// No version of this tensor exists.
    #[error("no tensor named {tensor:?}")]
    Tensor {
        /// Tensor name.
        tensor: String,
    },
    /// The tensor exists but not at this step.
    #[error("tensor {tensor:?} has no version at step {step}")]
    Version {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
    },
    /// The tensor has no version at or before this step.
    #[error("tensor {tensor:?} has no version at or before step {step}")]
    AtOrBefore {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
    },
    /// No checkpoint at this step.
    #[error("no checkpoint at step {step}")]
    Checkpoint {
        /// Step.
        step: u64,
    },
    /// No tag with this name.
    #[error("no tag named {tag:?}")]
    Tag {
        /// The tag.
        tag: String,
    },
    /// No policy rule has this pattern.
    #[error("no tier policy rule has the pattern {pattern:?}")]
    Policy {
        /// The pattern.
        pattern: String,
    },
}

/// Input the store refused; nothing was changed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InvalidInput {
    /// A write (or compaction) on a store opened with [`crate::Store::open_read_only`].
    #[error("store {path} is open read-only: {op} needs the writer's handle")]
    ReadOnly {
        /// The file.
        path: PathBuf,
        /// What was asked.
        op: &'static str,
    },
    /// Invalid [`crate::Options`].
    #[error("invalid options: {reason}")]
    Options {
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint [`crate::Store::age`] was asked to age but must stay exact.
    #[error("checkpoint at step {step} cannot be aged: {reason}")]
    AgeRefused {
        /// The checkpoint's step.
        step: u64,
        /// Why it stays exact (tagged, one of the last kept exact, ...).
        reason: String,
    },
    /// A tensor name the store does not accept (empty, or too long).
    #[error("invalid tensor name {name:?}: {reason}")]
    Name {
        /// The name.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A shape whose element or byte count overflows, or that has too many dimensions.
    #[error(
        "tensor {tensor:?} step {step}: shape {shape:?} is too large or has too many dimensions"
    )]
    Shape {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// The shape given.
        shape: Vec<u64>,
    },
    /// The data length does not match `shape x dtype size`.
    #[error(
        "tensor {tensor:?} step {step}: data is {actual} bytes, shape and dtype need {expected}"
    )]
    DataLength {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Bytes the shape and dtype need.
        expected: u64,
        /// Bytes given.
        actual: u64,
    },
    /// The version exists and overwriting was not asked for.
    #[error("tensor {tensor:?} already has a version at step {step}")]
    StepExists {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
    },
    /// A partial read outside the tensor.
    #[error(
        "tensor {tensor:?} step {step}: element range {start}..{end} is outside 0..{elements}"
    )]
    Range {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Range start.
        start: u64,
        /// Range end.
        end: u64,
        /// Elements in the tensor.
        elements: u64,
    },
    /// A checkpoint exists at this step.
    #[error("a checkpoint already exists at step {step}")]
    CheckpointExists {
        /// Step.
        step: u64,
    },
    /// A checkpoint names the same tensor twice.
    #[error("checkpoint at step {step} lists tensor {tensor:?} twice")]
    DuplicateTensor {
        /// Step.
        step: u64,
        /// Tensor name.
        tensor: String,
    },
    /// A tensor the other side cannot hold: on import, a dtype this version does not know or
    /// a sub-byte (F4, F6) tensor whose last dimension is not a whole number of the groups
    /// Strata packs it in (nothing of the checkpoint is written); on export, a Strata dtype
    /// safetensors has no name for.
    #[error("{path}: tensor {tensor:?} of dtype {dtype} cannot be converted: {reason}")]
    UnsupportedDType {
        /// The file.
        path: PathBuf,
        /// Tensor name.
        tensor: String,
        /// The file's name for the dtype.
        dtype: String,
        /// Why.
        reason: String,
    },
    /// A safetensors file that cannot be imported as it is (nothing of it is written): what
    /// is wrong with its header or its size, naming the tensor and the numbers.
    #[error("safetensors file {path}: {problem}")]
    SafeTensorsFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it (boxed: it names tensors and offsets, and errors stay
        /// small).
        problem: Box<SafeTensorsProblem>,
    },
    /// A frame appended at a step before the tensor's latest version.
    #[error("tensor {tensor:?}: frame step {step} is not after the latest version {latest}")]
    StepNotAfter {
        /// Tensor name.
        tensor: String,
        /// The step given.
        step: u64,
        /// The latest step stored.
        latest: u64,
    },
    /// A tier policy that cannot be used.
    #[error("invalid tier policy for {pattern:?}: {reason}")]
    Policy {
        /// The name pattern.
        pattern: String,
        /// What is wrong.
        reason: String,
    },
}

/// What is wrong with a safetensors file an import refused
/// ([`InvalidInput::SafeTensorsFile`]). Offsets are those of the header's `data_offsets`:
/// bytes of the data section, which starts after the header.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SafeTensorsProblem {
    /// The file is too short to hold the 8-byte header length.
    #[error(
        "the file is {len} bytes long; a safetensors file starts with an 8-byte header length"
    )]
    TooShort {
        /// The file's length.
        len: u64,
    },
    /// The header length is beyond the format's limit.
    #[error("its header length {declared} is over the format's limit of {limit} bytes")]
    HeaderTooLarge {
        /// The length the file declares.
        declared: u64,
        /// The format's limit.
        limit: u64,
    },
    /// The header length runs past the end of the file.
    #[error(
        "its header length {declared} runs past the end of the file, which holds {available} \
         bytes after the length (truncated, or not a safetensors file)"
    )]
    HeaderPastEnd {
        /// The length the file declares.
        declared: u64,
        /// Bytes the file holds after its first 8.
        available: u64,
    },
    /// The header is not a JSON object (serde_json's error gives the line and column).
    #[error("its header is not a JSON object of tensors: {error}")]
    Json {
        /// serde_json's error.
        error: serde_json::Error,
    },
    /// The header names a tensor (or `__metadata__`) twice: readers that keep one of the
    /// two silently would read different data.
    #[error("its header names {key:?} twice")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// `__metadata__` has a key twice.
    #[error("its __metadata__ has the key {key:?} twice")]
    DuplicateMetadataKey {
        /// The key.
        key: String,
    },
    /// `__metadata__` is not an object of strings.
    #[error("its __metadata__ is not an object of strings: {error}")]
    Metadata {
        /// serde_json's error.
        error: serde_json::Error,
    },
    /// A tensor's entry is not `{dtype, shape, data_offsets}`.
    #[error(
        "tensor {tensor:?}: its entry is not {{\"dtype\", \"shape\", \"data_offsets\"}}: {error}"
    )]
    Entry {
        /// Tensor name.
        tensor: String,
        /// serde_json's error.
        error: serde_json::Error,
    },
    /// A tensor name Strata does not accept.
    #[error("tensor {tensor:?}: its name is {reason}")]
    Name {
        /// The name (its first 64 characters).
        tensor: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A tensor of more dimensions than Strata stores.
    #[error("tensor {tensor:?}: shape {shape:?} has {} dimensions, more than {limit}", shape.len())]
    Dimensions {
        /// Tensor name.
        tensor: String,
        /// The shape in the file.
        shape: Vec<u64>,
        /// The most dimensions a version record holds.
        limit: usize,
    },
    /// A tensor whose element or byte count overflows.
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} is too large to count its bytes")]
    ShapeOverflow {
        /// Tensor name.
        tensor: String,
        /// The file's name for the dtype.
        dtype: String,
        /// The shape in the file.
        shape: Vec<u64>,
    },
    /// A tensor whose offsets end before they start.
    #[error("tensor {tensor:?}: data_offsets [{start}, {end}] end before they start")]
    Offsets {
        /// Tensor name.
        tensor: String,
        /// First byte.
        start: u64,
        /// End (exclusive).
        end: u64,
    },
    /// A tensor whose offsets do not span the bytes its shape and dtype need.
    #[error(
        "tensor {tensor:?}: data_offsets [{start}, {end}] span {} bytes, but shape {shape:?} \
         of {dtype} needs {expected}",
        end - start
    )]
    Size {
        /// Tensor name.
        tensor: String,
        /// The file's name for the dtype.
        dtype: String,
        /// The shape in the file.
        shape: Vec<u64>,
        /// First byte.
        start: u64,
        /// End (exclusive).
        end: u64,
        /// Bytes the shape and dtype need.
        expected: u64,
    },
    /// Two tensors share bytes.
    #[error(
        "tensors {first:?} (bytes {first_start}..{first_end}) and {second:?} (bytes \
         {second_start}..{second_end}) overlap"
    )]
    Overlap {
        /// The tensor that starts first.
        first: String,
        /// Its first byte.
        first_start: u64,
        /// Its end.
        first_end: u64,
        /// The tensor that starts inside it.
        second: String,
        /// Its first byte.
        second_start: u64,
        /// Its end.
        second_end: u64,
    },
    /// Bytes between tensors that no tensor holds (the format forbids holes).
    #[error("bytes {start}..{end} of the data section belong to no tensor")]
    Hole {
        /// First byte of the hole.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// A tensor that ends past the end of the file.
    #[error(
        "tensor {tensor:?} ends at byte {end} of the data section, but the file holds only \
         {data_bytes} bytes of data (truncated?)"
    )]
    PastEnd {
        /// Tensor name.
        tensor: String,
        /// Its end.
        end: u64,
        /// Bytes of the data section.
        data_bytes: u64,
    },
    /// Bytes after the last tensor.
    #[error(
        "its tensors end at byte {covered} of the data section, but the file holds \
         {data_bytes} bytes of data: the rest belongs to no tensor"
    )]
    Trailing {
        /// Where the last tensor ends.
        covered: u64,
        /// Bytes of the data section.
        data_bytes: u64,
    },
    /// The file became shorter while it was imported.
    #[error(
        "tensor {tensor:?}: the file ended at {file_bytes} bytes while reading up to byte \
         {needed} of it (it was truncated during the import)"
    )]
    Shrunk {
        /// Tensor name.
        tensor: String,
        /// The file offset the read needed.
        needed: u64,
        /// The file's length when the read failed.
        file_bytes: u64,
    },
}

/// Stored data is damaged: a checksum, record, segment or chain does not hold. The store never returns such data as a result.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Corruption {
    /// A segment failed to parse or decode (bad checksum, bad payload, wrong base).
    #[error(
        "tensor {tensor:?} step {step} block {block}: segment {address:032x} is corrupt: {source}"
    )]
    Segment {
        /// Tensor name.
        tensor: String,
        /// Step of the version whose segment failed.
        step: u64,
        /// Block index.
        block: u64,
        /// Content address of the segment.
        address: u128,
        /// What the codec found.
        #[source]
        source: Box<SegmentError>,
    },
    /// A segment decodes, but not to what the version record says.
    #[error("tensor {tensor:?} step {step} block {block}: {reason}")]
    BlockMismatch {
        /// Tensor name.
        tensor: String,
        /// Step of the version whose block is wrong.
        step: u64,
        /// Block index.
        block: u64,
        /// What disagrees.
        reason: String,
    },
    /// A block refers to a segment that is not stored, or whose stored bytes are damaged.
    #[error("tensor {tensor:?} step {step} block {block}: segment {address:032x}: {reason}")]
    SegmentStorage {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
        /// Content address.
        address: u128,
        /// What is wrong.
        reason: String,
    },
    /// A delta block whose base version is missing or has another layout.
    #[error("tensor {tensor:?} step {step} block {block}: base version {base} {reason}")]
    BadBase {
        /// Tensor name.
        tensor: String,
        /// Step of the delta.
        step: u64,
        /// Block index.
        block: u64,
        /// The base step recorded.
        base: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A chain of deltas longer than any the store writes (a loop in damaged metadata).
    #[error("tensor {tensor:?} step {step} block {block}: delta chain longer than {limit}")]
    ChainTooLong {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
        /// The limit.
        limit: usize,
    },
    /// A tier row names a version or block that does not exist.
    #[error(
        "tier row of tensor {tensor:?} step {step} block {block} has no such version or block"
    )]
    TierRowOrphan {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
    },
    /// A lossy or Tier 0 block has no tier row (a damaged store).
    #[error(
        "tensor {tensor:?} step {step} block {block} is quantized or absent but has no tier row"
    )]
    TierRowMissing {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
    },
    /// An aged block's blob cannot be read, or was made against another base (ADR 0020).
    #[error("tensor {tensor:?} step {step} block {block}: aged segment {address:032x}: {source}")]
    Aged {
        /// Tensor name.
        tensor: String,
        /// Step of the version whose blob it is.
        step: u64,
        /// Block index.
        block: u64,
        /// Content address of the blob.
        address: u128,
        /// The codec's error.
        #[source]
        source: Box<strata_codec::aged::AgedError>,
    },
    /// A block's residual (exact or sparse) cannot be read or applied.
    #[error("tensor {tensor:?} step {step} block {block}: residual: {source}")]
    Residual {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
        /// The codec's error.
        #[source]
        source: Box<strata_codec::residual::ResidualError>,
    },
    /// A table's keys came back out of order: a range read past a key returned one that does
    /// not sort after it. redb does not checksum every page, so a damaged tree can do that.
    #[error("{table} table: reading past {after}, found {found}, which does not sort after it")]
    KeyOrder {
        /// Which table.
        table: &'static str,
        /// Where the read started (exclusive).
        after: String,
        /// The key it returned.
        found: String,
    },
    /// A tensor packed in its checkpoint (ADR 0041) whose bytes cannot be found: its
    /// checkpoint record, its pack part, or the range it names is missing or damaged.
    #[error("tensor {tensor:?} step {step}: packed in its checkpoint, but {reason}")]
    Packed {
        /// Tensor name.
        tensor: String,
        /// Step of the version.
        step: u64,
        /// What is missing or wrong.
        reason: String,
    },
    /// A metadata record failed to decode.
    #[error("{what}: {source}")]
    Record {
        /// Which record (table and key).
        what: String,
        /// What is wrong with it.
        #[source]
        source: RecordError,
    },
    /// The database engine failed while it read the file's pages: redb does not checksum
    /// its pages and trusts them, so a damaged page can make it panic (an index out of
    /// range, a length past a page); the store turns that panic into this error at its
    /// boundary. The file is damaged at the database level: restore it from a copy or a
    /// remote.
    #[error("store {path}: the database engine failed while {op} ({message}): the file's pages are damaged")]
    Engine {
        /// The store file.
        path: std::path::PathBuf,
        /// What the store was doing.
        op: &'static str,
        /// What the engine reported.
        message: String,
    },
}

/// A tiered read or operation that cannot give what was asked (Tier 0 without a policy, a rebuild that fails, data that is no longer exact, a frame stream).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TierFailure {
    /// The tier policy refused an operation (a bug or a damaged tier row).
    #[error("tier policy: {source}")]
    Policy {
        /// The policy's error.
        #[source]
        source: Box<strata_tiering::TierError>,
    },
    /// A Tier 0 block without a reconstruct policy was read in fail-fast mode.
    #[error(
        "tensor {tensor:?} step {step} block {block} is at Tier 0 and has no reconstruct policy"
    )]
    ZeroNoPolicy {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
    },
    /// Rebuilding a Tier 0 block needed more Tier 0 rebuilds than the limit.
    #[error("rebuilding tensor {tensor:?} step {step} needs more than {limit} Tier 0 rebuilds in a chain")]
    DepthExceeded {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// `TierConfig::max_reconstruct_depth`.
        limit: u8,
    },
    /// A Tier 0 block's reconstruct policy cannot be applied.
    #[error("cannot rebuild tensor {tensor:?} step {step} block {block}: {reason}")]
    Reconstruct {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
        /// Why.
        reason: String,
    },
    /// [`crate::Store::get_exact`] on data that is no longer exact.
    #[error(
        "tensor {tensor:?} step {step} block {block} holds no exact data (fidelity {fidelity:?})"
    )]
    NotExact {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// The first block that is not exact.
        block: u64,
        /// What it holds.
        fidelity: Fidelity,
    },
    /// A frame of a frame stream cannot be encoded or decoded.
    #[error("frame stream {tensor:?} step {step} (segment {address:032x}): {source}")]
    Frame {
        /// Tensor name.
        tensor: String,
        /// Step of the frame.
        step: u64,
        /// The multi-frame segment (0 when encoding).
        address: u128,
        /// The codec's error.
        #[source]
        source: Box<strata_codec::frames::FrameError>,
    },
}

impl StoreError {
    /// An I/O error of redb on the store file at `path` (a full disk, a failing device, a
    /// file that ends early) as [`StoreError::Io`] naming the file, also redb's
    /// "previous I/O error" that follows one; redb's report of a damaged page as
    /// [`Corruption::Engine`] naming it; any other error as it is.
    pub(crate) fn on_file(self, path: &std::path::Path) -> StoreError {
        match self {
            StoreError::Database { source, op } => match *source {
                redb::Error::Io(source) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                    StoreError::Io {
                        path: path.to_path_buf(),
                        source: std::io::Error::new(
                            source.kind(),
                            format!("the file ends before a page it points to (truncated?) while {op}: {source}"),
                        ),
                    }
                }
                redb::Error::Io(source) => StoreError::Io {
                    path: path.to_path_buf(),
                    source,
                },
                // redb's own checks of its pages found them damaged: as its panics on them.
                redb::Error::Corrupted(message) => StoreError::Corrupt(Corruption::Engine {
                    path: path.to_path_buf(),
                    op,
                    message,
                }),
                redb::Error::PreviousIo => StoreError::Io {
                    path: path.to_path_buf(),
                    source: std::io::Error::other(format!(
                        "an earlier I/O error on this file stopped the database while {op}; reopen the store"
                    )),
                },
                other => StoreError::Database {
                    op,
                    source: Box::new(other),
                },
            },
            other => other,
        }
    }

    pub(crate) fn db(op: &'static str) -> impl FnOnce(redb::Error) -> StoreError {
        move |e| StoreError::Database {
            op,
            source: Box::new(e),
        }
    }

    /// Whether the error says something does not exist ([`StoreError::NotFound`]).
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound(_))
    }

    /// Whether the error says stored data is damaged ([`StoreError::Corrupt`], and a file
    /// redb found inconsistent on open).
    pub fn is_corrupt(&self) -> bool {
        matches!(
            self,
            StoreError::Corrupt(_) | StoreError::Open(OpenError::Damaged { .. })
        )
    }

    /// Whether the caller's input was refused ([`StoreError::Invalid`]).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, StoreError::Invalid(_))
    }
}

/// Converts any redb error into [`StoreError::Database`] with the operation named.
pub(crate) trait DbContext<T> {
    /// Names the operation.
    fn ctx(self, op: &'static str) -> Result<T>;
}

impl<T, E: Into<redb::Error>> DbContext<T> for std::result::Result<T, E> {
    fn ctx(self, op: &'static str) -> Result<T> {
        self.map_err(|e| StoreError::db(op)(e.into()))
    }
}

/// Everything that can go wrong talking to a remote.
#[cfg(feature = "remote")]
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
    /// A request, its retries included, took longer than the remote's bound
    /// ([`crate::remote::Remote::timeout`]: 60 s unless `STRATA_REMOTE_TIMEOUT` says otherwise):
    /// a stalled server or a network that drops packets.
    #[error("remote {op} of {object} timed out after {} s (a stalled server or network; STRATA_REMOTE_TIMEOUT sets the bound)", after.as_secs_f64())]
    TimedOut {
        /// The operation (`get`, `head`, `put`, `list`, `delete`).
        op: &'static str,
        /// The object's path in the bucket or folder.
        object: String,
        /// The bound that passed.
        after: std::time::Duration,
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
        source: crate::record::ManifestError,
    },
    /// A version with tiered or aged blocks: a remote carries exact versions only.
    #[error("tensor {tensor:?} step {step} is tiered (quantized or Tier 0) or aged (lossy); a remote holds exact versions only: for a tiered one set an exact policy and run maintain, or leave this checkpoint local")]
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

#[cfg(feature = "remote")]
impl From<StoreError> for RemoteError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Remote(r) => *r,
            e => RemoteError::Store(e),
        }
    }
}

#[cfg(feature = "remote")]
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

/// Converts for the store's write closure, which speaks [`StoreError`].
#[cfg(feature = "remote")]
impl From<RemoteError> for StoreError {
    fn from(e: RemoteError) -> Self {
        match e {
            RemoteError::Store(e) => e,
            e => StoreError::Remote(Box::new(e)),
        }
    }
}

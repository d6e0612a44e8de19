//! # strata-store
//!
//! The versioned tensor database of Strata, on one [redb](https://docs.rs/redb) file.
//!
//! ```no_run
//! use strata_store::{DType, Store, TensorRef};
//!
//! let store = Store::open("weights.strata")?;
//! let w: Vec<u8> = [0.5f32, -1.25, 3.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! store.put("layer.0.w", 100, &TensorRef { dtype: DType::F32, shape: &[2, 2], bytes: &w })?;
//! let back = store.get("layer.0.w", 100)?;
//! assert_eq!(back.data, w);
//! # Ok::<(), strata_store::StoreError>(())
//! ```
//!
//! ## Layers
//!
//! ```text
//!  Store API   store.rs (open, transactions)   read.rs  write.rs  retain.rs  stats.rs
//!              verify.rs  safetensors_io.rs  age.rs  compaction.rs (after a committed pass)
//!              tiers/ (set_policy, maintain, rebuild, frames)
//!                 |            uses                                  |
//!  tier state  tiers/runtime.rs (scores, read recording)   tiers/rules.rs (pattern -> policy)
//!                 |
//!  engine      engine/: txn (ReadTxn, WriteTxn, View) . versions (lookups) . blocks (read a
//!              chain) . encode (plan a write) . rebase (delete) . segments (content-addressed
//!              pieces) . quantized . tier_rows . cache
//!                 |
//!  records     record/: byte layouts of every table value, each sealed with a checksum
//!                 |
//!  values      tensor.rs (Tensor, Fidelity) . options.rs . error.rs . tiers/policy.rs
//!                 |
//!  below       strata-codec (segments, lossless and quantized codecs), strata-tiering
//!              (scores and tier decisions), redb (one file, transactions)
//! ```
//!
//! Each layer imports only from the layers under it (`tests/layout.rs` checks that
//! `store/src` has no import loop); the engine's modules are private and hand out named
//! internals through one `pub(crate) use` list.
//!
//! ## Model
//!
//! A tensor is a name with versions at steps (`u64`). Each version is cut into blocks of
//! [`Options::block_bytes`] raw bytes; each block is a codec segment: a lossless keyframe,
//! or an XOR delta against the same block of a base version of the same tensor, chosen by
//! the [`DeltaPolicy`] so that reading any block decodes at most [`Options::max_chain`]
//! segments. A block equal to its base block stores no segment, only a 31-byte reference.
//! Segments are content-addressed (xxh3-128) and reference-counted: identical blocks are
//! stored once. Deleting a version re-bases its dependents in the same transaction.
//!
//! ## Around the store
//!
//! - **safetensors**: [`Store::import_safetensors`] saves a file as one checkpoint (its
//!   `__metadata__` as the checkpoint's JSON metadata); [`Store::export_safetensors`] writes
//!   one back, bit-exact (see [`ImportReport`] and the dtype mapping
//!   [`dtype_from_safetensors`]). A file is checked whole before anything is written (a
//!   name twice, offsets, length: [`SafeTensorsProblem`]); [`check_safetensors`] runs the
//!   same checks alone.
//! - **Aging** (ADR 0020): [`Store::age`] keeps the last N checkpoints, every K-th and the
//!   tagged ones exact and re-encodes the others as quantized deltas under an error budget;
//!   reads report [`Fidelity::Aged`] with the error measured when they were aged;
//!   [`Store::age_dry_run`] runs the same pass and rolls it back.
//! - **Retention**: [`Store::retain`] keeps the last N checkpoints, every K-th and the
//!   tagged ones, deletes the rest in one transaction (re-basing what depended on them, on
//!   all cores), and compacts the file unless it deleted one checkpoint and the room it freed
//!   is what the next save and retention will take (ADR 0037); the handle's close gives
//!   that room back (ADR 0038).
//! - **Tiers** (ADR 0007): [`Store::set_policy`] and [`Store::pin`] by name pattern,
//!   quantized and Tier 0 blocks, [`Store::maintain`], [`Tensor::fidelity`] on every read,
//!   residuals, Tier 0 rebuilds, frame streams ([`Store::append_frame`]).
//!
//! ## File format (store format 3)
//!
//! One redb file (redb 4 file format). Integers are little-endian unless marked BE. Keys
//! are byte strings or fixed-width integers, never redb's `&str` or tuple types, whose
//! decoders trust the file. Every record value below (version, segment index, checkpoint,
//! tier row, policy rule) ends with a u64 xxh3-64 of its key and value, checked on every
//! read: redb does not checksum its pages, so a changed byte of metadata is an error, never
//! wrong data or a wrong precision claim. Format 1 stores (no checksums, no tiers, codec
//! segments of segment format 1) are refused with [`crate::OpenError::UnsupportedFormat`]: the
//! format changed before any release (ADR 0007). Format 2 stores (no member index) are read
//! and written; the first checkpoint that packs a tensor makes one format 3 (ADR 0041).
//!
//! | table | key | value |
//! |---|---|---|
//! | `strata.meta` | `b"format"` | `b"strata-store"`, u32 store format version (3) |
//! | | `b"writer"` | version of the crate that created the file (text) |
//! | | `b"next_segment_id"` | u64: the next local segment id |
//! | | `b"trimmed_at_disk_bytes"` | u64 LE: bytes on disk when a trim last compacted the file (ADR 0036; absent: none yet) |
//! | `strata.versions` | u32 BE name length, name (UTF-8), u64 BE step | version record |
//! | `strata.segments` | u128: content address, xxh3-128 of the segment bytes | u64 refcount, u64 length, u64 segment id, u32 chunk count, u32 tail piece count |
//! | `strata.chunks` | `[u8; 12]`: u64 BE segment id, u32 BE chunk index | chunk bytes |
//! | `strata.tails` | `[u8; 12]`: u64 BE segment id, u32 BE piece index | tail piece bytes |
//! | `strata.checkpoints` | u64 step | checkpoint record |
//! | `strata.tags` | tag name (UTF-8 bytes) | u64 checkpoint step |
//! | | `b"next_block_id"` (in `strata.meta`) | u64: the next tier block id |
//! | `strata.tiers` | version key, u32 BE block index | tier row (`record/tier.rs`) |
//! | `strata.policies` | name pattern (UTF-8 bytes) | policy rule (`tiers/policy.rs`) |
//! | `strata.members` | version key of a name and a first step | steps at which the name is packed (`record/members.rs`, ADR 0041) |
//!
//! **Version record**: `u8 record version (1, 2 for an aged version, 3 for an inline one:
//! dtype, shape and the raw bytes of a tensor of at most 32 bytes, ADR 0029; 4 for a lossless
//! version with its content hash)`, `u8 dtype code`,
//! `u8 ndim (<= 32)`, `u64 x ndim dims`, `u64 elements per block`, `u32 block count (=
//! ceil(elements / elements per block))`, then 31 bytes per block: `u8 flags` (bit 0: delta,
//! bit 1: reference, no new segment, bit 2: quantized, bit 3: Tier 0, bit 4: frame of a
//! multi-frame segment, bit 5: aged, an aged blob, with bit 0 a delta against the base's
//! reconstruction), `u128 segment address`, `u64 base step` (0 for a keyframe; the frame
//! index for a frame),
//! `u8 depth` (segments decoded to read the block, 1 for a keyframe), `u8 run` (versions
//! since the lineage's keyframe; for the newest keyframe, the versions its lineage holds),
//! `u32 segment length`; version 2 ends with `f32` the version's measured relative error
//! ([`Store::age`], ADR 0020), version 4 with `u64` the content hash: xxh3-64 of the blocks'
//! raw xxh3-64 hashes, unchanged when a block is re-encoded against another base (the newest
//! kept a keyframe, ADR 0006), so that remotes compare data, not encodings.
//!
//! **Checkpoint record**: `u8 record version (2)`, `u32 length + metadata (UTF-8)`,
//! `u32 tensor count`, per tensor `varint shared, varint suffix length, suffix`: the name is
//! the first `shared` bytes of the name before it and the suffix (ADR 0034). Version 1,
//! still read, stored each name as `u32 length + name (UTF-8)`. Version 3 (written when the
//! checkpoint packs a tensor, ADR 0041) follows each name with `u8 kind`: 0, a version record
//! of its own; 1, packed: `u8 dtype, u8 ndim, varint per dim, varint part, varint offset`, its
//! bytes at that offset of the checkpoint's pack part of its dtype (hidden tensor
//! `"\u{1}pack/<dtype>/<part>"` at the checkpoint's step).
//!
//! **Member run** (`strata.members`): `u8 version (1)`, then per step after the key's a
//! `varint` gap (>= 1); at most 128 steps a run.
//!
//! **Segment pieces**: a segment is stored once per content address, under a local id from
//! the `next_segment_id` counter. Its body goes to `strata.chunks` in pieces that each fill
//! one redb leaf of `4 KiB << k` exactly (`(4096 << k) - 20` bytes, largest first); the
//! rest (under 4 KiB) goes to `strata.tails` in pieces of at most 495 bytes, eight of
//! which fill a 4 KiB leaf. Ids only grow, so both trees are appended at their right end,
//! where redb packs leaves full. (A segment stored as one value would take a power-of-two
//! page: +27 % on f32 checkpoints, +42 % on bf16 fine-tuning deltas.)
//!
//! A block's bytes are read by following `base` steps down to a keyframe (or a cached
//! block), fetching each segment (its pieces must add up to the indexed length and hash to
//! its address), then decoding upward with the codec, which checks the segment checksum and
//! that each delta gets the base it was made against.

#![forbid(unsafe_code)]

mod age;
mod compaction;
mod engine;
mod error;
mod history;
mod options;
mod read;
mod reader;
mod record;
#[cfg(feature = "remote")]
pub mod remote;
mod repair;
mod retain;
pub mod roles;
mod safetensors_io;
mod stats;
mod store;
mod summary;
mod tensor;
mod tiers;
mod verify;
mod write;
mod writer;

pub use age::{
    AgePolicy, AgeReport, AgeRule, DEFAULT_AGE_CHAIN, DEFAULT_FIRST_MOMENT_BUDGET,
    DEFAULT_SECOND_MOMENT_BUDGET, DEFAULT_UPDATE_BUDGET, POINTER_TAG_PREFIX, TRAINING_STATE_BUDGET,
    TRAINING_STATE_UPDATE_BUDGET,
};
pub use error::{
    Corruption, InvalidInput, NotFound, OpenError, Result, SafeTensorsProblem, StoreError,
    TierFailure,
};
pub use options::{
    DeltaPolicy, FrameOptions, Options, PutOptions, TierOptions, READ_DB_CACHE_BYTES,
};
pub use reader::{BlockRead, CheckpointReader, PendingTensor};
pub use record::{decode_manifest, ManifestError, RecordError};
/// The redb crate, whose [`redb::StorageBackend`] [`Store::open_with_backend`] takes.
pub use redb;
pub use repair::REPAIR_WAIT;
pub use retain::{RetainPolicy, RetainReport};
pub use roles::{Role, RoleRule};
/// The safetensors crate, whose types appear in [`StoreError::SafeTensors`] and
/// [`dtype_from_safetensors`].
pub use safetensors;
pub use safetensors_io::{
    check_safetensors, dtype_from_safetensors, dtype_to_safetensors, metadata_from_text,
    metadata_to_text, shape_from_safetensors, shape_to_safetensors, ExportReport, ImportReport,
    SafeTensorsSummary, METADATA_KEY,
};
pub use stats::{StoreStats, TensorStats};
pub use store::{raised_in_engine, Store};
pub use strata_codec as codec;
pub use strata_codec::convert::to_f64;
pub use strata_codec::DType;
pub use strata_tiering as tiering;
pub use strata_tiering::{Budget, Clock, MaintainReport, ManualClock, Tick, Tier, TierConfig};
pub use summary::CheckpointSummary;
pub use tensor::{
    BlockEncoding, Checkpoint, CheckpointInfo, Fidelity, Tensor, TensorRef, TensorSlice,
    VersionInfo,
};
pub use tiers::frames::FrameAppend;
pub use tiers::policy::{Reconstruct, Residual, Source, SourceStep, TierPolicy, MAX_PERMUTATION};
pub use tiers::TierStats;
pub use verify::{Issue, VerifyReport};
pub use writer::CheckpointWriter;

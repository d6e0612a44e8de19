//! The redb tables of a store. See the crate docs for the layout of keys and values.

use redb::TableDefinition;

/// `"format"` -> [`crate::record::FormatRecord`]; `"writer"` -> crate version that created it.
pub(crate) const META: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("strata.meta");
/// Version key -> [`crate::record::VersionRecord`].
pub(crate) const VERSIONS: TableDefinition<'static, &[u8], &[u8]> =
    TableDefinition::new("strata.versions");
/// Segment address (xxh3-128 of its bytes) -> [`crate::record::SegmentInfo`].
pub(crate) const SEGMENTS: TableDefinition<'static, u128, &[u8]> =
    TableDefinition::new("strata.segments");
/// Piece key -> a page-filling chunk of a segment's body.
pub(crate) const CHUNKS: TableDefinition<'static, [u8; 12], &[u8]> =
    TableDefinition::new("strata.chunks");
/// Piece key -> a piece (at most 495 bytes) of a segment's tail.
pub(crate) const TAILS: TableDefinition<'static, [u8; 12], &[u8]> =
    TableDefinition::new("strata.tails");
/// Checkpoint step -> [`crate::record::CheckpointRecord`].
pub(crate) const CHECKPOINTS: TableDefinition<'static, u64, &[u8]> =
    TableDefinition::new("strata.checkpoints");
/// Version key of a name and a first step -> [`crate::record::MemberRun`]: the steps at
/// which the tensor is packed in its checkpoint (ADR 0041).
pub(crate) const MEMBERS: TableDefinition<'static, &[u8], &[u8]> =
    TableDefinition::new("strata.members");
/// Tag name (UTF-8 bytes) -> checkpoint step.
pub(crate) const TAGS: TableDefinition<'static, &[u8], u64> = TableDefinition::new("strata.tags");

/// Tier key (version key ++ u32 BE block) -> [`crate::record::TierRow`].
pub(crate) const TIERS: TableDefinition<'static, &[u8], &[u8]> =
    TableDefinition::new("strata.tiers");
/// Name pattern (UTF-8 bytes) -> tier policy rule ([`crate::record::Rule`]).
pub(crate) const POLICIES: TableDefinition<'static, &[u8], &[u8]> =
    TableDefinition::new("strata.policies");

/// The meta key of the next tier block id (u64 LE).
pub(crate) const NEXT_BLOCK_ID_KEY: &[u8] = b"next_block_id";
/// The meta key of the format record.
pub(crate) const FORMAT_KEY: &[u8] = b"format";
/// The meta key of the next segment id (u64 LE).
pub(crate) const NEXT_SEGMENT_ID_KEY: &[u8] = b"next_segment_id";
/// The meta key of the writer's version string.
pub(crate) const WRITER_KEY: &[u8] = b"writer";
/// The meta key of the file's bytes on disk when a trim last compacted it (u64 LE, ADR 0036).
pub(crate) const TRIMMED_AT_KEY: &[u8] = b"trimmed_at_disk_bytes";

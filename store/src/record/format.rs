//! The format record, written once at creation under the meta key `format`.
//!
//! ```text
//! 12 bytes  magic "strata-store"
//! u32       store format version
//! ```

use super::{Reader, RecordError};

/// The bytes every store's format record starts with.
pub(crate) const MAGIC: &[u8; 12] = b"strata-store";
/// The store format this build writes. Format 2 added tiers (tier rows, policy rules,
/// quantized, absent and frame blocks), checksums on every record, and holds codec segments
/// of segment format 2. Format 3 adds small tensors packed per checkpoint (ADR 0041): the
/// member index and checkpoint records of version 3. Format 1 files (segment format 1) are
/// refused.
pub(crate) const STORE_FORMAT_VERSION: u32 = 3;
/// The oldest store format this build reads and writes: a format 2 store becomes format 3 at
/// the first checkpoint that packs a tensor, so that builds before it refuse it clearly.
pub(crate) const OLDEST_STORE_FORMAT: u32 = 2;

/// What kind of file this is and which format version wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FormatRecord {
    pub(crate) version: u32,
}

impl FormatRecord {
    /// The record this build writes.
    pub(crate) fn current() -> Self {
        FormatRecord {
            version: STORE_FORMAT_VERSION,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out
    }

    /// `Ok(None)` when the magic is wrong (not our record at all).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Option<Self>, RecordError> {
        let mut r = Reader::new(bytes);
        if r.take(MAGIC.len(), "magic")? != MAGIC {
            return Ok(None);
        }
        let version = r.u32("format version")?;
        r.finish()?;
        Ok(Some(FormatRecord { version }))
    }
}

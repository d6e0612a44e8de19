//! The segment index record: how many blocks refer to a segment, how long it is, and where
//! its pieces are.
//!
//! ```text
//! u64  reference count (block records naming this address)
//! u64  segment length in bytes
//! u64  segment id (key prefix of its pieces in `chunks` and `tails`)
//! u32  chunk count
//! u32  tail piece count
//! ```

use super::{Reader, RecordError};

/// What the store knows about one stored segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentInfo {
    pub(crate) refcount: u64,
    pub(crate) len: u64,
    pub(crate) id: u64,
    pub(crate) chunks: u32,
    pub(crate) tail_pieces: u32,
}

/// Bytes of an encoded [`SegmentInfo`].
const LEN: usize = 32;

impl SegmentInfo {
    pub(crate) fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(&self.refcount.to_le_bytes());
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..24].copy_from_slice(&self.id.to_le_bytes());
        out[24..28].copy_from_slice(&self.chunks.to_le_bytes());
        out[28..].copy_from_slice(&self.tail_pieces.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader::new(bytes);
        let info = SegmentInfo {
            refcount: r.u64("refcount")?,
            len: r.u64("segment length")?,
            id: r.u64("segment id")?,
            chunks: r.u32("chunk count")?,
            tail_pieces: r.u32("tail piece count")?,
        };
        r.finish()?;
        Ok(info)
    }
}

//! The checkpoint record: free-form metadata text and the names of its tensors.
//!
//! ```text
//! u8            record version (1)
//! u32 + bytes   metadata (UTF-8)
//! u32           tensor count
//! (u32 + bytes) per tensor: name (UTF-8)
//! ```

use super::{put_string, Reader, RecordError};

const RECORD_VERSION: u8 = 1;
/// Smallest encoding of one name: its `u32` length.
const MIN_NAME_LEN: usize = 4;

/// A checkpoint: the tensors written together at one step, and the caller's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckpointRecord {
    pub(crate) metadata: String,
    pub(crate) tensors: Vec<String>,
}

impl CheckpointRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let names: usize = self.tensors.iter().map(|t| 4 + t.len()).sum();
        let mut out = Vec::with_capacity(1 + 4 + self.metadata.len() + 4 + names);
        out.push(RECORD_VERSION);
        put_string(&mut out, &self.metadata);
        out.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        for t in &self.tensors {
            put_string(&mut out, t);
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader::new(bytes);
        r.version("record version", RECORD_VERSION)?;
        let metadata = r.string("metadata")?.to_owned();
        let count = r.u32("tensor count")? as usize;
        if count.saturating_mul(MIN_NAME_LEN) > r.remaining() {
            return Err(RecordError::BadValue {
                field: "tensor count",
                value: count as u64,
            });
        }
        let mut tensors = Vec::with_capacity(count);
        for _ in 0..count {
            tensors.push(r.string("tensor name")?.to_owned());
        }
        r.finish()?;
        Ok(CheckpointRecord { metadata, tensors })
    }
}

//! A run of the member index: the steps at which a tensor is packed in a checkpoint
//! (ADR 0041).
//!
//! The key is the version key of the tensor's name and the run's first step; the value:
//!
//! ```text
//! u8      record version (1)
//! varint  per later step: its distance from the step before (>= 1)
//! ```
//!
//! A run holds at most [`RUN_MAX_STEPS`] steps, ascending.

use super::checkpoint::{put_varint, varint};
use super::{Reader, RecordError};

const RECORD_VERSION: u8 = 1;
/// Most steps one run holds; a fuller run is split in two.
pub(crate) const RUN_MAX_STEPS: usize = 128;

/// The steps of one run: ascending, the first is the key's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberRun {
    pub(crate) steps: Vec<u64>,
}

impl MemberRun {
    /// The value bytes of the run (its first step is in the key).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 2 * self.steps.len());
        out.push(RECORD_VERSION);
        for w in self.steps.windows(2) {
            put_varint(&mut out, w[1] - w[0]);
        }
        out
    }

    /// The run stored under a key whose step is `first`.
    pub(crate) fn decode(first: u64, bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader::new(bytes);
        r.version("member run version", RECORD_VERSION)?;
        let mut steps = vec![first];
        while r.remaining() > 0 {
            let gap = varint(&mut r, "member step gap")?;
            let last = steps[steps.len() - 1];
            let next = last.checked_add(gap).filter(|_| gap > 0);
            let Some(next) = next else {
                return Err(RecordError::BadValue {
                    field: "member step gap",
                    value: gap,
                });
            };
            if steps.len() == RUN_MAX_STEPS {
                return Err(RecordError::BadValue {
                    field: "member run length",
                    value: steps.len() as u64 + 1,
                });
            }
            steps.push(next);
        }
        Ok(MemberRun { steps })
    }
}

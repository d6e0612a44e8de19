//! Table keys. All keys are byte strings or integers (never redb's `&str` or tuple types,
//! whose decoders trust the file), encoded so that byte order groups what is read together.
//!
//! - version key: `u32 BE name length, name bytes, u64 BE step`: one tensor's versions are
//!   contiguous and in step order.
//! - piece key: `u64 BE segment id, u32 BE piece index`: a segment's pieces are contiguous
//!   and in order, and new segments append at the end of the tree.

use std::ops::RangeInclusive;

/// Longest tensor name (and tag or pattern) accepted, in bytes.
pub(crate) const MAX_NAME_BYTES: usize = 4096;

/// The key of version `step` of tensor `name`.
pub(crate) fn version_key(name: &str, step: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + name.len() + 8);
    k.extend_from_slice(&(name.len() as u32).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k.extend_from_slice(&step.to_be_bytes());
    k
}

/// Keys of every version of `name` with a step in `steps`.
pub(crate) fn version_key_range(name: &str, steps: RangeInclusive<u64>) -> RangeInclusive<Vec<u8>> {
    version_key(name, *steps.start())..=version_key(name, *steps.end())
}

/// Splits a version key into name and step; `None` if it is malformed.
pub(crate) fn decode_version_key(key: &[u8]) -> Option<(&str, u64)> {
    let len = u32::from_be_bytes(key.get(..4)?.try_into().ok()?) as usize;
    let name_end = 4usize.checked_add(len)?;
    let name = std::str::from_utf8(key.get(4..name_end)?).ok()?;
    let step_bytes: [u8; 8] = key.get(name_end..)?.try_into().ok()?;
    Some((name, u64::from_be_bytes(step_bytes)))
}

/// The key of piece `index` of segment `id` (in `chunks` or `tails`).
pub(crate) fn piece_key(id: u64, index: u32) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&id.to_be_bytes());
    k[8..].copy_from_slice(&index.to_be_bytes());
    k
}

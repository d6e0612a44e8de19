//! The checkpoint record: free-form metadata text and the names of its tensors.
//!
//! ```text
//! u8            record version (2)
//! u32 + bytes   metadata (UTF-8)
//! u32           tensor count
//! per tensor:   varint shared, varint suffix length, suffix bytes
//! ```
//!
//! A name is the first `shared` bytes of the name before it (none for the first) followed
//! by its suffix: names front-coded in the checkpoint's order, which keeps the names of a
//! layer or an optimizer's state (`optimizer.state.12.exp_avg_sq` after
//! `optimizer.state.12.exp_avg`) to a few bytes each (ADR 0034). Each name is UTF-8 and at
//! most [`MAX_NAME_BYTES`] bytes. Varints are LEB128, at most 10 bytes.
//!
//! Version 1, which stored every name whole (`u32` length and bytes), is still read.

use super::{put_string, Reader, RecordError, MAX_NAME_BYTES};

const RECORD_VERSION: u8 = 2;
/// The record version that stored names whole.
const WHOLE_NAMES: u8 = 1;
/// Smallest encoding of one name: its `u32` length (version 1), its two varints (2).
const MIN_NAME_LEN: [usize; 2] = [4, 2];

/// A checkpoint: the tensors written together at one step, and the caller's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckpointRecord {
    pub(crate) metadata: String,
    pub(crate) tensors: Vec<String>,
}

impl CheckpointRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 4 + self.metadata.len() + 4 + 4 * self.tensors.len());
        out.push(RECORD_VERSION);
        put_string(&mut out, &self.metadata);
        out.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        let mut prev: &str = "";
        for t in &self.tensors {
            let shared = shared_prefix(prev, t);
            put_varint(&mut out, shared as u64);
            put_varint(&mut out, (t.len() - shared) as u64);
            out.extend_from_slice(&t.as_bytes()[shared..]);
            prev = t;
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("record version")?;
        if version != RECORD_VERSION && version != WHOLE_NAMES {
            return Err(RecordError::Version {
                found: version,
                supported: RECORD_VERSION,
            });
        }
        let metadata = r.string("metadata")?.to_owned();
        let count = r.u32("tensor count")? as usize;
        let min = MIN_NAME_LEN[usize::from(version == RECORD_VERSION)];
        if count.saturating_mul(min) > r.remaining() {
            return Err(RecordError::BadValue {
                field: "tensor count",
                value: count as u64,
            });
        }
        let mut tensors: Vec<String> = Vec::with_capacity(count);
        for _ in 0..count {
            let name = if version == WHOLE_NAMES {
                r.string("tensor name")?.to_owned()
            } else {
                let prev = tensors.last().map_or("", String::as_str);
                let shared = varint(&mut r, "shared name prefix")?;
                let suffix = varint(&mut r, "name suffix length")?;
                let len = shared.saturating_add(suffix);
                if shared > prev.len() as u64 || len > MAX_NAME_BYTES as u64 {
                    return Err(RecordError::BadValue {
                        field: "tensor name length",
                        value: len,
                    });
                }
                let suffix = r.take(suffix as usize, "tensor name")?;
                let mut name = prev.as_bytes()[..shared as usize].to_vec();
                name.extend_from_slice(suffix);
                String::from_utf8(name).map_err(|_| RecordError::Utf8 {
                    field: "tensor name",
                })?
            };
            tensors.push(name);
        }
        r.finish()?;
        Ok(CheckpointRecord { metadata, tensors })
    }
}

/// The bytes `a` and `b` start with in common, ending on a character boundary of both.
fn shared_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    (0..=n).rev().find(|&k| b.is_char_boundary(k)).unwrap_or(0)
}

/// Appends a LEB128 varint.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint of at most 10 bytes and below `2^64`.
fn varint(r: &mut Reader<'_>, field: &'static str) -> Result<u64, RecordError> {
    let mut v = 0u64;
    for k in 0..10 {
        let b = r.u8(field)?;
        let bits = u64::from(b & 0x7F);
        if k == 9 && bits > 1 {
            break;
        }
        v |= bits << (7 * k);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(RecordError::BadValue { field, value: v })
}

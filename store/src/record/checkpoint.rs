//! The checkpoint record: free-form metadata text, the names of its tensors, and where its
//! packed small tensors are.
//!
//! ```text
//! u8            record version (2, or 3 when a tensor is packed)
//! u32 + bytes   metadata (UTF-8)
//! u32           tensor count
//! per tensor:   varint shared, varint suffix length, suffix bytes
//!               (version 3 only) u8 kind: 0, a version record of its own; 1, packed:
//!                 u8 dtype code, u8 ndim (<= MAX_DIMS), varint dims,
//!                 varint part, varint byte offset in the part
//! ```
//!
//! A packed tensor (ADR 0041) has no version record: its bytes are `elements * dtype size`
//! bytes at `offset` of the checkpoint's pack part `part` of its dtype, a hidden tensor
//! version at the checkpoint's step ([`crate::engine`]'s `packs`). A packed tensor holds at
//! most [`PACK_MEMBER_MAX_BYTES`].
//!
//! A name is the first `shared` bytes of the name before it (none for the first) followed
//! by its suffix: names front-coded in the checkpoint's order, which keeps the names of a
//! layer or an optimizer's state (`optimizer.state.12.exp_avg_sq` after
//! `optimizer.state.12.exp_avg`) to a few bytes each (ADR 0034). Each name is UTF-8 and at
//! most [`MAX_NAME_BYTES`] bytes. Varints are LEB128, at most 10 bytes.
//!
//! Version 1, which stored every name whole (`u32` length and bytes), is still read.

use std::collections::BTreeMap;

use strata_codec::DType;

use super::{put_string, Reader, RecordError, MAX_DIMS, MAX_NAME_BYTES, PACK_MEMBER_MAX_BYTES};

const RECORD_VERSION: u8 = 2;
/// The record version with a kind per tensor (packed tensors).
const WITH_PACKED: u8 = 3;
/// The record version that stored names whole.
const WHOLE_NAMES: u8 = 1;
/// Smallest encoding of one name: its `u32` length (version 1), its two varints (2).
const MIN_NAME_LEN: [usize; 2] = [4, 2];

/// Where a packed tensor's bytes are: `offset..offset + len` of pack part `part` of its
/// dtype, at the checkpoint's step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packed {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    /// Elements (the product of `shape`).
    pub(crate) elements: u64,
    pub(crate) part: u32,
    pub(crate) offset: u64,
}

impl Packed {
    /// Raw bytes of the tensor.
    pub(crate) fn len(&self) -> u64 {
        self.elements * self.dtype.size() as u64
    }
}

/// A checkpoint: the tensors written together at one step, and the caller's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckpointRecord {
    pub(crate) metadata: String,
    pub(crate) tensors: Vec<String>,
    /// The tensors of `tensors` that are packed, by name; the others have version records.
    pub(crate) packed: BTreeMap<String, Packed>,
}

impl CheckpointRecord {
    /// A checkpoint of `tensors`, none packed.
    pub(crate) fn new(metadata: String, tensors: Vec<String>) -> Self {
        CheckpointRecord {
            metadata,
            tensors,
            packed: BTreeMap::new(),
        }
    }

    /// The tensors that have version records of their own (not packed), in order.
    pub(crate) fn unpacked(&self) -> impl Iterator<Item = &String> + '_ {
        // Every packed name is one of `tensors`: as many packed as tensors means all are
        // packed, and none is looked up (a lookup per name was most of `strata log`'s time
        // on checkpoints of small tensors).
        let all_packed = self.packed.len() == self.tensors.len();
        let none_packed = self.packed.is_empty();
        self.tensors
            .iter()
            .filter(move |t| !all_packed && (none_packed || !self.packed.contains_key(*t)))
    }

    /// The pack parts this checkpoint's packed tensors are in, as (dtype, part).
    pub(crate) fn parts(&self) -> std::collections::BTreeSet<(u8, u32)> {
        self.packed
            .values()
            .map(|p| (p.dtype.code(), p.part))
            .collect()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 4 + self.metadata.len() + 4 + 4 * self.tensors.len());
        let version = if self.packed.is_empty() {
            RECORD_VERSION
        } else {
            WITH_PACKED
        };
        out.push(version);
        put_string(&mut out, &self.metadata);
        out.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        let mut prev: &str = "";
        for t in &self.tensors {
            let shared = shared_prefix(prev, t);
            put_varint(&mut out, shared as u64);
            put_varint(&mut out, (t.len() - shared) as u64);
            out.extend_from_slice(&t.as_bytes()[shared..]);
            prev = t;
            if version == WITH_PACKED {
                match self.packed.get(t) {
                    None => out.push(0),
                    Some(p) => {
                        out.push(1);
                        out.push(p.dtype.code());
                        out.push(p.shape.len() as u8);
                        for &d in &p.shape {
                            put_varint(&mut out, d);
                        }
                        put_varint(&mut out, u64::from(p.part));
                        put_varint(&mut out, p.offset);
                    }
                }
            }
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut walk = Walk::new(bytes)?;
        let metadata = walk.metadata().to_owned();
        let mut tensors: Vec<String> = Vec::with_capacity(walk.count());
        // Built at the end in one go: a map built from a run of names in order takes no
        // comparisons beyond the sort's check, where an insert per name searched the map.
        let mut packed = Vec::new();
        while let Some((name, at)) = walk.next()? {
            if let Some(at) = at {
                packed.push((name.to_owned(), at.to_packed()));
            }
            tensors.push(name.to_owned());
        }
        Ok(CheckpointRecord {
            metadata,
            tensors,
            // A name twice keeps its last entry, as inserting each in turn did.
            packed: packed.into_iter().collect(),
        })
    }
}

/// Where a packed tensor is, as [`Walk`] reads it: [`Packed`] with its shape borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedAt<'a> {
    pub(crate) dtype: DType,
    pub(crate) shape: &'a [u64],
    /// Elements (the product of `shape`).
    pub(crate) elements: u64,
    pub(crate) part: u32,
    pub(crate) offset: u64,
}

impl PackedAt<'_> {
    /// Raw bytes of the tensor.
    pub(crate) fn len(&self) -> u64 {
        self.elements * self.dtype.size() as u64
    }

    fn to_packed(self) -> Packed {
        Packed {
            dtype: self.dtype,
            shape: self.shape.to_vec(),
            elements: self.elements,
            part: self.part,
            offset: self.offset,
        }
    }
}

/// A checkpoint record's tensors read one at a time, in order, with every check
/// [`CheckpointRecord::decode`] makes (it is built on this), but with no allocation per
/// tensor: the name and shape are borrowed from buffers the walk reuses. What counts
/// checkpoints (`strata log`) needs no more, and 300,000 names allocated and freed were
/// most of its time.
pub(crate) struct Walk<'a> {
    r: Reader<'a>,
    version: u8,
    metadata: &'a str,
    count: usize,
    left: usize,
    name: Vec<u8>,
    shape: Vec<u64>,
}

impl<'a> Walk<'a> {
    /// Reads the record's header: its version, metadata and tensor count.
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Self, RecordError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("record version")?;
        if !(WHOLE_NAMES..=WITH_PACKED).contains(&version) {
            return Err(RecordError::Version {
                found: version,
                supported: WITH_PACKED,
            });
        }
        let metadata = r.string("metadata")?;
        let count = r.u32("tensor count")? as usize;
        let min = MIN_NAME_LEN[usize::from(version != WHOLE_NAMES)];
        if count.saturating_mul(min) > r.remaining() {
            return Err(RecordError::BadValue {
                field: "tensor count",
                value: count as u64,
            });
        }
        Ok(Walk {
            r,
            version,
            metadata,
            count,
            left: count,
            name: Vec::new(),
            shape: Vec::new(),
        })
    }

    /// The checkpoint's metadata text.
    pub(crate) fn metadata(&self) -> &'a str {
        self.metadata
    }

    /// How many tensors the record lists.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The next tensor's name and, if it is packed, where; `None` after the last, once
    /// the record is known to hold nothing more.
    pub(crate) fn next(&mut self) -> Result<Option<(&str, Option<PackedAt<'_>>)>, RecordError> {
        if self.left == 0 {
            return match self.r.remaining() {
                0 => Ok(None),
                extra => Err(RecordError::Trailing { extra }),
            };
        }
        self.left -= 1;
        if self.version == WHOLE_NAMES {
            let name = self.r.string("tensor name")?;
            self.name.clear();
            self.name.extend_from_slice(name.as_bytes());
        } else {
            let shared = varint(&mut self.r, "shared name prefix")?;
            let suffix = varint(&mut self.r, "name suffix length")?;
            let len = shared.saturating_add(suffix);
            if shared > self.name.len() as u64 || len > MAX_NAME_BYTES as u64 {
                return Err(RecordError::BadValue {
                    field: "tensor name length",
                    value: len,
                });
            }
            let suffix = self.r.take(suffix as usize, "tensor name")?;
            self.name.truncate(shared as usize);
            self.name.extend_from_slice(suffix);
        }
        let name = std::str::from_utf8(&self.name).map_err(|_| RecordError::Utf8 {
            field: "tensor name",
        })?;
        let packed = if self.version == WITH_PACKED {
            match self.r.u8("tensor kind")? {
                0 => None,
                1 => Some(read_packed(&mut self.r, &mut self.shape)?),
                kind => {
                    return Err(RecordError::BadValue {
                        field: "tensor kind",
                        value: kind.into(),
                    })
                }
            }
        } else {
            None
        };
        Ok(Some((name, packed)))
    }
}

/// Reads where a packed tensor is (after its kind byte), its shape into `shape`.
fn read_packed<'s>(
    r: &mut Reader<'_>,
    shape: &'s mut Vec<u64>,
) -> Result<PackedAt<'s>, RecordError> {
    let code = r.u8("packed dtype")?;
    let dtype = DType::from_code(code).ok_or(RecordError::BadValue {
        field: "packed dtype",
        value: code.into(),
    })?;
    let ndim = usize::from(r.u8("packed ndim")?);
    if ndim > MAX_DIMS {
        return Err(RecordError::BadValue {
            field: "packed ndim",
            value: ndim as u64,
        });
    }
    shape.clear();
    let mut elements = 1u64;
    for _ in 0..ndim {
        let d = varint(r, "packed dim")?;
        elements = elements.saturating_mul(d);
        shape.push(d);
    }
    let bytes = elements.saturating_mul(dtype.size() as u64);
    if bytes == 0 || bytes > PACK_MEMBER_MAX_BYTES {
        return Err(RecordError::BadValue {
            field: "packed tensor bytes",
            value: bytes,
        });
    }
    let part = varint(r, "pack part")?;
    let part = u32::try_from(part).map_err(|_| RecordError::BadValue {
        field: "pack part",
        value: part,
    })?;
    let offset = varint(r, "pack offset")?;
    Ok(PackedAt {
        dtype,
        shape,
        elements,
        part,
        offset,
    })
}

/// The bytes `a` and `b` start with in common, ending on a character boundary of both.
fn shared_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    (0..=n).rev().find(|&k| b.is_char_boundary(k)).unwrap_or(0)
}

/// Appends a LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint of at most 10 bytes and below `2^64`.
pub(super) fn varint(r: &mut Reader<'_>, field: &'static str) -> Result<u64, RecordError> {
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

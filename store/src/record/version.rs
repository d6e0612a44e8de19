//! The version record: dtype, shape and one [`BlockRecord`] per block.
//!
//! ```text
//! u8      record version: 1, or 2 for an aged version (the trailing f32 below)
//! u8      dtype code (strata_codec::DType::code)
//! u8      ndim (<= MAX_DIMS)
//! u64*n   dims
//! u64     elements per block (>= 1)
//! u32     block count (= ceil(elements / elements per block))
//! 31*k    block records:
//!   u8    flags: bit 0 delta (has a base), bit 1 reference (no new segment), bit 2
//!         quantized (the segment is a quantized tier; no base), bit 3 absent (Tier 0: no
//!         segment, address and length 0), bit 4 frame (the segment is a multi-frame
//!         segment of a frame stream), bit 5 aged (the segment is an aged blob, a
//!         quantized delta against the base's reconstruction when bit 0 is set; ADR
//!         0020); others 0. At most one of bits 2, 3, 4, 5, and bit 0 only alone or with 5.
//!   u128  segment address (xxh3-128 of the segment bytes)
//!   u64   base step (0 unless delta); for a frame, its index in the multi-frame segment
//!   u8    depth: segments decoded to read this block (1 for a keyframe)
//!   u8    run: versions since this block's lineage last had a keyframe (1 for a keyframe; for
//!         the newest kept a keyframe, the versions of its lineage, itself included: ADR 0006)
//!   u32   segment length in bytes
//! f32     (version 2 only) the version's fidelity: the largest relative Frobenius error of
//!         its aged blocks, measured when it was aged
//! u64     (version 4 only) the version's content hash: xxh3-64 of the xxh3-64 hashes of its
//!         blocks' raw bytes, in block order (little-endian), as written. Re-encoding a
//!         block (a re-base, or the newest kept a keyframe, ADR 0006) leaves it as it is, so
//!         it names the data, not its encoding ([`VersionRecord::same_content`])
//! ```
//!
//! Version 4 is version 1 with the content hash: a lossless version written by this build.
//!
//! An inline version (record version 3) holds a small tensor's bytes in the record itself:
//! no segment, no block records (ADR 0029).
//!
//! ```text
//! u8      record version: 3
//! u8      dtype code
//! u8      ndim (<= MAX_DIMS)
//! u64*n   dims
//! bytes   the tensor's raw bytes: elements * dtype size, 1 to PACK_MEMBER_MAX_BYTES
//! ```
//!
//! A write stores inline only tensors of at most [`INLINE_MAX_BYTES`]. A packed tensor of a
//! checkpoint (ADR 0041) reads as an inline version of up to [`PACK_MEMBER_MAX_BYTES`], and
//! travels so in remote manifests; a pull stores it so.

use strata_codec::DType;

use super::{Reader, RecordError};

const RECORD_VERSION: u8 = 1;
/// The record version of an aged version (with its measured error).
const RECORD_VERSION_AGED: u8 = 2;
/// The record version of an inline version (its bytes in the record).
const RECORD_VERSION_INLINE: u8 = 3;
/// The record version of a version with its content hash.
const RECORD_VERSION_CONTENT: u8 = 4;
/// Largest tensor, in raw bytes, stored inline in its version record: step counters and
/// other scalars. At most the bytes of a reference block's record, so an inline version never
/// costs more than a version that repeats its predecessor (ADR 0029).
pub(crate) const INLINE_MAX_BYTES: u64 = 32;
/// Largest tensor, in raw bytes, that a checkpoint packs (ADR 0041).
pub(crate) const PACK_MEMBER_MAX_BYTES: u64 = 64 << 10;
/// Most dimensions a shape may have.
pub(crate) const MAX_DIMS: usize = 32;
/// Bytes of one encoded [`BlockRecord`].
pub(crate) const BLOCK_RECORD_LEN: usize = 1 + 16 + 8 + 1 + 1 + 4;
/// Largest decoded block, in bytes; bounds every block allocation made on a record's word.
pub(crate) const MAX_BLOCK_BYTES: u64 = 1 << 30;

const FLAG_DELTA: u8 = 1;
const FLAG_REFERENCE: u8 = 2;
const FLAG_QUANTIZED: u8 = 4;
const FLAG_ABSENT: u8 = 8;
const FLAG_FRAME: u8 = 16;
const FLAG_AGED: u8 = 32;
const KNOWN_FLAGS: u8 =
    FLAG_DELTA | FLAG_REFERENCE | FLAG_QUANTIZED | FLAG_ABSENT | FLAG_FRAME | FLAG_AGED;

/// What a block's segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Form {
    /// A lossless keyframe or delta.
    #[default]
    Lossless,
    /// A quantized tier (its tier row says which and how precise).
    Quantized,
    /// Tier 0: no segment (its tier row says how to rebuild it).
    Absent,
    /// Frame `index` of a multi-frame segment (a frame stream).
    Frame {
        /// Index of the frame in the segment.
        index: u32,
    },
    /// An aged blob: a quantized delta against the base's reconstruction (with a base),
    /// or quantized values (without).
    Aged,
    /// The only block of an inline version: its bytes are the record's
    /// ([`VersionRecord::inline`]); no segment, never a base, never tiered or aged.
    Inline,
}

/// How one block of a version is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockRecord {
    /// Content address of the segment holding the block.
    pub(crate) address: u128,
    /// The version whose same block the segment is an XOR delta against, if any.
    pub(crate) base: Option<u64>,
    /// The block is identical to an earlier block and shares its record: no new segment.
    pub(crate) reference: bool,
    /// Segments decoded to read this block.
    pub(crate) depth: u8,
    /// Versions since this block's lineage last stored a keyframe; for a keyframe that a
    /// write kept as the newest (ADR 0006), the versions its lineage holds, itself included.
    pub(crate) run: u8,
    /// Segment length in bytes.
    pub(crate) segment_len: u32,
    /// Lossless, quantized or absent.
    pub(crate) form: Form,
}

impl BlockRecord {
    /// A block that needs no other block: its own segment of `len` bytes (a quantized
    /// segment, a frame of one, a keyframe) or none (Tier 0: address and length 0).
    pub(crate) fn standalone(address: u128, len: usize, form: Form) -> BlockRecord {
        BlockRecord {
            address,
            base: None,
            reference: false,
            depth: 1,
            run: 1,
            segment_len: len as u32,
            form,
        }
    }

    /// Whether this block is the next link of the reverse chain under version `above`'s
    /// block: its own lossless delta against `above`, not a reference to another version's
    /// segment. A write that keeps the newest a keyframe re-encodes the versions before it
    /// against it, one link at a time (ADR 0006); this rule finds those links.
    pub(crate) fn reads_through(&self, above: u64) -> bool {
        self.base == Some(above) && self.form == Form::Lossless && !self.reference
    }

    /// Segment bytes this block adds to the store: none when it refers to an earlier
    /// block's segment (or has none: Tier 0, or inline bytes, counted with the record).
    pub(crate) fn stored_bytes(&self) -> u64 {
        if self.reference || self.form == Form::Inline {
            0
        } else {
            u64::from(self.segment_len)
        }
    }

    /// Whether the block holds exact data by itself: a lossless segment or inline bytes
    /// (not quantized, Tier 0, a frame or aged).
    pub(crate) fn is_exact(&self) -> bool {
        matches!(self.form, Form::Lossless | Form::Inline)
    }

    /// Whether the block has a segment of its own (not Tier 0, not inline).
    pub(crate) fn has_segment(&self) -> bool {
        !matches!(self.form, Form::Absent | Form::Inline)
    }

    fn write(&self, out: &mut Vec<u8>) {
        let mut flags = 0;
        if self.base.is_some() {
            flags |= FLAG_DELTA;
        }
        if self.reference {
            flags |= FLAG_REFERENCE;
        }
        flags |= match self.form {
            Form::Lossless => 0,
            Form::Quantized => FLAG_QUANTIZED,
            Form::Absent => FLAG_ABSENT,
            Form::Frame { .. } => FLAG_FRAME,
            Form::Aged => FLAG_AGED,
            // An inline version writes no block records (VersionRecord::encode).
            Form::Inline => 0,
        };
        out.push(flags);
        out.extend_from_slice(&self.address.to_le_bytes());
        let base_field = match self.form {
            Form::Frame { index } => u64::from(index),
            _ => self.base.unwrap_or(0),
        };
        out.extend_from_slice(&base_field.to_le_bytes());
        out.push(self.depth);
        out.push(self.run);
        out.extend_from_slice(&self.segment_len.to_le_bytes());
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, RecordError> {
        let flags = r.u8("block flags")?;
        let kinds = flags & (FLAG_QUANTIZED | FLAG_ABSENT | FLAG_FRAME | FLAG_AGED);
        if flags & !KNOWN_FLAGS != 0
            || kinds.count_ones() > 1
            || (flags & FLAG_DELTA != 0 && kinds & !FLAG_AGED != 0)
            || (flags & FLAG_ABSENT != 0 && flags & FLAG_REFERENCE != 0)
        {
            return Err(RecordError::BadValue {
                field: "block flags",
                value: flags.into(),
            });
        }
        let address = r.u128("block address")?;
        let base_step = r.u64("block base step")?;
        let form = if flags & FLAG_QUANTIZED != 0 {
            Form::Quantized
        } else if flags & FLAG_ABSENT != 0 {
            Form::Absent
        } else if flags & FLAG_FRAME != 0 {
            let index = u32::try_from(base_step).map_err(|_| RecordError::BadValue {
                field: "frame index",
                value: base_step,
            })?;
            Form::Frame { index }
        } else if flags & FLAG_AGED != 0 {
            Form::Aged
        } else {
            Form::Lossless
        };
        let depth = r.u8("block depth")?;
        let run = r.u8("block run")?;
        let segment_len = r.u32("block segment length")?;
        let base = (flags & FLAG_DELTA != 0).then_some(base_step);
        if base.is_none() && base_step != 0 && flags & FLAG_FRAME == 0 {
            return Err(RecordError::BadValue {
                field: "keyframe base step",
                value: base_step,
            });
        }
        let min_depth = if base.is_some() { 2 } else { 1 };
        if depth < min_depth {
            return Err(RecordError::BadValue {
                field: "block depth",
                value: depth.into(),
            });
        }
        if form == Form::Absent && (address != 0 || segment_len != 0) {
            return Err(RecordError::BadValue {
                field: "absent block segment length",
                value: segment_len.into(),
            });
        }
        Ok(BlockRecord {
            address,
            base,
            reference: flags & FLAG_REFERENCE != 0,
            depth,
            run,
            segment_len,
            form,
        })
    }
}

/// One version of a tensor: its layout and where each block is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VersionRecord {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    /// Elements in the tensor (product of `shape`, checked).
    pub(crate) elements: u64,
    /// Elements per block; the last block may hold fewer.
    pub(crate) block_elems: u64,
    pub(crate) blocks: Vec<BlockRecord>,
    /// For an aged version, the largest relative Frobenius error of its blocks, measured
    /// when it was aged; `None` for every other version.
    pub(crate) aged: Option<f32>,
    /// For an inline version, the tensor's bytes (its one block has [`Form::Inline`]);
    /// `None` for every other version.
    pub(crate) inline: Option<Vec<u8>>,
    /// The hash of the data as written ([`content_hash`]), for a version written losslessly
    /// by a build that records it; `None` for older records, inline and aged versions.
    pub(crate) content: Option<u64>,
}

/// The content hash of a version from the xxh3-64 hashes of its blocks' raw bytes.
pub(crate) fn content_hash(block_hashes: &[u64]) -> u64 {
    let mut bytes = Vec::with_capacity(block_hashes.len() * 8);
    for h in block_hashes {
        bytes.extend_from_slice(&h.to_le_bytes());
    }
    twox_hash::XxHash3_64::oneshot(&bytes)
}

impl VersionRecord {
    /// Number of blocks for `elements` cut in blocks of `block_elems`.
    pub(crate) fn block_count(elements: u64, block_elems: u64) -> u64 {
        elements.div_ceil(block_elems.max(1))
    }

    /// Elements of block `b` (the last one may be short).
    pub(crate) fn block_len(&self, b: u64) -> u64 {
        let start = b.saturating_mul(self.block_elems);
        self.elements.saturating_sub(start).min(self.block_elems)
    }

    /// Whether another version has the same dtype, shape and block cut, so its blocks can
    /// serve as bases for this one's.
    pub(crate) fn same_layout(&self, other: &VersionRecord) -> bool {
        self.dtype == other.dtype
            && self.shape == other.shape
            && self.block_elems == other.block_elems
            && self.blocks.len() == other.blocks.len()
    }

    /// Bytes of the raw tensor.
    pub(crate) fn raw_bytes(&self) -> u64 {
        self.elements.saturating_mul(self.dtype.size() as u64)
    }

    /// An inline version of `bytes` (1 to [`PACK_MEMBER_MAX_BYTES`], checked by the caller).
    pub(crate) fn inline(dtype: DType, shape: Vec<u64>, elements: u64, bytes: Vec<u8>) -> Self {
        VersionRecord {
            dtype,
            shape,
            elements,
            block_elems: elements,
            blocks: vec![BlockRecord::standalone(0, bytes.len(), Form::Inline)],
            aged: None,
            inline: Some(bytes),
            content: None,
        }
    }

    /// Whether two records hold the same data, whatever its encoding: equal records, or
    /// two exact versions of the same layout with the same content hash (a version whose
    /// blocks were re-encoded since, against other bases, holds the data it was written
    /// with). Records without a content hash compare whole. Remotes compare with it.
    #[cfg(feature = "remote")]
    pub(crate) fn same_content(&self, other: &VersionRecord) -> bool {
        if self == other {
            return true;
        }
        let exact = |r: &VersionRecord| r.aged.is_none() && r.blocks.iter().all(|b| b.is_exact());
        match (self.content, other.content) {
            (Some(a), Some(b)) => {
                a == b
                    && self.dtype == other.dtype
                    && self.shape == other.shape
                    && self.block_elems == other.block_elems
                    && exact(self)
                    && exact(other)
            }
            _ => false,
        }
    }

    /// Whether a tensor of `raw_bytes` is stored inline.
    pub(crate) fn fits_inline(raw_bytes: u64) -> bool {
        (1..=INLINE_MAX_BYTES).contains(&raw_bytes)
    }

    /// Bytes [`VersionRecord::encode`] gives.
    pub(crate) fn encoded_len(&self) -> usize {
        if let Some(bytes) = &self.inline {
            return 3 + 8 * self.shape.len() + bytes.len();
        }
        let tail = match (self.aged, self.content) {
            (Some(_), _) => 4,
            (None, Some(_)) => 8,
            (None, None) => 0,
        };
        3 + 8 * self.shape.len() + 12 + BLOCK_RECORD_LEN * self.blocks.len() + tail
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(match (&self.inline, self.aged, self.content) {
            (Some(_), _, _) => RECORD_VERSION_INLINE,
            (None, Some(_), _) => RECORD_VERSION_AGED,
            (None, None, Some(_)) => RECORD_VERSION_CONTENT,
            (None, None, None) => RECORD_VERSION,
        });
        out.push(self.dtype.code());
        out.push(self.shape.len() as u8);
        for d in &self.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        if let Some(bytes) = &self.inline {
            out.extend_from_slice(bytes);
            return out;
        }
        out.extend_from_slice(&self.block_elems.to_le_bytes());
        out.extend_from_slice(&(self.blocks.len() as u32).to_le_bytes());
        for b in &self.blocks {
            b.write(&mut out);
        }
        match (self.aged, self.content) {
            (Some(e), _) => out.extend_from_slice(&e.to_le_bytes()),
            (None, Some(c)) => out.extend_from_slice(&c.to_le_bytes()),
            (None, None) => {}
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("record version")?;
        if !(RECORD_VERSION..=RECORD_VERSION_CONTENT).contains(&version) {
            return Err(RecordError::Version {
                found: version,
                supported: RECORD_VERSION_CONTENT,
            });
        }
        let code = r.u8("dtype")?;
        let dtype = DType::from_code(code).ok_or(RecordError::BadValue {
            field: "dtype",
            value: code.into(),
        })?;
        let ndim = usize::from(r.u8("ndim")?);
        if ndim > MAX_DIMS {
            return Err(RecordError::BadValue {
                field: "ndim",
                value: ndim as u64,
            });
        }
        let mut shape = Vec::with_capacity(ndim);
        let mut elements: u64 = 1;
        for _ in 0..ndim {
            let d = r.u64("dim")?;
            elements = elements.checked_mul(d).ok_or(RecordError::BadValue {
                field: "dim",
                value: d,
            })?;
            shape.push(d);
        }
        let raw = elements
            .checked_mul(dtype.size() as u64)
            .ok_or(RecordError::BadValue {
                field: "element count",
                value: elements,
            })?;
        if version == RECORD_VERSION_INLINE {
            if raw == 0 || raw > PACK_MEMBER_MAX_BYTES {
                return Err(RecordError::BadValue {
                    field: "inline bytes",
                    value: raw,
                });
            }
            let bytes = r.take(raw as usize, "inline bytes")?.to_vec();
            r.finish()?;
            return Ok(Self::inline(dtype, shape, elements, bytes));
        }
        let block_elems = r.u64("elements per block")?;
        let block_bytes_ok = block_elems
            .checked_mul(dtype.size() as u64)
            .is_some_and(|b| b <= MAX_BLOCK_BYTES);
        if block_elems == 0 || !block_bytes_ok {
            return Err(RecordError::BadValue {
                field: "elements per block",
                value: block_elems,
            });
        }
        let count = r.u32("block count")?;
        if u64::from(count) != Self::block_count(elements, block_elems) {
            return Err(RecordError::BadValue {
                field: "block count",
                value: count.into(),
            });
        }
        // The count is backed by bytes present: check before allocating.
        let needed = (count as usize).saturating_mul(BLOCK_RECORD_LEN);
        if needed > r.remaining() {
            return Err(RecordError::Truncated {
                field: "block records",
                needed,
                at: bytes.len() - r.remaining(),
                len: bytes.len(),
            });
        }
        let mut blocks = Vec::with_capacity(count as usize);
        for _ in 0..count {
            blocks.push(BlockRecord::read(&mut r)?);
        }
        let aged = if version == RECORD_VERSION_AGED {
            let e = f32::from_le_bytes(r.u32("aged error")?.to_le_bytes());
            if !(e.is_finite() && e >= 0.0) {
                return Err(RecordError::BadValue {
                    field: "aged error",
                    value: u64::from(e.to_bits()),
                });
            }
            Some(e)
        } else {
            None
        };
        let content = if version == RECORD_VERSION_CONTENT {
            Some(r.u64("content hash")?)
        } else {
            None
        };
        r.finish()?;
        Ok(VersionRecord {
            dtype,
            shape,
            elements,
            block_elems,
            blocks,
            aged,
            inline: None,
            content,
        })
    }
}

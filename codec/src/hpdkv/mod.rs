//! HPΔKV blobs: dense or sparse fp16/bf16 residuals (seed `001_67b69c8fd7531102`, ADR 0012).
//!
//! # Layout
//!
//! All integers little-endian. Offsets are from the start of the blob.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `HPDV` |
//! | 4 | 1 | version, 1; readers refuse any other |
//! | 5 | 1 | dtype: 0 fp16, 1 bf16 |
//! | 6 | 1 | rank `r` (0..=255) |
//! | 7 | 1 | flags: bit 0 index block present, bit 1 zlib-compressed payload; bits 2..=7 must be 0 |
//! | 8 | `4 r` | shape, u32 per dimension; the element count `∏ shape` is at most 2^32 |
//! | `8 + 4 r` | 0..=15 | zero padding to the next multiple of 16 |
//! | `A` | `4 + 4 k` | index block (flag bit 0 only): u32 `k`, then `k` strictly increasing flat indices `< ∏ shape` |
//! | | 0..=15 | zero padding to the next multiple of 16 (flag bit 0 only) |
//! | `P` | rest | payload, `P % 16 == 0`: `k` values (sparse) or `∏ shape` values (dense), fp16/bf16 words; raw, or one zlib stream (RFC 1950) that inflates to exactly that many bytes and ends the blob |
//!
//! The seed leaves the position of the index block open (its table puts the padding right
//! after the shape, its notes align the payload); this layout satisfies both: the header is
//! padded to 16 bytes and the payload starts on a 16-byte boundary. ADR 0012 lists this
//! and the other decisions (strictly increasing indices, unknown flag bits refused, the
//! payload running to the end of the blob, no checksum of its own).
//!
//! # Reading untrusted blobs
//!
//! [`HpdkvView::parse`] checks every header field, the padding and the whole index block,
//! and fails with an [`HpdkvError`] naming the [`Field`] and its byte offset. Nothing is
//! allocated from a length before the input is known to justify it: the index block must be
//! present in full, a raw payload must have exactly the declared size, and a compressed
//! payload may declare at most [`MAX_INFLATE_RATIO`] times its own length (deflate cannot
//! expand further). Inflating writes into a buffer of the declared size and fails as soon as
//! the stream would produce more.
//!
//! ```
//! use strata_codec::hpdkv::{HalfDType, HpdkvBlob};
//!
//! let blob = HpdkvBlob {
//!     dtype: HalfDType::F16,
//!     shape: vec![4, 8],
//!     indices: Some(vec![3, 17]),
//!     values: vec![0x3C00, 0xBC00], // 1.0 and -1.0
//! };
//! let bytes = blob.encode(true)?;
//! assert_eq!(&bytes[..4], b"HPDV");
//! assert_eq!(HpdkvBlob::decode(&bytes, 1 << 20)?, blob);
//! # Ok::<(), strata_codec::hpdkv::HpdkvError>(())
//! ```

use std::fmt;
use std::io::Write;

use flate2::{Decompress, FlushDecompress, Status};
use thiserror::Error;

use crate::DType;

/// The four bytes every blob starts with.
pub const MAGIC: [u8; 4] = *b"HPDV";
/// The only version this build reads and writes.
pub const VERSION: u8 = 1;
/// Alignment of the payload (and of the index block) in bytes.
pub const ALIGN: usize = 16;
/// Largest element count a shape may have: indices are u32 (the seed asks for larger
/// tensors to be sharded over several blobs).
pub const MAX_ELEMENTS: u64 = 1 << 32;
/// Largest factor by which a zlib payload may inflate. A deflate stream codes at most 258
/// bytes per 2 bits (a length/distance pair with 1-bit codes), so no valid stream exceeds
/// this; a header declaring more is refused before anything is inflated.
pub const MAX_INFLATE_RATIO: usize = 1032;

/// Flag bit 0: an index block precedes the payload.
pub const FLAG_INDICES: u8 = 1;
/// Flag bit 1: the payload is zlib-compressed.
pub const FLAG_COMPRESSED: u8 = 2;
const KNOWN_FLAGS: u8 = FLAG_INDICES | FLAG_COMPRESSED;

const VERSION_OFS: usize = 4;
const DTYPE_OFS: usize = 5;
const RANK_OFS: usize = 6;
const FLAGS_OFS: usize = 7;
const SHAPE_OFS: usize = 8;

/// Bytes per stored value (fp16 and bf16 alike).
const VALUE_SIZE: usize = 2;

/// The element type of an HPΔKV payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HalfDType {
    /// IEEE 754 binary16 (code 0).
    F16,
    /// bfloat16 (code 1).
    BF16,
}

impl HalfDType {
    /// Both types, in code order.
    pub const ALL: [HalfDType; 2] = [HalfDType::F16, HalfDType::BF16];

    /// The dtype byte of the header.
    pub const fn code(self) -> u8 {
        match self {
            HalfDType::F16 => 0,
            HalfDType::BF16 => 1,
        }
    }

    /// The type for a dtype byte, or `None` if it is unknown.
    pub const fn from_code(code: u8) -> Option<HalfDType> {
        match code {
            0 => Some(HalfDType::F16),
            1 => Some(HalfDType::BF16),
            _ => None,
        }
    }

    /// The same type as a codec [`DType`].
    pub const fn dtype(self) -> DType {
        match self {
            HalfDType::F16 => DType::F16,
            HalfDType::BF16 => DType::BF16,
        }
    }

    /// The value of a word as f32 (exact).
    pub fn to_f32(self, word: u16) -> f32 {
        match self {
            HalfDType::F16 => half::f16::from_bits(word).to_f32(),
            HalfDType::BF16 => half::bf16::from_bits(word).to_f32(),
        }
    }

    /// The word nearest to `x` (round to nearest even; beyond the largest finite value it
    /// gives an infinity, NaN stays NaN).
    pub fn from_f32(self, x: f32) -> u16 {
        match self {
            HalfDType::F16 => half::f16::from_f32(x).to_bits(),
            HalfDType::BF16 => half::bf16::from_f32(x).to_bits(),
        }
    }
}

/// A field of a blob, as named by [`HpdkvError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Bytes 0..4.
    Magic,
    /// Byte 4.
    Version,
    /// Byte 5.
    DType,
    /// Byte 6.
    Rank,
    /// Byte 7.
    Flags,
    /// One u32 of the shape.
    Shape {
        /// The dimension.
        dim: u8,
    },
    /// Zero bytes between the shape and the next 16-byte boundary.
    HeaderPadding,
    /// The u32 `k` opening the index block.
    IndexCount,
    /// The `k` indices.
    Indices,
    /// Zero bytes between the index block and the payload.
    IndexPadding,
    /// The values, raw or zlib-compressed.
    Payload,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Magic => f.write_str("magic"),
            Field::Version => f.write_str("version"),
            Field::DType => f.write_str("dtype"),
            Field::Rank => f.write_str("rank"),
            Field::Flags => f.write_str("flags"),
            Field::Shape { dim } => write!(f, "shape[{dim}]"),
            Field::HeaderPadding => f.write_str("header padding"),
            Field::IndexCount => f.write_str("index count"),
            Field::Indices => f.write_str("index block"),
            Field::IndexPadding => f.write_str("index padding"),
            Field::Payload => f.write_str("payload"),
        }
    }
}

/// Errors of reading and writing HPΔKV blobs. Reader errors name the field and the byte
/// offset where the blob goes wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HpdkvError {
    /// The blob ends inside a field.
    #[error("HPΔKV blob is {len} bytes: {field} needs bytes {offset}..{end}")]
    Truncated {
        /// The field cut short.
        field: Field,
        /// Where the field starts.
        offset: usize,
        /// Where it would end.
        end: u64,
        /// Bytes present.
        len: usize,
    },
    /// The first four bytes are not `HPDV`.
    #[error("not an HPΔKV blob: magic {found:02x?} at offset 0, expected \"HPDV\"")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A version this build does not read.
    #[error(
        "HPΔKV version {version} at offset 4 is not supported (this build reads version {VERSION})"
    )]
    UnsupportedVersion {
        /// The version found.
        version: u8,
    },
    /// An unknown dtype byte.
    #[error("unknown HPΔKV dtype {code} at offset 5 (0 fp16, 1 bf16)")]
    UnknownDType {
        /// The code found.
        code: u8,
    },
    /// Flag bits this version does not define.
    #[error("HPΔKV flags {flags:#04x} at offset 7 set undefined bits {unknown:#04x}")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
        /// The bits that are not defined.
        unknown: u8,
    },
    /// The shape has more than [`MAX_ELEMENTS`] elements.
    #[error("shape up to {field} (offset {offset}) has more than 2^32 elements")]
    TooManyElements {
        /// The dimension where the product passed the limit.
        field: Field,
        /// Its offset.
        offset: usize,
    },
    /// A padding byte is not zero (a writer that did not align the payload ends up here).
    #[error("{field} byte at offset {offset} is {value:#04x}, must be 0")]
    NonZeroPadding {
        /// Which padding.
        field: Field,
        /// The byte's offset.
        offset: usize,
        /// The byte.
        value: u8,
    },
    /// The index count exceeds the element count.
    #[error("index count {count} at offset {offset} exceeds the {elements} elements of the shape")]
    IndexCountTooLarge {
        /// The count found.
        count: u32,
        /// Elements of the shape.
        elements: u64,
        /// Offset of the count.
        offset: usize,
    },
    /// An index is not below the element count.
    #[error(
        "index {index} (entry {position}, offset {offset}) is out of range for {elements} elements"
    )]
    IndexOutOfRange {
        /// Entry number in the index block.
        position: u32,
        /// The index.
        index: u32,
        /// Elements of the shape.
        elements: u64,
        /// Offset of the index.
        offset: usize,
    },
    /// An index is not above the one before it.
    #[error("index {index} (entry {position}, offset {offset}) is not above the previous index {previous}")]
    IndicesNotIncreasing {
        /// Entry number in the index block.
        position: u32,
        /// The index.
        index: u32,
        /// The previous index.
        previous: u32,
        /// Offset of the index.
        offset: usize,
    },
    /// A raw payload is not exactly the declared number of values.
    #[error("raw payload at offset {offset} is {actual} bytes, the header declares {expected}")]
    PayloadLength {
        /// Offset of the payload.
        offset: usize,
        /// Bytes the header declares.
        expected: u64,
        /// Bytes present.
        actual: usize,
    },
    /// A compressed payload declares more bytes than any deflate stream of its length
    /// can produce.
    #[error(
        "compressed payload at offset {offset} is {actual} bytes and cannot inflate to the declared {declared} (at most {MAX_INFLATE_RATIO}x)"
    )]
    DeclaredSizeExceedsInput {
        /// Offset of the payload.
        offset: usize,
        /// Bytes the header declares.
        declared: u64,
        /// Bytes of compressed payload present.
        actual: usize,
    },
    /// The zlib stream is invalid (bad header, bad block, Adler-32 mismatch).
    #[error("zlib payload at offset {offset}: {message}")]
    Zlib {
        /// Offset of the payload.
        offset: usize,
        /// What the inflater reported.
        message: String,
    },
    /// The zlib stream ends before it has produced the declared bytes, or is cut short.
    #[error("zlib payload at offset {offset} inflates to {produced} bytes, the header declares {declared}")]
    InflatedTooShort {
        /// Offset of the payload.
        offset: usize,
        /// Bytes declared.
        declared: usize,
        /// Bytes produced before the stream ended or the input ran out.
        produced: usize,
    },
    /// The zlib stream would produce more than the declared bytes.
    #[error("zlib payload at offset {offset} inflates to more than the declared {declared} bytes")]
    InflatedTooLong {
        /// Offset of the payload.
        offset: usize,
        /// Bytes declared.
        declared: usize,
    },
    /// Bytes after the end of the zlib stream.
    #[error("{count} bytes after the end of the zlib stream, at offset {offset}")]
    TrailingBytes {
        /// Offset of the first trailing byte.
        offset: usize,
        /// How many.
        count: usize,
    },
    /// The values would take more bytes than the caller allows.
    #[error("blob decodes to {len} bytes of values, over the limit of {limit}")]
    OverLimit {
        /// Bytes of values.
        len: u64,
        /// The caller's limit.
        limit: usize,
    },
    /// The output buffer does not have one slot per value.
    #[error("output buffer holds {actual} values, the blob has {expected}")]
    OutputLength {
        /// Values in the blob.
        expected: u64,
        /// Slots given.
        actual: usize,
    },
    /// Writing: a rank above 255.
    #[error("rank {rank} is above 255")]
    RankTooLarge {
        /// The rank asked for.
        rank: usize,
    },
    /// Writing: a dense blob whose value count is not the shape's element count, or a
    /// sparse one with a different number of indices and values.
    #[error("{values} values for {expected} slots")]
    ValueCount {
        /// Values the shape or the indices call for.
        expected: u64,
        /// Values given.
        values: usize,
    },
    /// Writing: the compressor failed (writing to memory; not expected to happen).
    #[error("zlib compression failed: {message}")]
    Compress {
        /// What the compressor reported.
        message: String,
    },
}

/// A blob's contents, owned: what [`HpdkvBlob::encode`] writes and [`HpdkvBlob::decode`]
/// reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HpdkvBlob {
    /// Element type of the values.
    pub dtype: HalfDType,
    /// Shape of the tensor the values belong to (at most 255 dimensions).
    pub shape: Vec<u32>,
    /// Flat indices of the values, strictly increasing (sparse), or `None` (dense: one
    /// value per element, in row-major order).
    pub indices: Option<Vec<u32>>,
    /// The values as fp16/bf16 bit patterns.
    pub values: Vec<u16>,
}

impl HpdkvBlob {
    /// Writes the blob; with `compress` the payload is one zlib stream (level 6).
    ///
    /// # Errors
    /// [`HpdkvError::RankTooLarge`], [`HpdkvError::TooManyElements`],
    /// [`HpdkvError::ValueCount`], [`HpdkvError::IndexCountTooLarge`],
    /// [`HpdkvError::IndexOutOfRange`] or [`HpdkvError::IndicesNotIncreasing`] for a blob
    /// the format cannot hold (offsets then refer to where the field would be written).
    pub fn encode(&self, compress: bool) -> Result<Vec<u8>, HpdkvError> {
        let rank = u8::try_from(self.shape.len()).map_err(|_| HpdkvError::RankTooLarge {
            rank: self.shape.len(),
        })?;
        let elements = shape_elements(self.shape.iter().copied())?;
        let index_ofs = align(SHAPE_OFS + 4 * self.shape.len());
        let expected = match &self.indices {
            None => elements,
            Some(ix) => {
                check_indices(ix, elements, index_ofs)?;
                ix.len() as u64
            }
        };
        if expected != self.values.len() as u64 {
            return Err(HpdkvError::ValueCount {
                expected,
                values: self.values.len(),
            });
        }
        let mut flags = 0;
        if self.indices.is_some() {
            flags |= FLAG_INDICES;
        }
        if compress {
            flags |= FLAG_COMPRESSED;
        }
        let index_len = self.indices.as_ref().map_or(0, |ix| 4 + 4 * ix.len());
        let raw_len = VALUE_SIZE * self.values.len();
        let mut out = Vec::with_capacity(index_ofs + align(index_len) + raw_len / 2 + ALIGN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, self.dtype.code(), rank, flags]);
        for d in &self.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        pad(&mut out);
        if let Some(ix) = &self.indices {
            // `check_indices` bounded the count by the element count, at most 2^32, and
            // strictly increasing u32 values number at most 2^32; 2^32 itself would need
            // every index, which is a dense blob's job.
            let k = u32::try_from(ix.len()).map_err(|_| HpdkvError::IndexCountTooLarge {
                count: u32::MAX,
                elements,
                offset: index_ofs,
            })?;
            out.extend_from_slice(&k.to_le_bytes());
            for i in ix {
                out.extend_from_slice(&i.to_le_bytes());
            }
            pad(&mut out);
        }
        let mut raw = Vec::with_capacity(raw_len);
        for v in &self.values {
            raw.extend_from_slice(&v.to_le_bytes());
        }
        if compress {
            let mut z = flate2::write::ZlibEncoder::new(out, flate2::Compression::default());
            let compress_err = |e: std::io::Error| HpdkvError::Compress {
                message: e.to_string(),
            };
            z.write_all(&raw).map_err(compress_err)?;
            out = z.finish().map_err(compress_err)?;
        } else {
            out.extend_from_slice(&raw);
        }
        Ok(out)
    }

    /// Reads a whole blob, refusing one whose values take more than `limit` bytes.
    ///
    /// # Errors
    /// Any [`HpdkvError`] of [`HpdkvView::parse`] and [`HpdkvView::values`].
    pub fn decode(bytes: &[u8], limit: usize) -> Result<HpdkvBlob, HpdkvError> {
        let view = HpdkvView::parse(bytes)?;
        let values = view.values(limit)?;
        Ok(HpdkvBlob {
            dtype: view.dtype,
            shape: view.shape.clone(),
            indices: view.is_sparse().then(|| view.indices().collect()),
            values,
        })
    }
}

/// A parsed blob: header, shape and index block checked, payload not yet inflated.
#[derive(Debug, Clone)]
pub struct HpdkvView<'a> {
    dtype: HalfDType,
    shape: Vec<u32>,
    elements: u64,
    compressed: bool,
    /// The `k` index words (empty for a dense blob); checked in range and increasing.
    index_bytes: &'a [u8],
    sparse: bool,
    payload: &'a [u8],
    payload_offset: usize,
}

impl<'a> HpdkvView<'a> {
    /// Parses and checks a blob: magic, version, dtype, flags, shape, both paddings, the
    /// whole index block, and the payload's length (exact for a raw payload, within
    /// [`MAX_INFLATE_RATIO`] for a compressed one). Allocates only the shape (at most 255
    /// words, once they are known to be present).
    ///
    /// # Errors
    /// [`HpdkvError`] naming the first bad field and its offset.
    pub fn parse(bytes: &'a [u8]) -> Result<HpdkvView<'a>, HpdkvError> {
        let magic = take(bytes, 0, 4, Field::Magic)?;
        if magic != MAGIC {
            return Err(HpdkvError::BadMagic {
                found: [magic[0], magic[1], magic[2], magic[3]],
            });
        }
        let version = take(bytes, VERSION_OFS, 1, Field::Version)?[0];
        if version != VERSION {
            return Err(HpdkvError::UnsupportedVersion { version });
        }
        let code = take(bytes, DTYPE_OFS, 1, Field::DType)?[0];
        let dtype = HalfDType::from_code(code).ok_or(HpdkvError::UnknownDType { code })?;
        let rank = usize::from(take(bytes, RANK_OFS, 1, Field::Rank)?[0]);
        let flags = take(bytes, FLAGS_OFS, 1, Field::Flags)?[0];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(HpdkvError::UnknownFlags {
                flags,
                unknown: flags & !KNOWN_FLAGS,
            });
        }
        let mut shape = Vec::with_capacity(rank);
        let mut elements = 1u64;
        for dim in 0..rank {
            let ofs = SHAPE_OFS + 4 * dim;
            let field = Field::Shape { dim: dim as u8 };
            let d = u32_le(take(bytes, ofs, 4, field)?);
            elements = elements
                .checked_mul(u64::from(d))
                .filter(|&e| e <= MAX_ELEMENTS)
                .ok_or(HpdkvError::TooManyElements { field, offset: ofs })?;
            shape.push(d);
        }
        let mut pos = check_padding(bytes, SHAPE_OFS + 4 * rank, Field::HeaderPadding)?;

        let sparse = flags & FLAG_INDICES != 0;
        let mut index_bytes: &[u8] = &[];
        let count = if sparse {
            let k = u32_le(take(bytes, pos, 4, Field::IndexCount)?);
            if u64::from(k) > elements {
                return Err(HpdkvError::IndexCountTooLarge {
                    count: k,
                    elements,
                    offset: pos,
                });
            }
            let start = pos + 4;
            // `k` words of 4 bytes: checked against the bytes present before any use.
            let len = 4 * u64::from(k);
            index_bytes = take_u64(bytes, start, len, Field::Indices)?;
            validate_index_bytes(index_bytes, elements, start)?;
            pos = check_padding(bytes, start + index_bytes.len(), Field::IndexPadding)?;
            u64::from(k)
        } else {
            elements
        };

        let payload = &bytes[pos..];
        let declared = count * VALUE_SIZE as u64;
        let compressed = flags & FLAG_COMPRESSED != 0;
        if compressed {
            let cap = payload.len() as u64 * MAX_INFLATE_RATIO as u64;
            if declared > cap {
                return Err(HpdkvError::DeclaredSizeExceedsInput {
                    offset: pos,
                    declared,
                    actual: payload.len(),
                });
            }
        } else if declared != payload.len() as u64 {
            return Err(HpdkvError::PayloadLength {
                offset: pos,
                expected: declared,
                actual: payload.len(),
            });
        }
        Ok(HpdkvView {
            dtype,
            shape,
            elements,
            compressed,
            index_bytes,
            sparse,
            payload,
            payload_offset: pos,
        })
    }

    /// Element type of the values.
    pub fn dtype(&self) -> HalfDType {
        self.dtype
    }

    /// The tensor's shape.
    pub fn shape(&self) -> &[u32] {
        &self.shape
    }

    /// Elements of the tensor, `∏ shape` (1 for rank 0).
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// Whether the blob has an index block.
    pub fn is_sparse(&self) -> bool {
        self.sparse
    }

    /// Whether the payload is zlib-compressed.
    pub fn is_compressed(&self) -> bool {
        self.compressed
    }

    /// Values in the payload: `k` for a sparse blob, the element count for a dense one.
    pub fn value_count(&self) -> u64 {
        if self.sparse {
            (self.index_bytes.len() / 4) as u64
        } else {
            self.elements
        }
    }

    /// Offset of the payload in the blob (a multiple of [`ALIGN`]).
    pub fn payload_offset(&self) -> usize {
        self.payload_offset
    }

    /// The flat indices of a sparse blob, ascending (empty for a dense blob). Already
    /// checked by [`HpdkvView::parse`].
    pub fn indices(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.index_bytes.chunks_exact(4).map(u32_le)
    }

    /// Decodes the values into `out`, which must hold [`HpdkvView::value_count`] words.
    ///
    /// # Errors
    /// [`HpdkvError::OutputLength`]; for a compressed payload [`HpdkvError::Zlib`],
    /// [`HpdkvError::InflatedTooShort`], [`HpdkvError::InflatedTooLong`] or
    /// [`HpdkvError::TrailingBytes`].
    pub fn values_into(&self, out: &mut [u16]) -> Result<(), HpdkvError> {
        let expected = self.value_count();
        if out.len() as u64 != expected {
            return Err(HpdkvError::OutputLength {
                expected,
                actual: out.len(),
            });
        }
        if self.compressed {
            let mut raw = vec![0u8; VALUE_SIZE * out.len()];
            inflate_exact(self.payload, &mut raw, self.payload_offset)?;
            words_into(&raw, out);
        } else {
            words_into(self.payload, out);
        }
        Ok(())
    }

    /// Decodes the values into a new vector, refusing more than `limit` bytes of values.
    ///
    /// # Errors
    /// [`HpdkvError::OverLimit`], and those of [`HpdkvView::values_into`].
    pub fn values(&self, limit: usize) -> Result<Vec<u16>, HpdkvError> {
        let len = self.value_count() * VALUE_SIZE as u64;
        if len > limit as u64 {
            return Err(HpdkvError::OverLimit { len, limit });
        }
        // Within `limit`, and `parse` bounded it by the payload's length.
        let mut out = vec![0u16; self.value_count() as usize];
        self.values_into(&mut out)?;
        Ok(out)
    }
}

/// `∏ dims`, refused above [`MAX_ELEMENTS`].
pub(crate) fn shape_elements(dims: impl Iterator<Item = u32>) -> Result<u64, HpdkvError> {
    let mut elements = 1u64;
    for (dim, d) in dims.enumerate() {
        elements = elements
            .checked_mul(u64::from(d))
            .filter(|&e| e <= MAX_ELEMENTS)
            .ok_or(HpdkvError::TooManyElements {
                field: Field::Shape {
                    dim: u8::try_from(dim).unwrap_or(u8::MAX),
                },
                offset: SHAPE_OFS + 4 * dim,
            })?;
    }
    Ok(elements)
}

/// Checks indices a writer was given: at most `elements`, in range, strictly increasing.
fn check_indices(ix: &[u32], elements: u64, offset: usize) -> Result<(), HpdkvError> {
    if ix.len() as u64 > elements {
        return Err(HpdkvError::IndexCountTooLarge {
            count: u32::try_from(ix.len()).unwrap_or(u32::MAX),
            elements,
            offset,
        });
    }
    check_index_sequence(ix.iter().copied(), elements, offset + 4)
}

fn validate_index_bytes(bytes: &[u8], elements: u64, offset: usize) -> Result<(), HpdkvError> {
    check_index_sequence(bytes.chunks_exact(4).map(u32_le), elements, offset)
}

fn check_index_sequence(
    ix: impl Iterator<Item = u32>,
    elements: u64,
    offset: usize,
) -> Result<(), HpdkvError> {
    let mut previous: Option<u32> = None;
    for (position, index) in ix.enumerate() {
        let at = offset + 4 * position;
        let position = position as u32;
        if u64::from(index) >= elements {
            return Err(HpdkvError::IndexOutOfRange {
                position,
                index,
                elements,
                offset: at,
            });
        }
        if let Some(p) = previous.filter(|&p| index <= p) {
            return Err(HpdkvError::IndicesNotIncreasing {
                position,
                index,
                previous: p,
                offset: at,
            });
        }
        previous = Some(index);
    }
    Ok(())
}

/// Inflates one zlib stream that must fill `out` exactly and end `input`.
fn inflate_exact(input: &[u8], out: &mut [u8], offset: usize) -> Result<(), HpdkvError> {
    let mut z = Decompress::new(true);
    // Once `out` is full, the stream is run into this one-byte buffer: any byte landing
    // there means it inflates to more than declared.
    let mut spill = [0u8; 1];
    loop {
        let (in_pos, out_pos) = (z.total_in() as usize, z.total_out() as usize);
        let full = out_pos >= out.len();
        let dst: &mut [u8] = if full {
            &mut spill
        } else {
            &mut out[out_pos..]
        };
        let status = z
            .decompress(&input[in_pos..], dst, FlushDecompress::None)
            .map_err(|e| HpdkvError::Zlib {
                offset,
                message: e.to_string(),
            })?;
        let produced = z.total_out() as usize;
        if produced > out.len() {
            return Err(HpdkvError::InflatedTooLong {
                offset,
                declared: out.len(),
            });
        }
        match status {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError => {
                if z.total_in() as usize == in_pos && produced == out_pos {
                    // No progress: the input ran out before the stream's end.
                    return Err(HpdkvError::InflatedTooShort {
                        offset,
                        declared: out.len(),
                        produced,
                    });
                }
            }
        }
    }
    let produced = z.total_out() as usize;
    if produced != out.len() {
        return Err(HpdkvError::InflatedTooShort {
            offset,
            declared: out.len(),
            produced,
        });
    }
    let consumed = z.total_in() as usize;
    if consumed != input.len() {
        return Err(HpdkvError::TrailingBytes {
            offset: offset + consumed,
            count: input.len() - consumed,
        });
    }
    Ok(())
}

fn words_into(raw: &[u8], out: &mut [u16]) {
    for (w, b) in out.iter_mut().zip(raw.chunks_exact(VALUE_SIZE)) {
        *w = u16::from_le_bytes([b[0], b[1]]);
    }
}

/// `bytes[offset..offset + len]`, or [`HpdkvError::Truncated`] naming `field`.
fn take(bytes: &[u8], offset: usize, len: usize, field: Field) -> Result<&[u8], HpdkvError> {
    take_u64(bytes, offset, len as u64, field)
}

fn take_u64(bytes: &[u8], offset: usize, len: u64, field: Field) -> Result<&[u8], HpdkvError> {
    let end = offset as u64 + len;
    if end > bytes.len() as u64 {
        return Err(HpdkvError::Truncated {
            field,
            offset,
            end,
            len: bytes.len(),
        });
    }
    Ok(&bytes[offset..end as usize])
}

/// Checks the zero padding from `from` to the next multiple of [`ALIGN`]; returns that
/// boundary.
fn check_padding(bytes: &[u8], from: usize, field: Field) -> Result<usize, HpdkvError> {
    let to = align(from);
    let pad = take(bytes, from, to - from, field)?;
    if let Some(i) = pad.iter().position(|&b| b != 0) {
        return Err(HpdkvError::NonZeroPadding {
            field,
            offset: from + i,
            value: pad[i],
        });
    }
    Ok(to)
}

fn align(n: usize) -> usize {
    n.next_multiple_of(ALIGN)
}

fn pad(out: &mut Vec<u8>) {
    out.resize(align(out.len()), 0);
}

fn u32_le(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests;

//! The fixed 48-byte segment header. Every offset is built from the previous one.

use super::SegmentError;
use crate::quant::{QuantBits, MAX_GROUP_SIZE};
use crate::DType;

/// The four bytes every segment starts with.
pub const MAGIC: [u8; 4] = *b"STSG";
/// The only format version this build reads and writes.
pub const FORMAT_VERSION: u8 = 2;

pub(crate) const MAGIC_OFS: usize = 0;
pub(crate) const VERSION_OFS: usize = MAGIC_OFS + 4;
pub(crate) const ENCODING_OFS: usize = VERSION_OFS + 1;
pub(crate) const DTYPE_OFS: usize = ENCODING_OFS + 1;
pub(crate) const BITS_OFS: usize = DTYPE_OFS + 1;
pub(crate) const ELEMENTS_OFS: usize = BITS_OFS + 1;
pub(crate) const GROUP_OFS: usize = ELEMENTS_OFS + 8;
pub(crate) const RESERVED_OFS: usize = GROUP_OFS + 4;
pub(crate) const PAYLOAD_LEN_OFS: usize = RESERVED_OFS + 4;
pub(crate) const BASE_HASH_OFS: usize = PAYLOAD_LEN_OFS + 8;
pub(crate) const CHECKSUM_OFS: usize = BASE_HASH_OFS + 8;
/// Bytes of the header; the payload follows.
pub const HEADER_LEN: usize = CHECKSUM_OFS + 8;

/// How a segment's payload encodes its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Lossless, standalone.
    Keyframe,
    /// Lossless, XOR against the same block of a base version.
    Delta,
    /// Quantized at 8, 7, 5 or 3 bits, every group standard.
    Quantized(QuantBits),
    /// Quantized at 3 bits with some groups two-level.
    TwoLevel3,
    /// Several frames of one tensor quantized with shared per-group scales (a frame
    /// stream's scale epoch, [`crate::frames`]); `elements` counts the values of one frame.
    QuantizedFrames(QuantBits),
}

impl Encoding {
    pub(crate) fn code(self) -> u8 {
        match self {
            Encoding::Keyframe => 0,
            Encoding::Delta => 1,
            Encoding::Quantized(_) => 2,
            Encoding::TwoLevel3 => 3,
            Encoding::QuantizedFrames(_) => 4,
        }
    }

    pub(crate) fn bits(self) -> u8 {
        match self {
            Encoding::Keyframe | Encoding::Delta => 0,
            Encoding::Quantized(b) | Encoding::QuantizedFrames(b) => b.bits(),
            Encoding::TwoLevel3 => 3,
        }
    }

    /// Whether decoding gives back the exact bytes.
    pub fn is_lossless(self) -> bool {
        matches!(self, Encoding::Keyframe | Encoding::Delta)
    }

    /// The quantized width, if any.
    pub fn quant_bits(self) -> Option<QuantBits> {
        match self {
            Encoding::Keyframe | Encoding::Delta => None,
            Encoding::Quantized(b) | Encoding::QuantizedFrames(b) => Some(b),
            Encoding::TwoLevel3 => Some(QuantBits::B3),
        }
    }

    fn from_codes(code: u8, bits: u8) -> Result<Encoding, SegmentError> {
        let enc = match (code, bits) {
            (0, 0) => Encoding::Keyframe,
            (1, 0) => Encoding::Delta,
            (2, b) => {
                Encoding::Quantized(QuantBits::from_bits(b).ok_or(SegmentError::BadBits {
                    encoding: code,
                    bits,
                })?)
            }
            (3, 3) => Encoding::TwoLevel3,
            (4, b) => {
                Encoding::QuantizedFrames(QuantBits::from_bits(b).ok_or(SegmentError::BadBits {
                    encoding: code,
                    bits,
                })?)
            }
            (0..=3, b) => {
                return Err(SegmentError::BadBits {
                    encoding: code,
                    bits: b,
                })
            }
            (c, _) => return Err(SegmentError::UnknownEncoding { code: c }),
        };
        Ok(enc)
    }
}

/// A parsed, validated segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// How the payload encodes the block.
    pub encoding: Encoding,
    /// The block's element type (quantized payloads hold values of a float dtype as f32).
    pub dtype: DType,
    /// Elements in the block.
    pub elements: u64,
    /// Values per quantization group (0 for lossless).
    pub group_size: u32,
    /// Payload bytes after the header.
    pub payload_len: u64,
    /// xxh3-64 of the base block's bytes (deltas; 0 otherwise).
    pub base_hash: u64,
    /// xxh3-64 of header bytes `0..40` followed by the payload.
    pub checksum: u64,
}

impl SegmentHeader {
    /// Writes the header with the checksum field zero; [`super::seal`] fills it in.
    pub(crate) fn write_unsealed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(FORMAT_VERSION);
        out.push(self.encoding.code());
        out.push(self.dtype.code());
        out.push(self.encoding.bits());
        out.extend_from_slice(&self.elements.to_le_bytes());
        out.extend_from_slice(&self.group_size.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.payload_len.to_le_bytes());
        out.extend_from_slice(&self.base_hash.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
    }

    /// Parses and checks the fields of `bytes[..HEADER_LEN]`, without the checksum.
    pub(crate) fn read(bytes: &[u8]) -> Result<SegmentHeader, SegmentError> {
        let h = bytes
            .get(..HEADER_LEN)
            .ok_or(SegmentError::TooShort { len: bytes.len() })?;
        let magic = [h[0], h[1], h[2], h[3]];
        if magic != MAGIC {
            return Err(SegmentError::BadMagic { found: magic });
        }
        if h[VERSION_OFS] != FORMAT_VERSION {
            return Err(SegmentError::UnsupportedVersion {
                version: h[VERSION_OFS],
            });
        }
        let encoding = Encoding::from_codes(h[ENCODING_OFS], h[BITS_OFS])?;
        let dtype = DType::from_code(h[DTYPE_OFS])
            .ok_or(SegmentError::UnknownDType { code: h[DTYPE_OFS] })?;
        let elements = u64_at(h, ELEMENTS_OFS);
        let group_size = u32_at(h, GROUP_OFS);
        let reserved = u32_at(h, RESERVED_OFS);
        if reserved != 0 {
            return Err(SegmentError::ReservedNonZero { value: reserved });
        }
        let header = SegmentHeader {
            encoding,
            dtype,
            elements,
            group_size,
            payload_len: u64_at(h, PAYLOAD_LEN_OFS),
            base_hash: u64_at(h, BASE_HASH_OFS),
            checksum: u64_at(h, CHECKSUM_OFS),
        };
        header.check_consistency()?;
        Ok(header)
    }

    fn check_consistency(&self) -> Result<(), SegmentError> {
        let quantized = !self.encoding.is_lossless();
        if quantized && !self.dtype.is_float() {
            return Err(SegmentError::QuantizedNonFloat { dtype: self.dtype });
        }
        let group_ok = if quantized {
            (1..=MAX_GROUP_SIZE).contains(&self.group_size)
        } else {
            self.group_size == 0
        };
        if !group_ok {
            return Err(SegmentError::BadGroupSize {
                group_size: self.group_size,
                encoding: self.encoding,
            });
        }
        if self.encoding != Encoding::Delta && self.base_hash != 0 {
            return Err(SegmentError::UnexpectedBaseHash);
        }
        self.decoded_len()?;
        Ok(())
    }

    /// Bytes the decoded block occupies: `elements * dtype size` for lossless segments,
    /// `elements * 4` (f32) for quantized ones; for [`Encoding::QuantizedFrames`], the
    /// bytes of one frame.
    ///
    /// # Errors
    /// [`SegmentError::TooLarge`] if that does not fit in `usize`.
    pub fn decoded_len(&self) -> Result<usize, SegmentError> {
        let width = if self.encoding.is_lossless() {
            self.dtype.size()
        } else {
            4
        };
        usize::try_from(self.elements)
            .ok()
            .and_then(|n| n.checked_mul(width))
            .ok_or(SegmentError::TooLarge {
                elements: self.elements,
            })
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

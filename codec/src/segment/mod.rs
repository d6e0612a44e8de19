//! Segments: one self-describing, checksummed byte string per block.
//!
//! # Layout
//!
//! All integers little-endian. Header, 48 bytes:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `STSG` |
//! | 4 | 1 | format version, 2 |
//! | 5 | 1 | encoding: 0 lossless keyframe, 1 lossless XOR delta, 2 quantized, 3 two-level 3-bit, 4 quantized frames |
//! | 6 | 1 | dtype code ([`DType::code`]) |
//! | 7 | 1 | bits: 0 for lossless, 8/7/5/3 for quantized (3 for two-level) |
//! | 8 | 8 | element count (of one frame, for encoding 4) |
//! | 16 | 4 | group size (0 for lossless) |
//! | 20 | 4 | reserved, 0 |
//! | 24 | 8 | payload length |
//! | 32 | 8 | xxh3-64 of the base block's bytes (delta), else 0 |
//! | 40 | 8 | xxh3-64 of bytes 0..40 followed by the payload |
//!
//! The payload follows: [`crate::lossless`] for encodings 0 and 1, [`crate::quant`] for 2
//! and 3, [`crate::frames`] for 4. A reader refuses versions it does not know, checks the checksum before looking at
//! the payload, and checks a delta's base against the recorded hash before using it.

mod header;

pub use header::{Encoding, SegmentHeader, FORMAT_VERSION, HEADER_LEN, MAGIC};

use crate::lossless::{self, LosslessError, LosslessOptions};
use crate::quant::{self, QuantBits, QuantError, QuantParams, QuantShape};
use crate::DType;
use header::CHECKSUM_OFS;
use std::hash::Hasher;
use thiserror::Error;
use twox_hash::XxHash3_64;

/// Errors of encoding, parsing and decoding segments.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum SegmentError {
    /// Fewer bytes than a header.
    #[error("segment is {len} bytes, shorter than the {HEADER_LEN}-byte header")]
    TooShort {
        /// Bytes present.
        len: usize,
    },
    /// The first four bytes are not `STSG`.
    #[error("not a segment: magic {found:02x?}, expected \"STSG\"")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A format version this build does not read.
    #[error("segment format version {version} is not supported (this build reads version {FORMAT_VERSION})")]
    UnsupportedVersion {
        /// The version found.
        version: u8,
    },
    /// An unknown encoding code.
    #[error("unknown segment encoding {code} (damaged, or written by a newer Strata)")]
    UnknownEncoding {
        /// The code found.
        code: u8,
    },
    /// A bits field that does not fit the encoding.
    #[error("encoding {encoding} does not allow {bits} bits")]
    BadBits {
        /// Encoding code.
        encoding: u8,
        /// Bits found.
        bits: u8,
    },
    /// An unknown dtype code.
    #[error("unknown dtype code {code}")]
    UnknownDType {
        /// The code found.
        code: u8,
    },
    /// The reserved field is not zero.
    #[error("reserved header field is {value:#x}, must be 0")]
    ReservedNonZero {
        /// The value found.
        value: u32,
    },
    /// A group size that does not fit the encoding.
    #[error("group size {group_size} invalid for {encoding:?}")]
    BadGroupSize {
        /// Group size found.
        group_size: u32,
        /// The encoding.
        encoding: Encoding,
    },
    /// A quantized segment of an integer dtype.
    #[error("quantized segment declares non-float dtype {dtype}")]
    QuantizedNonFloat {
        /// The dtype.
        dtype: DType,
    },
    /// A base hash on a segment that is not a delta.
    #[error("base hash set on a segment that is not a delta")]
    UnexpectedBaseHash,
    /// The decoded size does not fit in memory addresses.
    #[error("element count {elements} is too large")]
    TooLarge {
        /// Elements declared.
        elements: u64,
    },
    /// The payload length field disagrees with the bytes present.
    #[error("payload length field says {declared} bytes, {actual} present")]
    PayloadLength {
        /// Declared length.
        declared: u64,
        /// Bytes after the header.
        actual: usize,
    },
    /// The checksum does not match: the segment is corrupt.
    #[error("checksum mismatch: stored {stored:#018x}, computed {computed:#018x}")]
    ChecksumMismatch {
        /// Stored checksum.
        stored: u64,
        /// Checksum of the bytes present.
        computed: u64,
    },
    /// A delta was decoded without its base, or a non-delta with one.
    #[error("segment is {encoding:?}: base {}", if *.needed { "required but not given" } else { "given but not used" })]
    BaseArgument {
        /// The encoding.
        encoding: Encoding,
        /// Whether the encoding needs a base.
        needed: bool,
    },
    /// The base given is not the one the delta was made against.
    #[error("base block hash {actual:#018x} does not match the delta's base {expected:#018x}")]
    BaseMismatch {
        /// Hash recorded in the segment.
        expected: u64,
        /// Hash of the base given.
        actual: u64,
    },
    /// The output buffer has the wrong size.
    #[error("output buffer is {actual} bytes, the block decodes to {expected}")]
    OutputLength {
        /// Bytes the block decodes to.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A lossless call on a quantized segment or the reverse.
    #[error("segment is {encoding:?}, not {wanted}")]
    WrongKind {
        /// The encoding.
        encoding: Encoding,
        /// What the call expected.
        wanted: &'static str,
    },
    /// The block would decode to more bytes than the caller allows.
    #[error("block decodes to {len} bytes, over the limit of {limit}")]
    OverLimit {
        /// Decoded bytes.
        len: usize,
        /// The caller's limit.
        limit: usize,
    },
    /// Quantizing only works on float dtypes.
    #[error("cannot quantize dtype {dtype}")]
    NotFloat {
        /// The dtype.
        dtype: DType,
    },
    /// The lossless payload is invalid.
    #[error("lossless payload: {0}")]
    Lossless(#[from] LosslessError),
    /// The quantized payload is invalid.
    #[error("quantized payload: {0}")]
    Quant(#[from] QuantError),
}

/// Encodes a block losslessly as a keyframe.
///
/// # Errors
/// [`SegmentError::Lossless`] if the data is not a whole number of elements.
pub fn encode_keyframe(
    dtype: DType,
    data: &[u8],
    opts: &LosslessOptions,
) -> Result<Vec<u8>, SegmentError> {
    encode_lossless(dtype, data, None, opts)
}

/// Encodes a block losslessly as an XOR delta against `base` (same dtype and length).
///
/// # Errors
/// [`SegmentError::Lossless`] for a ragged length or a base of another length.
pub fn encode_delta(
    dtype: DType,
    data: &[u8],
    base: &[u8],
    opts: &LosslessOptions,
) -> Result<Vec<u8>, SegmentError> {
    encode_lossless(dtype, data, Some(base), opts)
}

fn encode_lossless(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    opts: &LosslessOptions,
) -> Result<Vec<u8>, SegmentError> {
    let mut out = Vec::with_capacity(HEADER_LEN + data.len() / 2);
    let header = SegmentHeader {
        encoding: if base.is_some() {
            Encoding::Delta
        } else {
            Encoding::Keyframe
        },
        dtype,
        elements: (data.len() / dtype.size()) as u64,
        group_size: 0,
        payload_len: 0,
        base_hash: base.map_or(0, XxHash3_64::oneshot),
        checksum: 0,
    };
    header.write_unsealed(&mut out);
    lossless::encode(dtype, data, base, opts, &mut out)?;
    seal(&mut out);
    Ok(out)
}

/// Quantizes f32 `values` of a block whose dtype is `dtype` (a float type).
///
/// # Errors
/// [`SegmentError::NotFloat`] for an integer dtype, [`SegmentError::Quant`] for bad
/// parameters or non-finite values.
pub fn encode_quantized(
    dtype: DType,
    values: &[f32],
    params: &QuantParams,
) -> Result<Vec<u8>, SegmentError> {
    if !dtype.is_float() {
        return Err(SegmentError::NotFloat { dtype });
    }
    let mut out = Vec::with_capacity(HEADER_LEN + values.len());
    let mut header = SegmentHeader {
        encoding: Encoding::Quantized(params.bits),
        dtype,
        elements: values.len() as u64,
        group_size: params.group_size,
        payload_len: 0,
        base_hash: 0,
        checksum: 0,
    };
    header.write_unsealed(&mut out);
    let stats = quant::quantize(values, params, &mut out)?;
    if stats.two_level_groups > 0 {
        header.encoding = Encoding::TwoLevel3;
        out[header::ENCODING_OFS] = header.encoding.code();
    }
    seal(&mut out);
    Ok(out)
}

/// Fills in the payload length and the checksum of a segment being written.
pub(crate) fn seal(out: &mut [u8]) {
    let payload_len = (out.len() - HEADER_LEN) as u64;
    out[header::PAYLOAD_LEN_OFS..header::PAYLOAD_LEN_OFS + 8]
        .copy_from_slice(&payload_len.to_le_bytes());
    let sum = checksum(out);
    out[CHECKSUM_OFS..CHECKSUM_OFS + 8].copy_from_slice(&sum.to_le_bytes());
}

fn checksum(segment: &[u8]) -> u64 {
    let mut h = XxHash3_64::new();
    h.write(&segment[..CHECKSUM_OFS]);
    h.write(&segment[HEADER_LEN..]);
    h.finish()
}

/// A parsed segment: a validated header and its checksummed payload.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    header: SegmentHeader,
    payload: &'a [u8],
}

impl<'a> Segment<'a> {
    /// Parses and verifies a segment: header fields, payload length and checksum.
    ///
    /// Nothing is allocated and the payload is not decoded yet.
    ///
    /// # Errors
    /// Any header error of [`SegmentError`], [`SegmentError::PayloadLength`] or
    /// [`SegmentError::ChecksumMismatch`].
    pub fn parse(bytes: &'a [u8]) -> Result<Segment<'a>, SegmentError> {
        let seg = Segment::parse_without_checksum(bytes)?;
        let computed = checksum(bytes);
        if computed != seg.header.checksum {
            return Err(SegmentError::ChecksumMismatch {
                stored: seg.header.checksum,
                computed,
            });
        }
        Ok(seg)
    }

    /// Parses a segment whose bytes the caller has already proven unchanged by a hash at
    /// least as strong as the checksum (a content-addressed store checks a 128-bit hash of
    /// the whole segment on every read): the header fields and the payload length are
    /// checked, the checksum is not computed again.
    ///
    /// Decoding stays safe on any bytes; only the checksum's detection of changed bytes is
    /// left to the caller.
    ///
    /// # Errors
    /// Any header error of [`SegmentError`], or [`SegmentError::PayloadLength`].
    pub fn parse_without_checksum(bytes: &'a [u8]) -> Result<Segment<'a>, SegmentError> {
        let header = SegmentHeader::read(bytes)?;
        let payload = &bytes[HEADER_LEN..];
        if header.payload_len != payload.len() as u64 {
            return Err(SegmentError::PayloadLength {
                declared: header.payload_len,
                actual: payload.len(),
            });
        }
        Ok(Segment { header, payload })
    }

    /// The header.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// The payload bytes.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Decodes a lossless segment into `out` (`elements * dtype size` bytes). A delta needs
    /// the base block it was made against; a keyframe takes `None`.
    ///
    /// # Errors
    /// [`SegmentError::WrongKind`], [`SegmentError::BaseArgument`],
    /// [`SegmentError::BaseMismatch`], [`SegmentError::OutputLength`], or
    /// [`SegmentError::Lossless`] for a bad payload.
    pub fn decode_lossless_into(
        &self,
        base: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<(), SegmentError> {
        self.check_lossless(base.is_some())?;
        if let Some(b) = base {
            let actual = XxHash3_64::oneshot(b);
            if actual != self.header.base_hash {
                return Err(SegmentError::BaseMismatch {
                    expected: self.header.base_hash,
                    actual,
                });
            }
        }
        self.check_out_len(out.len())?;
        lossless::decode(self.header.dtype, self.payload, base, out)?;
        Ok(())
    }

    /// Decodes the first `out.len()` bytes of a lossless segment's block into `out`; a
    /// delta takes the same prefix of its base. The bytes are those
    /// [`Segment::decode_lossless_into`] writes there ([`lossless::decode_prefix`]).
    ///
    /// The base cannot be checked against the hash of the whole base the segment was made
    /// against: a reader that decodes prefixes follows the base named by checksummed
    /// metadata, and a whole decode ([`Segment::decode_lossless_into`], `verify`) checks it.
    ///
    /// # Errors
    /// [`SegmentError::WrongKind`], [`SegmentError::BaseArgument`],
    /// [`SegmentError::OutputLength`] for a prefix longer than the block, or
    /// [`SegmentError::Lossless`] for a bad payload.
    pub fn decode_lossless_prefix_into(
        &self,
        base: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<(), SegmentError> {
        self.check_lossless(base.is_some())?;
        let expected = self.header.decoded_len()?;
        if out.len() > expected {
            return Err(SegmentError::OutputLength {
                expected,
                actual: out.len(),
            });
        }
        lossless::decode_prefix(self.header.dtype, self.payload, base, expected, out)?;
        Ok(())
    }

    /// Decodes a lossless segment into a new vector, refusing blocks over `limit` bytes.
    ///
    /// # Errors
    /// [`SegmentError::OverLimit`], and those of [`Segment::decode_lossless_into`].
    pub fn decode_lossless(
        &self,
        base: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<u8>, SegmentError> {
        let len = self.within_limit(limit)?;
        let mut out = vec![0u8; len];
        self.decode_lossless_into(base, &mut out)?;
        Ok(out)
    }

    /// Dequantizes a quantized segment into `out` (`elements` values).
    ///
    /// A frame segment ([`Encoding::QuantizedFrames`]) is decoded one frame at a time
    /// with [`crate::frames::FrameSegment`] instead.
    ///
    /// # Errors
    /// [`SegmentError::WrongKind`], [`SegmentError::OutputLength`], or
    /// [`SegmentError::Quant`] for a bad payload.
    pub fn dequantize_into(&self, out: &mut [f32]) -> Result<(), SegmentError> {
        let enc = self.header.encoding;
        let bits = match enc {
            Encoding::Quantized(b) => b,
            Encoding::TwoLevel3 => QuantBits::B3,
            _ => {
                return Err(SegmentError::WrongKind {
                    encoding: enc,
                    wanted: "quantized (one block)",
                })
            }
        };
        self.check_out_len(out.len() * 4)?;
        let shape = QuantShape {
            bits,
            group_size: self.header.group_size,
            two_level: enc == Encoding::TwoLevel3,
        };
        quant::dequantize(self.payload, shape, out)?;
        Ok(())
    }

    /// Dequantizes into a new vector, refusing blocks over `limit` bytes of f32.
    ///
    /// # Errors
    /// [`SegmentError::OverLimit`], and those of [`Segment::dequantize_into`].
    pub fn dequantize(&self, limit: usize) -> Result<Vec<f32>, SegmentError> {
        let len = self.within_limit(limit)?;
        let mut out = vec![0f32; len / 4];
        self.dequantize_into(&mut out)?;
        Ok(out)
    }

    fn within_limit(&self, limit: usize) -> Result<usize, SegmentError> {
        let len = self.header.decoded_len()?;
        if len > limit {
            return Err(SegmentError::OverLimit { len, limit });
        }
        Ok(len)
    }

    /// Checks that the segment is lossless and that a base is given exactly for a delta.
    fn check_lossless(&self, has_base: bool) -> Result<(), SegmentError> {
        let enc = self.header.encoding;
        if !enc.is_lossless() {
            return Err(SegmentError::WrongKind {
                encoding: enc,
                wanted: "lossless",
            });
        }
        let needed = enc == Encoding::Delta;
        if needed != has_base {
            return Err(SegmentError::BaseArgument {
                encoding: enc,
                needed,
            });
        }
        Ok(())
    }

    fn check_out_len(&self, actual: usize) -> Result<(), SegmentError> {
        let expected = self.header.decoded_len()?;
        if actual != expected {
            return Err(SegmentError::OutputLength { expected, actual });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

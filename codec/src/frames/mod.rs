//! Frame streams: a tensor written every tick, stored as multi-frame quantized segments
//! whose frames share per-group scales (ADR 0013; drift rule of ADR-019 section 3.8).
//!
//! A [`FrameStreamEncoder`] takes one frame at a time. The first frame of a *scale epoch*
//! fixes, per group of `group_size` values, the group's `scale_max` (its `max_abs`) and the
//! scale `s = scale_max * (1 + d) / qmax`, with headroom for a drift tolerance `d`. A later
//! frame reuses those scales only if, in every group, its `max_abs` `m` satisfies
//!
//! - `m <= scale_max * (1 + d)` (larger values would be clipped), and
//! - `m >= scale_max / (1 + d)` (smaller values would waste precision),
//!
//! so every element of every frame is within `s / 2 = (1 + d) / (2 qmax) * scale_max` of its
//! value (plus half an f32 ulp of the product, as in [`crate::quant`]). Any other frame
//! closes the epoch and starts a new one, as does reaching `max_frames`. One epoch is one
//! segment ([`Encoding::QuantizedFrames`]); its frames sit at a fixed stride, so frame `i`
//! is found by arithmetic and decoded on its own ([`FrameSegment::decode_frame_into`]).
//!
//! NaN and infinities are refused ([`QuantError::NonFinite`]), as in every quantized tier
//! (ADR 0003); frames use standard groups only (no two-level 3-bit).
//!
//! # Payload layout
//!
//! After the 48-byte segment header (encoding 4, bits 8/7/5/3, `elements` = values per
//! frame `n`, group size `gs`), all little-endian, with `G = ceil(n / gs)` groups and
//! `S = ceil(n * bits / 8)` bytes per frame:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | frame count `F`, u32, at least 1 |
//! | 4 | 4 | drift tolerance `d`, f32, `0 <= d <=` [`MAX_DRIFT`] |
//! | 8 | `4 G` | `scale_max` per group, f32, finite, sign bit clear |
//! | `8 + 4 G + i S` | `S` | codes of frame `i`, biased, LSB-first ([`crate::bits`]); unused high bits of the last byte are 0 |
//!
//! Decoders derive each group's scale from `scale_max` and `d` with the encoder's own f32
//! arithmetic ([`FrameParams`] docs), so both always agree.
//!
//! ```
//! use strata_codec::frames::{FrameParams, FramePush, FrameSegment, FrameStreamEncoder};
//! use strata_codec::{quant::QuantBits, DType};
//!
//! let mut enc = FrameStreamEncoder::new(DType::F32, 4, FrameParams::new(QuantBits::B8))?;
//! assert!(matches!(enc.push(&[0.5, -1.0, 0.25, 0.0])?, FramePush::NewEpoch { sealed: None, .. }));
//! assert_eq!(enc.push(&[0.5, -1.05, 0.2, 0.0])?, FramePush::Reused { frame: 1 });
//! let seg = enc.finish().expect("two frames");
//!
//! let frames = FrameSegment::parse(&seg)?;
//! assert_eq!(frames.frame_count(), 2);
//! let second = frames.decode_frame(1, 1 << 20)?;
//! assert!((second[1] + 1.05).abs() <= frames.error_bound());
//! # Ok::<(), strata_codec::frames::FrameError>(())
//! ```

use thiserror::Error;

use crate::bits::{pack_bits, packed_len, unpack_bits};
use crate::cpu::Simd;
use crate::quant::{
    check_codes, dequantize_group, max_abs_bits_with, quantize_with, scale_for,
    unreachable_pack_error, QuantBits, QuantError, DEFAULT_GROUP_SIZE, INF_BITS, MAX_GROUP_SIZE,
};
use crate::segment::{self, Encoding, Segment, SegmentError, SegmentHeader, HEADER_LEN};
use crate::DType;

/// Default drift tolerance: 10 % (ADR-019's example; 8-bit bound 0.433 %).
pub const DEFAULT_DRIFT: f32 = 0.1;
/// Largest drift tolerance: 100 % (the error bound doubles).
pub const MAX_DRIFT: f32 = 1.0;
/// Default number of frames per segment.
pub const DEFAULT_MAX_FRAMES: u32 = 64;
/// Largest `max_frames` an encoder accepts.
pub const MAX_FRAMES: u32 = 1 << 16;

/// Bytes of the payload before the scales: frame count and drift.
const FIXED_LEN: usize = 8;

/// Errors of encoding and decoding frame streams.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A drift tolerance that is not in `0..=MAX_DRIFT`.
    #[error("drift tolerance {drift} must be in 0..={MAX_DRIFT}")]
    InvalidDrift {
        /// The tolerance asked for.
        drift: f32,
    },
    /// A frame limit of 0 or above [`MAX_FRAMES`].
    #[error("max_frames {max_frames} must be in 1..={MAX_FRAMES}")]
    InvalidMaxFrames {
        /// The limit asked for.
        max_frames: u32,
    },
    /// A frame of no values.
    #[error("a frame must hold at least one value")]
    EmptyFrame,
    /// Frames hold values of a float dtype.
    #[error("cannot quantize frames of dtype {dtype}")]
    NotFloat {
        /// The dtype.
        dtype: DType,
    },
    /// A frame with another number of values than the stream's.
    #[error("frame has {actual} values, the stream's frames have {expected}")]
    FrameLength {
        /// Values per frame.
        expected: usize,
        /// Values given.
        actual: usize,
    },
    /// Quantization refused the frame (NaN or infinity), or a decoded code is out of range.
    #[error("{0}")]
    Quant(#[from] QuantError),
    /// The segment's header, length or checksum is invalid.
    #[error("segment: {0}")]
    Segment(#[from] SegmentError),
    /// The segment is not a frame segment.
    #[error("segment is {encoding:?}, not quantized frames")]
    NotFrames {
        /// Its encoding.
        encoding: Encoding,
    },
    /// The payload does not have the length its header and frame count imply.
    #[error("frame payload is {actual} bytes, expected {expected}")]
    PayloadLength {
        /// Bytes implied by the header and the frame count.
        expected: u64,
        /// Bytes present.
        actual: usize,
    },
    /// A frame count of 0.
    #[error("frame segment declares 0 frames")]
    NoFrames,
    /// The stored drift tolerance is not a valid one.
    #[error("stored drift tolerance has bits {bits:#010x}, not a value in 0..={MAX_DRIFT}")]
    StoredDrift {
        /// Its bit pattern.
        bits: u32,
    },
    /// A stored `scale_max` is negative, NaN or infinite.
    #[error("scale_max of group {group} has bits {bits:#010x}, not a finite non-negative value")]
    InvalidScaleMax {
        /// The group.
        group: usize,
        /// Its bit pattern.
        bits: u32,
    },
    /// Unused bits at the end of a frame are not zero.
    #[error("frame {frame}: unused bits of its last byte are {bits:#04x}, must be 0")]
    PaddingBits {
        /// The frame.
        frame: u32,
        /// The unused bits.
        bits: u8,
    },
    /// A frame index at or past the frame count.
    #[error("frame {index} does not exist: the segment has {count}")]
    FrameIndex {
        /// The index asked for.
        index: u32,
        /// Frames present.
        count: u32,
    },
    /// The output buffer does not hold one frame.
    #[error("output buffer holds {actual} values, a frame has {expected}")]
    OutputLength {
        /// Values per frame.
        expected: usize,
        /// Slots given.
        actual: usize,
    },
    /// A frame would decode to more bytes than the caller allows.
    #[error("frame decodes to {len} bytes, over the limit of {limit}")]
    OverLimit {
        /// Bytes of one frame as f32.
        len: usize,
        /// The caller's limit.
        limit: usize,
    },
}

/// How a frame stream is quantized.
///
/// Scales are derived from `scale_max` (the group's `max_abs` in the epoch's first frame)
/// in f32 arithmetic: `h = scale_max * (1 + d)` computed in f64 and rounded up to f32
/// (`f32::MAX` if it overflows), then `s = h / qmax` adjusted as [`crate::quant`] adjusts
/// its scales, so that `qmax * s >= h`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameParams {
    /// Bit width.
    pub bits: QuantBits,
    /// Values per group (1..=[`MAX_GROUP_SIZE`]).
    pub group_size: u32,
    /// Drift tolerance `d` (0..=[`MAX_DRIFT`]).
    pub drift: f32,
    /// Frames per segment (1..=[`MAX_FRAMES`]); a full segment starts a new epoch.
    pub max_frames: u32,
}

impl FrameParams {
    /// Defaults for a width: groups of 64, drift 10 %, 64 frames per segment.
    pub fn new(bits: QuantBits) -> Self {
        FrameParams {
            bits,
            group_size: DEFAULT_GROUP_SIZE,
            drift: DEFAULT_DRIFT,
            max_frames: DEFAULT_MAX_FRAMES,
        }
    }

    /// The same parameters with another group size.
    pub fn with_group_size(self, group_size: u32) -> Self {
        FrameParams { group_size, ..self }
    }

    /// The same parameters with another drift tolerance.
    pub fn with_drift(self, drift: f32) -> Self {
        FrameParams { drift, ..self }
    }

    /// The same parameters with another frame limit.
    pub fn with_max_frames(self, max_frames: u32) -> Self {
        FrameParams { max_frames, ..self }
    }

    /// Worst-case error per element relative to its group's `scale_max`:
    /// `(1 + d) / (2 qmax)` (ADR-019 section 3.8; 8 bits with 10 % drift: 0.433 %).
    pub fn relative_error_bound(&self) -> f64 {
        (1.0 + f64::from(self.drift)) * self.bits.relative_error_bound()
    }

    fn validate(&self) -> Result<(), FrameError> {
        if !(1..=MAX_GROUP_SIZE).contains(&self.group_size) {
            return Err(QuantError::InvalidGroupSize {
                group_size: self.group_size,
            }
            .into());
        }
        if !drift_ok(self.drift) {
            return Err(FrameError::InvalidDrift { drift: self.drift });
        }
        if !(1..=MAX_FRAMES).contains(&self.max_frames) {
            return Err(FrameError::InvalidMaxFrames {
                max_frames: self.max_frames,
            });
        }
        Ok(())
    }
}

/// Why a frame started a new scale epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EpochReason {
    /// The stream's first frame.
    First,
    /// The open segment already held `max_frames` frames.
    Full,
    /// A group's `max_abs` grew above `scale_max * (1 + d)`: it would be clipped.
    Grew {
        /// The first such group.
        group: usize,
        /// The frame's `max_abs` there.
        max_abs: f32,
        /// The epoch's `scale_max` there.
        scale_max: f32,
    },
    /// A group's `max_abs` fell below `scale_max / (1 + d)`: the scale would waste
    /// precision.
    Shrank {
        /// The first such group.
        group: usize,
        /// The frame's `max_abs` there.
        max_abs: f32,
        /// The epoch's `scale_max` there.
        scale_max: f32,
    },
}

/// What [`FrameStreamEncoder::push`] did with a frame.
#[derive(Debug, Clone, PartialEq)]
pub enum FramePush {
    /// The frame reused the open epoch's scales; it is frame `frame` of that segment.
    Reused {
        /// Its index in the segment.
        frame: u32,
    },
    /// The frame opened a new epoch (it is frame 0 of a new segment).
    NewEpoch {
        /// Why.
        reason: EpochReason,
        /// The finished segment of the epoch it closed (`None` for the first frame).
        sealed: Option<Vec<u8>>,
    },
}

/// Encodes a stream of frames of one tensor into frame segments, one per scale epoch.
#[derive(Debug, Clone)]
pub struct FrameStreamEncoder {
    dtype: DType,
    frame_len: usize,
    params: FrameParams,
    epoch: Option<Epoch>,
    /// Reused per frame: group maxima and codes.
    maxima: Vec<f32>,
    codes: Vec<i8>,
}

/// The open epoch: its scales and its segment so far (header unsealed).
#[derive(Debug, Clone)]
struct Epoch {
    scale_max: Vec<f32>,
    scales: Vec<f32>,
    bytes: Vec<u8>,
    frames: u32,
}

impl FrameStreamEncoder {
    /// A stream of frames of `frame_len` values of a tensor of float `dtype`.
    ///
    /// # Errors
    /// [`FrameError::NotFloat`], [`FrameError::EmptyFrame`], or invalid parameters
    /// ([`QuantError::InvalidGroupSize`], [`FrameError::InvalidDrift`],
    /// [`FrameError::InvalidMaxFrames`]).
    pub fn new(
        dtype: DType,
        frame_len: usize,
        params: FrameParams,
    ) -> Result<FrameStreamEncoder, FrameError> {
        if !dtype.is_float() {
            return Err(FrameError::NotFloat { dtype });
        }
        if frame_len == 0 {
            return Err(FrameError::EmptyFrame);
        }
        params.validate()?;
        Ok(FrameStreamEncoder {
            dtype,
            frame_len,
            params,
            epoch: None,
            maxima: Vec::with_capacity(frame_len.div_ceil(params.group_size as usize)),
            codes: vec![0; frame_len],
        })
    }

    /// Continues the epoch of a finished frame segment (for example after a restart): the
    /// next frame is appended to it if it fits its scales and it has fewer than
    /// `max_frames` frames. Width, group size and drift come from the segment.
    ///
    /// # Errors
    /// Those of [`FrameSegment::parse`] and [`FrameError::InvalidMaxFrames`].
    pub fn resume(segment: &[u8], max_frames: u32) -> Result<FrameStreamEncoder, FrameError> {
        let seg = FrameSegment::parse(segment)?;
        let params = FrameParams {
            bits: seg.bits,
            group_size: seg.header.group_size,
            drift: seg.drift,
            max_frames,
        };
        let mut enc = FrameStreamEncoder::new(seg.header.dtype, seg.frame_len, params)?;
        enc.epoch = Some(Epoch {
            scale_max: seg.scale_max.clone(),
            scales: seg.scales.clone(),
            bytes: segment.to_vec(),
            frames: seg.frames,
        });
        Ok(enc)
    }

    /// The stream's parameters.
    pub fn params(&self) -> &FrameParams {
        &self.params
    }

    /// Values per frame.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Frames in the open epoch (0 before the first frame).
    pub fn frames(&self) -> u32 {
        self.epoch.as_ref().map_or(0, |e| e.frames)
    }

    /// Quantizes one frame: with the open epoch's scales if it fits them, else as the
    /// first frame of a new epoch, handing back the closed epoch's segment.
    ///
    /// # Errors
    /// [`FrameError::FrameLength`], or [`QuantError::NonFinite`] for NaN or an infinity
    /// (index within the frame). The stream is unchanged after an error.
    pub fn push(&mut self, values: &[f32]) -> Result<FramePush, FrameError> {
        if values.len() != self.frame_len {
            return Err(FrameError::FrameLength {
                expected: self.frame_len,
                actual: values.len(),
            });
        }
        let gs = self.params.group_size as usize;
        self.maxima.clear();
        let simd = Simd::detect();
        for (g, group) in values.chunks(gs).enumerate() {
            let m = max_abs_bits_with(simd, group);
            if m >= INF_BITS {
                let pos = group.iter().position(|x| !x.is_finite()).unwrap_or(0);
                return Err(QuantError::NonFinite {
                    index: g * gs + pos,
                    bits: group[pos].to_bits(),
                }
                .into());
            }
            self.maxima.push(f32::from_bits(m));
        }
        let decision = match self.epoch.as_mut() {
            None => Err(EpochReason::First),
            Some(e) if e.frames >= self.params.max_frames => Err(EpochReason::Full),
            Some(e) => match drift_violation(&self.maxima, &e.scale_max, self.params.drift) {
                Some(reason) => Err(reason),
                None => Ok(e),
            },
        };
        match decision {
            Ok(epoch) => {
                let qmax = self.params.bits.qmax();
                for ((group, codes), &s) in values
                    .chunks(gs)
                    .zip(self.codes.chunks_mut(gs))
                    .zip(&epoch.scales)
                {
                    quantize_with(group, s, qmax, codes);
                }
                append_codes(&mut epoch.bytes, &self.codes, self.params.bits);
                let frame = epoch.frames;
                epoch.frames += 1;
                epoch.bytes[HEADER_LEN..HEADER_LEN + 4]
                    .copy_from_slice(&epoch.frames.to_le_bytes());
                Ok(FramePush::Reused { frame })
            }
            Err(reason) => {
                let sealed = self.epoch.take().map(|e| seal(e.bytes));
                self.open_epoch(values);
                Ok(FramePush::NewEpoch { reason, sealed })
            }
        }
    }

    /// The open epoch's segment as it stands (all frames so far), or `None` before the
    /// first frame. The encoder keeps going; a later snapshot or [`finish`] holds more
    /// frames with the same scales.
    ///
    /// [`finish`]: FrameStreamEncoder::finish
    pub fn snapshot(&self) -> Option<Vec<u8>> {
        self.epoch.as_ref().map(|e| seal(e.bytes.clone()))
    }

    /// The open epoch's segment, or `None` if no frame was pushed since the last epoch
    /// was handed back.
    pub fn finish(self) -> Option<Vec<u8>> {
        self.epoch.map(|e| seal(e.bytes))
    }

    /// Starts an epoch whose scales come from `values` (its maxima are in `self.maxima`).
    fn open_epoch(&mut self, values: &[f32]) {
        let p = self.params;
        let qmax = p.bits.qmax();
        let gs = p.group_size as usize;
        let scale_max = self.maxima.clone();
        let scales: Vec<f32> = scale_max
            .iter()
            .map(|&m| epoch_scale(m, p.drift, qmax))
            .collect();
        for ((group, codes), &s) in values
            .chunks(gs)
            .zip(self.codes.chunks_mut(gs))
            .zip(&scales)
        {
            quantize_with(group, s, qmax, codes);
        }
        let stride = packed_len(self.frame_len, p.bits.bits());
        let mut bytes = Vec::with_capacity(
            HEADER_LEN + FIXED_LEN + 4 * scales.len() + stride * p.max_frames.min(4) as usize,
        );
        SegmentHeader {
            encoding: Encoding::QuantizedFrames(p.bits),
            dtype: self.dtype,
            elements: self.frame_len as u64,
            group_size: p.group_size,
            payload_len: 0,
            base_hash: 0,
            checksum: 0,
        }
        .write_unsealed(&mut bytes);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&p.drift.to_le_bytes());
        for m in &scale_max {
            bytes.extend_from_slice(&m.to_le_bytes());
        }
        append_codes(&mut bytes, &self.codes, p.bits);
        self.epoch = Some(Epoch {
            scale_max,
            scales,
            bytes,
            frames: 1,
        });
    }
}

/// The first group whose maximum left the band `scale_max / (1 + d) ..= scale_max * (1 + d)`.
fn drift_violation(maxima: &[f32], scale_max: &[f32], drift: f32) -> Option<EpochReason> {
    let f = 1.0 + f64::from(drift);
    maxima
        .iter()
        .zip(scale_max)
        .enumerate()
        .find_map(|(group, (&m, &sm))| {
            let (m64, sm64) = (f64::from(m), f64::from(sm));
            if m64 > sm64 * f {
                Some(EpochReason::Grew {
                    group,
                    max_abs: m,
                    scale_max: sm,
                })
            } else if m64 * f < sm64 {
                Some(EpochReason::Shrank {
                    group,
                    max_abs: m,
                    scale_max: sm,
                })
            } else {
                None
            }
        })
}

/// The scale of a group with maximum `m` at drift `d`: `scale_for(h)` with
/// `h = m * (1 + d)` rounded up to f32 (`f32::MAX` when it overflows).
fn epoch_scale(m: f32, drift: f32, qmax: i8) -> f32 {
    let h = f64::from(m) * (1.0 + f64::from(drift));
    let mut hf = h as f32;
    if hf.is_infinite() {
        hf = f32::MAX;
    } else if f64::from(hf) < h {
        hf = f32::from_bits(hf.to_bits() + 1);
        if hf.is_infinite() {
            hf = f32::MAX;
        }
    }
    scale_for(hf, qmax)
}

fn drift_ok(d: f32) -> bool {
    d.is_finite() && d.is_sign_positive() && d <= MAX_DRIFT
}

/// Packs `codes` (clamped by `quantize_with`) onto the end of `bytes`.
fn append_codes(bytes: &mut Vec<u8>, codes: &[i8], bits: QuantBits) {
    let start = bytes.len();
    bytes.resize(start + packed_len(codes.len(), bits.bits()), 0);
    if let Err(e) = pack_bits(codes, bits.bits(), &mut bytes[start..]) {
        bytes.truncate(start);
        unreachable_pack_error(e);
    }
}

fn seal(mut bytes: Vec<u8>) -> Vec<u8> {
    segment::seal(&mut bytes);
    bytes
}

/// A parsed frame segment: header, frame count, drift and scales checked.
#[derive(Debug, Clone)]
pub struct FrameSegment<'a> {
    header: SegmentHeader,
    bits: QuantBits,
    frame_len: usize,
    frames: u32,
    drift: f32,
    scale_max: Vec<f32>,
    scales: Vec<f32>,
    /// All frames' codes, `frames * stride` bytes.
    codes: &'a [u8],
    stride: usize,
}

impl<'a> FrameSegment<'a> {
    /// Parses a frame segment: [`Segment::parse`] (header, length, checksum), then the
    /// frame count, drift, every `scale_max`, and the payload length, which must be exactly
    /// `8 + 4 G + F * S`. Allocates the `G` scales (after the length check) and nothing
    /// per frame.
    ///
    /// # Errors
    /// [`FrameError::Segment`], [`FrameError::NotFrames`], [`FrameError::EmptyFrame`],
    /// [`FrameError::PayloadLength`], [`FrameError::NoFrames`], [`FrameError::StoredDrift`],
    /// [`FrameError::InvalidScaleMax`].
    pub fn parse(bytes: &'a [u8]) -> Result<FrameSegment<'a>, FrameError> {
        FrameSegment::from_segment(&Segment::parse(bytes)?)
    }

    /// The same, from an already parsed segment.
    ///
    /// # Errors
    /// As [`FrameSegment::parse`], without the header errors.
    pub fn from_segment(seg: &Segment<'a>) -> Result<FrameSegment<'a>, FrameError> {
        let header = *seg.header();
        let Encoding::QuantizedFrames(bits) = header.encoding else {
            return Err(FrameError::NotFrames {
                encoding: header.encoding,
            });
        };
        // `Segment::parse` checked that `elements * 4` fits in `usize`.
        let frame_len = usize::try_from(header.elements).map_err(|_| SegmentError::TooLarge {
            elements: header.elements,
        })?;
        if frame_len == 0 {
            return Err(FrameError::EmptyFrame);
        }
        let payload = seg.payload();
        let groups = frame_len.div_ceil(header.group_size as usize);
        let stride = packed_len(frame_len, bits.bits());
        let fixed = FIXED_LEN as u64 + 4 * groups as u64;
        let short = |expected: u64| FrameError::PayloadLength {
            expected,
            actual: payload.len(),
        };
        if (payload.len() as u64) < fixed {
            return Err(short(fixed));
        }
        let frames = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
        if frames == 0 {
            return Err(FrameError::NoFrames);
        }
        let expected = u128::from(fixed) + u128::from(frames) * stride as u128;
        if expected != payload.len() as u128 {
            return Err(short(u64::try_from(expected).unwrap_or(u64::MAX)));
        }
        let drift = read_f32(&payload[4..8]);
        if !drift_ok(drift) {
            return Err(FrameError::StoredDrift {
                bits: drift.to_bits(),
            });
        }
        let qmax = bits.qmax();
        let mut scale_max = Vec::with_capacity(groups);
        let mut scales = Vec::with_capacity(groups);
        for (group, b) in payload[FIXED_LEN..FIXED_LEN + 4 * groups]
            .chunks_exact(4)
            .enumerate()
        {
            let m = read_f32(b);
            if !m.is_finite() || m.is_sign_negative() {
                return Err(FrameError::InvalidScaleMax {
                    group,
                    bits: m.to_bits(),
                });
            }
            scale_max.push(m);
            scales.push(epoch_scale(m, drift, qmax));
        }
        Ok(FrameSegment {
            header,
            bits,
            frame_len,
            frames,
            drift,
            scale_max,
            scales,
            codes: &payload[FIXED_LEN + 4 * groups..],
            stride,
        })
    }

    /// The segment header.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// Bit width.
    pub fn bits(&self) -> QuantBits {
        self.bits
    }

    /// Frames in the segment.
    pub fn frame_count(&self) -> u32 {
        self.frames
    }

    /// Values per frame.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// The drift tolerance the epoch was written with.
    pub fn drift(&self) -> f32 {
        self.drift
    }

    /// Each group's `scale_max` (its `max_abs` in the epoch's first frame).
    pub fn scale_max(&self) -> &[f32] {
        &self.scale_max
    }

    /// Each group's scale.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// Largest error of any element of group `group` in any frame of the segment: half its
    /// scale, at most `(1 + d) / (2 qmax) * scale_max` (frames share scales, so every
    /// frame has the same bound). `None` past the last group.
    pub fn group_error_bound(&self, group: usize) -> Option<f32> {
        self.scales.get(group).map(|s| s / 2.0)
    }

    /// Largest error of any element of any frame: the largest [`group_error_bound`].
    ///
    /// [`group_error_bound`]: FrameSegment::group_error_bound
    pub fn error_bound(&self) -> f32 {
        self.scales.iter().fold(0.0f32, |m, s| m.max(s / 2.0))
    }

    /// Decodes frame `index` alone into `out` (one frame of values); reads only that
    /// frame's codes.
    ///
    /// # Errors
    /// [`FrameError::FrameIndex`], [`FrameError::OutputLength`],
    /// [`FrameError::PaddingBits`], or [`QuantError::CodeOutOfRange`].
    pub fn decode_frame_into(&self, index: u32, out: &mut [f32]) -> Result<(), FrameError> {
        if index >= self.frames {
            return Err(FrameError::FrameIndex {
                index,
                count: self.frames,
            });
        }
        if out.len() != self.frame_len {
            return Err(FrameError::OutputLength {
                expected: self.frame_len,
                actual: out.len(),
            });
        }
        let start = index as usize * self.stride;
        let bytes = &self.codes[start..start + self.stride];
        let bits = self.bits.bits();
        // `(n * bits) % 8`, without the product (which could overflow on 32-bit targets).
        let used = ((self.frame_len % 8) * usize::from(bits)) % 8;
        if used != 0 {
            let unused = bytes[self.stride - 1] >> used;
            if unused != 0 {
                return Err(FrameError::PaddingBits {
                    frame: index,
                    bits: unused,
                });
            }
        }
        let mut codes = vec![0i8; self.frame_len];
        unpack_bits(bytes, bits, &mut codes).map_err(|_| FrameError::PayloadLength {
            expected: self.stride as u64,
            actual: bytes.len(),
        })?;
        check_codes(&codes, self.bits.qmax())?;
        let gs = self.header.group_size as usize;
        for ((dst, src), &s) in out.chunks_mut(gs).zip(codes.chunks(gs)).zip(&self.scales) {
            dequantize_group(src, s, dst);
        }
        Ok(())
    }

    /// Decodes frame `index` into a new vector, refusing frames over `limit` bytes of f32.
    ///
    /// # Errors
    /// [`FrameError::OverLimit`], and those of [`FrameSegment::decode_frame_into`].
    pub fn decode_frame(&self, index: u32, limit: usize) -> Result<Vec<f32>, FrameError> {
        let len = self.frame_len * 4;
        if len > limit {
            return Err(FrameError::OverLimit { len, limit });
        }
        let mut out = vec![0f32; self.frame_len];
        self.decode_frame_into(index, &mut out)?;
        Ok(out)
    }

    /// Decodes every frame, frame after frame, into a new vector of
    /// `frame_count * frame_len` values; refuses more than `limit` bytes of f32.
    ///
    /// # Errors
    /// [`FrameError::OverLimit`], and those of [`FrameSegment::decode_frame_into`].
    pub fn decode_all(&self, limit: usize) -> Result<Vec<f32>, FrameError> {
        let len = (self.frames as usize)
            .checked_mul(self.frame_len * 4)
            .filter(|&l| l <= limit)
            .ok_or(FrameError::OverLimit {
                len: (self.frames as usize).saturating_mul(self.frame_len * 4),
                limit,
            })?;
        let mut out = vec![0f32; len / 4];
        for (i, chunk) in (0..self.frames).zip(out.chunks_mut(self.frame_len)) {
            self.decode_frame_into(i, chunk)?;
        }
        Ok(out)
    }
}

fn read_f32(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests;

//! Symmetric per-group quantization for the 8, 7, 5 and 3-bit tiers (ADR-019).
//!
//! Each group of `group_size` values gets `scale = max_abs / qmax` (f32) and codes
//! `q = round(x / scale)` in `-qmax..=qmax`; `x̂ = q * scale`, so every element is within
//! `scale / 2` of its original (see [`QuantBits::relative_error_bound`]), plus half an f32
//! ulp of `x̂` from rounding the product `q * scale` (measured worst group on MiniLM at 8
//! bits: 0.003937068 against 1/254 = 0.003937008).
//!
//! # Payload layout
//!
//! All multi-byte values little-endian; `G` groups, `n` values, no padding anywhere.
//!
//! | bytes | field |
//! |---|---|
//! | `4 * G` | primary scale per group, f32. In a two-level group the sign bit is set. |
//! | `4 * T` | secondary scale of each of the `T` two-level groups, in group order (3-bit only) |
//! | `ceil(F / 8)` | one flag bit per value of the two-level groups (`F` values), LSB first; 1 = secondary scale |
//! | `ceil(n * bits / 8)` | codes of all groups as one [`crate::bits`] stream |
//!
//! A 64-value group therefore costs exactly ADR-019's 68, 60, 44 and 28 bytes, and 40 bytes
//! when two-level; the flag for "two-level" costs nothing, as scales are never negative.
//!
//! # Special values
//!
//! - NaN and ±infinity are refused with [`QuantError::NonFinite`]: they have no quantized
//!   form, and turning them into finite numbers would be silent wrong data. The store keeps
//!   such blocks lossless.
//! - An all-zero group has scale 0 and decodes to +0.0 (a `-0.0` input comes back as `+0.0`,
//!   which is within any error bound).
//! - Tiny and huge magnitudes (1e-30, 1e30, subnormals, `f32::MAX`) keep the same relative
//!   bound: codes are computed by dividing by the stored scale (never by multiplying with
//!   `1 / scale`, which overflows for subnormal scales), and a scale whose rounding would
//!   put `max_abs` beyond `qmax * scale` is nudged up one ulp.

mod max_abs;
mod params;

pub use max_abs::max_abs;
pub use params::{QuantBits, QuantParams, TwoLevel, DEFAULT_GROUP_SIZE, MAX_GROUP_SIZE};

use crate::bits::{pack_bits, packed_len, unpack_bits};
use crate::cpu::Simd;
use max_abs::max_abs_bits_portable;
pub(crate) use max_abs::{max_abs_bits_with, INF_BITS};
use thiserror::Error;

/// Errors of quantization and of decoding a quantized payload.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum QuantError {
    /// The group size is 0 or above [`MAX_GROUP_SIZE`].
    #[error("invalid group size {group_size}: must be 1..={max}", max = MAX_GROUP_SIZE)]
    InvalidGroupSize {
        /// The group size asked for or found.
        group_size: u32,
    },
    /// Two-level settings out of range (threshold must exceed 1, fraction in (0, 0.5)).
    #[error(
        "invalid two-level settings: threshold {threshold}, outlier fraction {outlier_fraction}"
    )]
    InvalidTwoLevel {
        /// The threshold asked for.
        threshold: f32,
        /// The outlier fraction asked for.
        outlier_fraction: f32,
    },
    /// The input holds NaN or an infinity, which no quantized tier can represent.
    #[error("value at index {index} is not finite (bits {bits:#010x}); quantized tiers hold finite values only")]
    NonFinite {
        /// Index of the first non-finite value.
        index: usize,
        /// Its bit pattern.
        bits: u32,
    },
    /// The payload does not have the length its scales and element count imply.
    #[error("quantized payload is {actual} bytes, expected {expected}")]
    PayloadLength {
        /// Length implied by the header and the scales.
        expected: usize,
        /// Length found.
        actual: usize,
    },
    /// A stored scale is NaN, infinite, or marks a two-level group where none may be.
    #[error("invalid scale {value} (bits {bits:#010x}) for group {group}")]
    InvalidScale {
        /// The group.
        group: usize,
        /// The scale as read.
        value: f32,
        /// Its bit pattern.
        bits: u32,
    },
    /// A decoded code is outside `-qmax..=qmax`.
    #[error("code {code} at index {index} is outside -{qmax}..={qmax}")]
    CodeOutOfRange {
        /// Element index.
        index: usize,
        /// The code.
        code: i8,
        /// The width's qmax.
        qmax: i8,
    },
}

/// What a quantized payload holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantStats {
    /// Number of groups.
    pub groups: usize,
    /// Number of two-level groups (3-bit only).
    pub two_level_groups: usize,
    /// Bytes of the payload.
    pub payload_bytes: usize,
}

/// How a payload was quantized: what a decoder needs besides the bytes and the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantShape {
    /// Bit width.
    pub bits: QuantBits,
    /// Values per group.
    pub group_size: u32,
    /// Whether groups may be two-level (3-bit two-level encoding).
    pub two_level: bool,
}

/// Bytes one group of `len` values costs, as ADR-019 counts it (for a group on its own:
/// a group whose `len * bits` is not a multiple of 8 shares its last byte with the next).
///
/// ```
/// use strata_codec::quant::{group_storage_size, QuantBits};
/// assert_eq!(group_storage_size(QuantBits::B8, 64, false), 68);
/// assert_eq!(group_storage_size(QuantBits::B3, 64, true), 40);
/// ```
pub fn group_storage_size(bits: QuantBits, len: usize, two_level: bool) -> usize {
    let codes = packed_len(len, bits.bits());
    if two_level {
        8 + len.div_ceil(8) + codes
    } else {
        4 + codes
    }
}

/// Exact payload bytes for `n` values in groups of `group_size`, `two_level_groups` of
/// which (holding `two_level_values` values) are two-level.
pub fn payload_size(
    bits: QuantBits,
    n: usize,
    group_size: u32,
    two_level_groups: usize,
    two_level_values: usize,
) -> usize {
    let groups = n.div_ceil(group_size.max(1) as usize);
    4 * groups + 4 * two_level_groups + two_level_values.div_ceil(8) + packed_len(n, bits.bits())
}

/// Quantizes `values` and appends the payload to `out`.
///
/// # Errors
/// [`QuantError::InvalidGroupSize`] or [`QuantError::InvalidTwoLevel`] for bad parameters,
/// [`QuantError::NonFinite`] if a value is NaN or infinite (nothing is appended then).
pub fn quantize(
    values: &[f32],
    params: &QuantParams,
    out: &mut Vec<u8>,
) -> Result<QuantStats, QuantError> {
    params.validate()?;
    let gs = params.group_size as usize;
    let groups = values.len().div_ceil(gs);
    let mut scales = Vec::with_capacity(groups);
    let mut codes = vec![0i8; values.len()];
    let mut two = TwoLevelParts::default();
    quantize_kernel(values, params, &mut scales, &mut codes, &mut two)?;

    let start = out.len();
    let size = payload_size(
        params.bits,
        values.len(),
        params.group_size,
        two.secondary.len(),
        two.flag_count,
    );
    out.reserve(size);
    for s in &scales {
        out.extend_from_slice(&s.to_le_bytes());
    }
    for s in &two.secondary {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.extend_from_slice(&two.flags);
    let code_start = out.len();
    out.resize(code_start + packed_len(codes.len(), params.bits.bits()), 0);
    // Codes come from the kernel, clamped to -qmax..=qmax, and the buffer was sized above.
    if let Err(e) = pack_bits(&codes, params.bits.bits(), &mut out[code_start..]) {
        out.truncate(start);
        unreachable_pack_error(e);
    }
    debug_assert_eq!(out.len() - start, size);
    Ok(QuantStats {
        groups,
        two_level_groups: two.secondary.len(),
        payload_bytes: size,
    })
}

#[cold]
pub(crate) fn unreachable_pack_error(e: crate::bits::BitsError) {
    // The kernel clamps every code and the buffer is sized with `packed_len`, so packing
    // cannot fail; reaching this is a bug in this module.
    debug_assert!(false, "pack_bits failed on kernel output: {e}");
}

/// Two-level side data collected while quantizing.
#[derive(Default)]
struct TwoLevelParts {
    secondary: Vec<f32>,
    flags: Vec<u8>,
    flag_count: usize,
    /// Reused buffer for selecting a group's primary maximum.
    scratch: Vec<u32>,
}

impl TwoLevelParts {
    fn push_flag(&mut self, flag: bool) {
        if self.flag_count.is_multiple_of(8) {
            self.flags.push(0);
        }
        if flag {
            if let Some(last) = self.flags.last_mut() {
                *last |= 1 << (self.flag_count % 8);
            }
        }
        self.flag_count += 1;
    }
}

/// The quantizer loop, with the kernel detected once per process ([`Simd::detect`]).
fn quantize_kernel(
    values: &[f32],
    params: &QuantParams,
    scales: &mut Vec<f32>,
    codes: &mut [i8],
    two: &mut TwoLevelParts,
) -> Result<(), QuantError> {
    quantize_kernel_with(Simd::detect(), values, params, scales, codes, two)
}

/// [`quantize_kernel`] with the given kernel (the tests compare them).
fn quantize_kernel_with(
    simd: Simd,
    values: &[f32],
    params: &QuantParams,
    scales: &mut Vec<f32>,
    codes: &mut [i8],
    two: &mut TwoLevelParts,
) -> Result<(), QuantError> {
    simd.run(
        #[inline(always)]
        || quantize_kernel_portable(values, params, scales, codes, two),
    )
}

#[inline(always)]
fn quantize_kernel_portable(
    values: &[f32],
    params: &QuantParams,
    scales: &mut Vec<f32>,
    codes: &mut [i8],
    two: &mut TwoLevelParts,
) -> Result<(), QuantError> {
    let gs = params.group_size as usize;
    let qmax = params.bits.qmax();
    let two_level = params.active_two_level();
    for (g, (group, gcodes)) in values.chunks(gs).zip(codes.chunks_mut(gs)).enumerate() {
        let mbits = max_abs_bits_portable(group);
        if mbits >= INF_BITS {
            let pos = group.iter().position(|x| !x.is_finite()).unwrap_or(0);
            return Err(QuantError::NonFinite {
                index: g * gs + pos,
                bits: group[pos].to_bits(),
            });
        }
        let m = f32::from_bits(mbits);
        let primary = two_level.and_then(|t| primary_max(group, m, t, &mut two.scratch));
        match primary {
            None => {
                let scale = scale_for(m, qmax);
                quantize_with(group, scale, qmax, gcodes);
                scales.push(scale);
            }
            Some(pmax) => {
                let pscale = scale_for(pmax, qmax);
                let sscale = scale_for(m, qmax);
                for (c, &x) in gcodes.iter_mut().zip(group) {
                    let outlier = x.abs() > pmax;
                    two.push_flag(outlier);
                    *c = code_of(x, if outlier { sscale } else { pscale }, qmax);
                }
                scales.push(-pscale);
                two.secondary.push(sscale);
            }
        }
    }
    Ok(())
}

/// `max_abs / qmax`, adjusted by one ulp where rounding would break an invariant:
/// up when `qmax * scale < m` (only for subnormal scales), so `|x / scale| <= qmax` for
/// every `|x| <= m`; down when `qmax * scale` would exceed `f32::MAX` and dequantize to
/// infinity (only next to `f32::MAX`, where the clamped error stays under one ulp of `m`).
pub(crate) fn scale_for(m: f32, qmax: i8) -> f32 {
    let q = f64::from(qmax);
    let max = f64::from(f32::MAX);
    let s = m / f32::from(qmax);
    let prod = f64::from(s) * q;
    if prod < f64::from(m) {
        let up = f32::from_bits(s.to_bits() + 1);
        if f64::from(up) * q <= max {
            return up;
        }
    } else if prod > max {
        return f32::from_bits(s.to_bits() - 1);
    }
    s
}

/// The code of `x` at `scale`: `round_half_even(x / scale)` clamped to `-qmax..=qmax`.
///
/// Clamping first keeps `|y| <= 127`, where adding 1.5 * 2^23 both rounds to nearest even
/// and leaves `2^22 + code` in the float's mantissa; 2^22 is a multiple of 256, so the
/// low byte of the bits is the code in two's complement. An integer operation, so the
/// loop vectorizes (a float-to-`i8` cast does not).
#[inline(always)]
fn code_of(x: f32, scale: f32, qmax: i8) -> i8 {
    if scale == 0.0 {
        return 0;
    }
    to_code(x / scale, f32::from(qmax))
}

#[inline(always)]
fn to_code(y: f32, q: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0;
    (y.clamp(-q, q) + MAGIC).to_bits() as u8 as i8
}

#[inline(always)]
pub(crate) fn quantize_with(group: &[f32], scale: f32, qmax: i8, codes: &mut [i8]) {
    if scale == 0.0 {
        codes.fill(0);
        return;
    }
    let q = f32::from(qmax);
    for (c, &x) in codes.iter_mut().zip(group) {
        *c = to_code(x / scale, q);
    }
}

/// Whether a group is heavy-tailed, and if so its primary range.
///
/// The test `max_abs / median_abs > threshold` is evaluated as "more than half of the
/// magnitudes lie below `max_abs / threshold`" (the upper median), one counting pass with no
/// sort. Only heavy-tailed groups pay for the selection of the primary maximum: the
/// `ceil(len * outlier_fraction)`-th largest magnitude (0-based), as in ADR-019.
fn primary_max(group: &[f32], m: f32, t: TwoLevel, mags: &mut Vec<u32>) -> Option<f32> {
    if m == 0.0 || group.len() < 3 {
        return None;
    }
    let limit = m / t.threshold;
    let below = group.iter().filter(|x| x.abs() < limit).count();
    if below * 2 <= group.len() {
        return None;
    }
    let k = ((group.len() as f64 * f64::from(t.outlier_fraction)).ceil() as usize)
        .clamp(1, group.len() - 1);
    mags.clear();
    mags.extend(group.iter().map(|x| x.to_bits() & 0x7FFF_FFFF));
    let (_, kth, _) = mags.select_nth_unstable_by(k, |a, b| b.cmp(a));
    Some(f32::from_bits(*kth))
}

/// Decodes a payload written by [`quantize`] into `out` (`out.len()` values).
///
/// Checks everything before trusting it: the payload length must be exactly what the
/// scales and `out.len()` imply, scales must be finite, the two-level mark may appear only
/// in a two-level shape, and every code must lie in `-qmax..=qmax`.
///
/// # Errors
/// [`QuantError::InvalidGroupSize`], [`QuantError::PayloadLength`],
/// [`QuantError::InvalidScale`], [`QuantError::CodeOutOfRange`].
pub fn dequantize(
    payload: &[u8],
    shape: QuantShape,
    out: &mut [f32],
) -> Result<QuantStats, QuantError> {
    if !(1..=MAX_GROUP_SIZE).contains(&shape.group_size) {
        return Err(QuantError::InvalidGroupSize {
            group_size: shape.group_size,
        });
    }
    let n = out.len();
    let gs = shape.group_size as usize;
    let groups = n.div_ceil(gs);
    let bits = shape.bits.bits();
    let too_short = |expected: usize| QuantError::PayloadLength {
        expected,
        actual: payload.len(),
    };
    let scale_bytes = payload
        .get(..4 * groups)
        .ok_or_else(|| too_short(4 * groups))?;

    // First pass over the scales: validate, count two-level groups and their values.
    let mut two_groups = 0usize;
    let mut two_values = 0usize;
    // The encoder keeps `qmax * scale <= f32::MAX`; a larger scale would decode to
    // infinity, so it is refused like a non-finite one.
    let max_scale = f64::from(f32::MAX) / f64::from(shape.bits.qmax());
    let scale_ok = |s: f32| s.is_finite() && f64::from(s.abs()) <= max_scale;
    for (g, b) in scale_bytes.chunks_exact(4).enumerate() {
        let s = read_f32(b);
        let marked = s.is_sign_negative();
        if !scale_ok(s) || (marked && !(shape.two_level && shape.bits == QuantBits::B3)) {
            return Err(QuantError::InvalidScale {
                group: g,
                value: s,
                bits: s.to_bits(),
            });
        }
        if marked {
            two_groups += 1;
            two_values += gs.min(n - g * gs);
        }
    }
    let expected = payload_size(shape.bits, n, shape.group_size, two_groups, two_values);
    if payload.len() != expected {
        return Err(QuantError::PayloadLength {
            expected,
            actual: payload.len(),
        });
    }
    let (secondary, rest) = payload[4 * groups..].split_at(4 * two_groups);
    let (flags, code_bytes) = rest.split_at(two_values.div_ceil(8));
    for (i, b) in secondary.chunks_exact(4).enumerate() {
        let s = read_f32(b);
        if !scale_ok(s) || s.is_sign_negative() {
            return Err(QuantError::InvalidScale {
                group: i,
                value: s,
                bits: s.to_bits(),
            });
        }
    }

    let mut codes = vec![0i8; n];
    unpack_bits(code_bytes, bits, &mut codes).map_err(|_| too_short(expected))?;
    let qmax = shape.bits.qmax();
    check_codes(&codes, qmax)?;

    let mut sec = secondary.chunks_exact(4).map(read_f32);
    let mut flag_pos = 0usize;
    for ((g, scale_b), (dst, src)) in scale_bytes
        .chunks_exact(4)
        .enumerate()
        .zip(out.chunks_mut(gs).zip(codes.chunks(gs)))
    {
        let s = read_f32(scale_b);
        if s.is_sign_negative() {
            let pscale = -s;
            let sscale = sec.next().ok_or(QuantError::InvalidScale {
                group: g,
                value: s,
                bits: s.to_bits(),
            })?;
            for (j, (d, &c)) in dst.iter_mut().zip(src).enumerate() {
                let f = flag_pos + j;
                let outlier = flags[f / 8] >> (f % 8) & 1 == 1;
                *d = f32::from(c) * if outlier { sscale } else { pscale };
            }
            flag_pos += dst.len();
        } else {
            dequantize_group(src, s, dst);
        }
    }
    Ok(QuantStats {
        groups,
        two_level_groups: two_groups,
        payload_bytes: expected,
    })
}

#[inline(always)]
pub(crate) fn dequantize_group(codes: &[i8], scale: f32, out: &mut [f32]) {
    for (d, &c) in out.iter_mut().zip(codes) {
        *d = f32::from(c) * scale;
    }
}

pub(crate) fn check_codes(codes: &[i8], qmax: i8) -> Result<(), QuantError> {
    let (lo, hi) = codes
        .iter()
        .fold((0i8, 0i8), |(lo, hi), &c| (lo.min(c), hi.max(c)));
    if lo < -qmax || hi > qmax {
        let index = codes
            .iter()
            .position(|&c| c < -qmax || c > qmax)
            .unwrap_or(0);
        return Err(QuantError::CodeOutOfRange {
            index,
            code: codes[index],
            qmax,
        });
    }
    Ok(())
}

fn read_f32(b: &[u8]) -> f32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    f32::from_le_bytes(a)
}

#[cfg(test)]
mod tests;

//! Element conversions: little-endian bytes of a [`DType`] to and from `f32`, and to `f64`.
//!
//! The one definition of these casts for every crate of Strata (the store, the WASM
//! package, the examples, the residuals of [`crate::residual`]):
//!
//! | function | from | to | rounding |
//! |---|---|---|---|
//! | [`to_f32`], [`to_f32_into`] | bytes of a float dtype | `f32` | exact for f32, f16 and bf16; f64 rounds to nearest even |
//! | [`from_f32`], [`from_f32_into`] | `f32` | bytes of a float dtype | exact for f32 and f64; f16 and bf16 round to nearest even |
//! | [`to_f64`], [`to_f64_into`] | bytes of any dtype | `f64` | exact but for 64-bit integers above 2^53 (nearest); bool is 0 or 1 |
//!
//! Special values: infinities and zeros keep their sign everywhere; an f32 beyond the f16
//! range becomes an infinity of its sign (as a cast does); NaN stays NaN. A bf16 widens bit
//! for bit (a bf16 is the top half of an f32, so even a signaling NaN keeps its payload);
//! f16 and narrowing conversions are those of the `half` crate, which set the quiet bit of
//! a NaN. Every conversion is deterministic on every target.
//!
//! A trailing partial element of the input bytes is ignored. The `_into` forms write into
//! a caller's slice (no allocation), which must hold exactly one output per input element.
//!
//! ```
//! use strata_codec::{convert, DType};
//!
//! let bytes = convert::from_f32(DType::BF16, &[1.0, -2.5, 1.0 + 1.0 / 512.0])?;
//! assert_eq!(bytes, [0x80, 0x3f, 0x20, 0xc0, 0x80, 0x3f]); // 1 + 2^-9 rounds to even: 1.0
//! assert_eq!(convert::to_f32(DType::BF16, &bytes)?, [1.0, -2.5, 1.0]);
//! assert_eq!(convert::to_f64(DType::I16, &(-7i16).to_le_bytes()), [-7.0]);
//! assert!(convert::to_f32(DType::I32, &[0; 4]).is_err());
//! # Ok::<(), strata_codec::convert::ConvertError>(())
//! ```

use thiserror::Error;

use crate::DType;

/// Errors of the conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// The conversion is defined for float dtypes only.
    #[error("{dtype} is not a float dtype")]
    NotFloat {
        /// The dtype given.
        dtype: DType,
    },
    /// The output slice of an `_into` conversion does not hold one output per input
    /// element.
    #[error("output holds {actual} elements, the input {expected}")]
    Length {
        /// Elements of the input (whole elements of the bytes, or values).
        expected: usize,
        /// Elements the output holds.
        actual: usize,
    },
}

/// Elements of `N` bytes of `bytes` (a trailing partial element is ignored).
fn elements<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    bytes.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}

/// `f` of each `N`-byte element of `bytes`, written to `out` (same count, checked by the
/// caller). This form vectorizes.
#[inline(always)]
fn each_in<const N: usize, T>(bytes: &[u8], out: &mut [T], f: impl Fn([u8; N]) -> T) {
    for (o, a) in out.iter_mut().zip(elements::<N>(bytes)) {
        *o = f(a);
    }
}

/// `f` of each value, its `N` bytes written to `out` (same count, checked by the caller).
#[inline(always)]
fn each_out<const N: usize>(values: &[f32], out: &mut [u8], f: impl Fn(f32) -> [u8; N]) {
    for (o, &x) in out.chunks_exact_mut(N).zip(values) {
        o.copy_from_slice(&f(x));
    }
}

fn check_len(expected: usize, actual: usize) -> Result<(), ConvertError> {
    if expected == actual {
        Ok(())
    } else {
        Err(ConvertError::Length { expected, actual })
    }
}

/// The f32 a bf16 bit pattern stands for: its top half, bit for bit.
#[inline(always)]
fn bf16_bits_to_f32(w: u16) -> f32 {
    f32::from_bits(u32::from(w) << 16)
}

/// The values of little-endian `bytes` of float `dtype` as `f32`: exact for f32, f16 and
/// bf16, f64 rounded to the nearest f32. A trailing partial element is ignored.
///
/// # Errors
/// [`ConvertError::NotFloat`] for an integer or bool dtype.
pub fn to_f32(dtype: DType, bytes: &[u8]) -> Result<Vec<f32>, ConvertError> {
    if !dtype.is_float() {
        return Err(ConvertError::NotFloat { dtype });
    }
    let mut out = vec![0f32; bytes.len() / dtype.size()];
    fill_f32(dtype, bytes, &mut out);
    Ok(out)
}

/// [`to_f32`] into `out`, which must hold `bytes.len() / dtype.size()` values.
///
/// # Errors
/// [`ConvertError::NotFloat`], [`ConvertError::Length`]; `out` is untouched then.
pub fn to_f32_into(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), ConvertError> {
    if !dtype.is_float() {
        return Err(ConvertError::NotFloat { dtype });
    }
    check_len(bytes.len() / dtype.size(), out.len())?;
    fill_f32(dtype, bytes, out);
    Ok(())
}

/// [`to_f32_into`] once the dtype (float) and the lengths are checked.
fn fill_f32(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        DType::F32 => each_in(bytes, out, f32::from_le_bytes),
        DType::BF16 => each_in(bytes, out, |a| bf16_bits_to_f32(u16::from_le_bytes(a))),
        DType::F16 => f16_to_f32(bytes, out),
        DType::F64 => each_in(bytes, out, |a| f64::from_le_bytes(a) as f32),
        // Not a float: the callers refused it.
        _ => {}
    }
}

/// f16 bytes widened through `half`'s slice conversion (F16C when the CPU has it, the
/// same values as its one-at-a-time conversion), a stack buffer of words at a time.
fn f16_to_f32(bytes: &[u8], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    const CHUNK: usize = 256;
    let mut words = [half::f16::ZERO; CHUNK];
    for (src, dst) in bytes.chunks(2 * CHUNK).zip(out.chunks_mut(CHUNK)) {
        let n = dst.len();
        for (w, a) in words.iter_mut().zip(elements::<2>(src)) {
            *w = half::f16::from_le_bytes(a);
        }
        words[..n].convert_to_f32_slice(dst);
    }
}

/// `values` as little-endian bytes of float `dtype`: exact for f32 and f64, round to
/// nearest even for f16 and bf16 (an f32 beyond the f16 range becomes an infinity of its
/// sign, as a cast does; NaN stays NaN).
///
/// # Errors
/// [`ConvertError::NotFloat`] for an integer or bool dtype.
pub fn from_f32(dtype: DType, values: &[f32]) -> Result<Vec<u8>, ConvertError> {
    if !dtype.is_float() {
        return Err(ConvertError::NotFloat { dtype });
    }
    let mut out = vec![0u8; values.len() * dtype.size()];
    fill_bytes(dtype, values, &mut out);
    Ok(out)
}

/// [`from_f32`] into `out`, which must be `values.len() * dtype.size()` bytes long.
///
/// # Errors
/// [`ConvertError::NotFloat`], [`ConvertError::Length`] (counted in elements; a length
/// that is not whole elements counts as one element short); `out` is untouched then.
pub fn from_f32_into(dtype: DType, values: &[f32], out: &mut [u8]) -> Result<(), ConvertError> {
    if !dtype.is_float() {
        return Err(ConvertError::NotFloat { dtype });
    }
    let size = dtype.size();
    if out.len() != values.len() * size {
        return Err(ConvertError::Length {
            expected: values.len(),
            actual: out.len() / size,
        });
    }
    fill_bytes(dtype, values, out);
    Ok(())
}

/// [`from_f32_into`] once the dtype (float) and the lengths are checked.
fn fill_bytes(dtype: DType, values: &[f32], out: &mut [u8]) {
    match dtype {
        DType::F32 => each_out(values, out, f32::to_le_bytes),
        DType::F64 => each_out(values, out, |x| f64::from(x).to_le_bytes()),
        DType::F16 => each_out(values, out, |x| half::f16::from_f32(x).to_le_bytes()),
        DType::BF16 => each_out(values, out, |x| half::bf16::from_f32(x).to_le_bytes()),
        // Not a float: the callers refused it.
        _ => {}
    }
}

/// The elements of little-endian `bytes` of any `dtype` as `f64`: exact for every dtype but
/// 64-bit integers above 2^53 (rounded to nearest); bool is 0 or 1 (any non-zero byte is
/// true); the 8-bit floats decoded by their formats (NaN for their NaN codes); complex
/// ([`DType::C64`]) gives the real part of each element (read the bytes for the imaginary
/// parts); the packed sub-byte dtypes give every value they hold
/// ([`DType::values_per_element`] per element, in order). A trailing partial element is
/// ignored. For display and analysis (norms, diffs, histories).
pub fn to_f64(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    let mut out = vec![0f64; value_count(dtype, bytes)];
    fill_f64(dtype, bytes, &mut out);
    out
}

/// [`to_f64`] into `out`, which must hold as many values as [`to_f64`] returns.
///
/// # Errors
/// [`ConvertError::Length`]; `out` is untouched then.
pub fn to_f64_into(dtype: DType, bytes: &[u8], out: &mut [f64]) -> Result<(), ConvertError> {
    check_len(value_count(dtype, bytes), out.len())?;
    fill_f64(dtype, bytes, out);
    Ok(())
}

/// Values in the whole elements of `bytes`.
fn value_count(dtype: DType, bytes: &[u8]) -> usize {
    bytes.len() / dtype.size() * dtype.values_per_element()
}

/// [`to_f64_into`] once the lengths are checked.
fn fill_f64(dtype: DType, bytes: &[u8], out: &mut [f64]) {
    match dtype {
        DType::F32 => each_in(bytes, out, |a| f64::from(f32::from_le_bytes(a))),
        DType::F16 => each_in(bytes, out, |a| half::f16::from_le_bytes(a).to_f64()),
        DType::BF16 => each_in(bytes, out, |a| half::bf16::from_le_bytes(a).to_f64()),
        DType::F64 => each_in(bytes, out, f64::from_le_bytes),
        DType::I8 => each_in(bytes, out, |a: [u8; 1]| f64::from(a[0] as i8)),
        DType::U8 => each_in(bytes, out, |a: [u8; 1]| f64::from(a[0])),
        DType::Bool => each_in(bytes, out, |a: [u8; 1]| f64::from(u8::from(a[0] != 0))),
        DType::I16 => each_in(bytes, out, |a| f64::from(i16::from_le_bytes(a))),
        DType::U16 => each_in(bytes, out, |a| f64::from(u16::from_le_bytes(a))),
        DType::I32 => each_in(bytes, out, |a| f64::from(i32::from_le_bytes(a))),
        DType::U32 => each_in(bytes, out, |a| f64::from(u32::from_le_bytes(a))),
        DType::I64 => each_in(bytes, out, |a| i64::from_le_bytes(a) as f64),
        DType::U64 => each_in(bytes, out, |a| u64::from_le_bytes(a) as f64),
        DType::F8E4M3 => each_in(bytes, out, |a: [u8; 1]| fp8::e4m3(a[0])),
        DType::F8E5M2 => each_in(bytes, out, |a: [u8; 1]| fp8::e5m2(a[0])),
        DType::F8E8M0 => each_in(bytes, out, |a: [u8; 1]| fp8::e8m0(a[0])),
        DType::F8E4M3Fnuz => each_in(bytes, out, |a: [u8; 1]| fp8::e4m3fnuz(a[0])),
        DType::F8E5M2Fnuz => each_in(bytes, out, |a: [u8; 1]| fp8::e5m2fnuz(a[0])),
        DType::C64 => each_in(bytes, out, |a: [u8; 8]| {
            f64::from(f32::from_le_bytes([a[0], a[1], a[2], a[3]]))
        }),
        DType::F4E2M1x2 => {
            for (pair, &b) in out.chunks_exact_mut(2).zip(bytes) {
                pair[0] = fp8::e2m1(b & 0x0F);
                pair[1] = fp8::e2m1(b >> 4);
            }
        }
        DType::F6E2M3x4 | DType::F6E3M2x4 => {
            let (m_bits, bias) = if dtype == DType::F6E2M3x4 {
                (3, 1)
            } else {
                (2, 3)
            };
            for (four, g) in out.chunks_exact_mut(4).zip(bytes.as_chunks::<3>().0) {
                let word = u32::from_le_bytes([g[0], g[1], g[2], 0]);
                for (i, v) in four.iter_mut().enumerate() {
                    *v = fp8::fp6((word >> (6 * i)) as u8 & 0x3F, m_bits, bias);
                }
            }
        }
    }
}

/// Decoders of the 8-bit float formats (OCP FP8 and MX, and the FNUZ variants) and of the
/// MX 4- and 6-bit element formats.
mod fp8 {
    /// A sign-magnitude float of `m_bits` mantissa bits and exponent `bias`, with subnormals;
    /// special values are the callers'.
    fn value(byte: u8, m_bits: u32, bias: i32) -> f64 {
        let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = i32::from((byte & 0x7F) >> m_bits);
        let m = f64::from(byte & ((1 << m_bits) - 1));
        let scale = f64::from(1u32 << m_bits);
        let magnitude = if e == 0 {
            m / scale * 2f64.powi(1 - bias)
        } else {
            (1.0 + m / scale) * 2f64.powi(e - bias)
        };
        sign * magnitude
    }

    pub(super) fn e4m3(b: u8) -> f64 {
        if b & 0x7F == 0x7F {
            f64::NAN
        } else {
            value(b, 3, 7)
        }
    }

    pub(super) fn e5m2(b: u8) -> f64 {
        match b & 0x7F {
            0x7C => {
                if b & 0x80 != 0 {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            0x7D..=0x7F => f64::NAN,
            _ => value(b, 2, 15),
        }
    }

    /// An FP4 E2M1 code (low 4 bits): bias 1, no special values.
    pub(super) fn e2m1(code: u8) -> f64 {
        // Spread the sign to bit 7 so `value` sees the usual sign-magnitude byte.
        value(((code & 0x8) << 4) | (code & 0x7), 1, 1)
    }

    /// An FP6 code (low 6 bits) of `m_bits` mantissa bits and exponent `bias`: no special
    /// values.
    pub(super) fn fp6(code: u8, m_bits: u32, bias: i32) -> f64 {
        value(((code & 0x20) << 2) | (code & 0x1F), m_bits, bias)
    }

    pub(super) fn e8m0(b: u8) -> f64 {
        if b == 0xFF {
            f64::NAN
        } else {
            2f64.powi(i32::from(b) - 127)
        }
    }

    pub(super) fn e4m3fnuz(b: u8) -> f64 {
        if b == 0x80 {
            f64::NAN
        } else {
            value(b, 3, 8)
        }
    }

    pub(super) fn e5m2fnuz(b: u8) -> f64 {
        if b == 0x80 {
            f64::NAN
        } else {
            value(b, 2, 16)
        }
    }
}

#[cfg(test)]
mod tests;

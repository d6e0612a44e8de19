//! Residuals of a quantized tier against the original block (ADR 0012).
//!
//! When an exact block is demoted to a quantized tier, the store may keep one of two
//! residuals next to the quantized segment:
//!
//! - **exact** ([`exact_residual`]): the original bytes as a lossless XOR delta segment
//!   against the dequantized block cast back to the original dtype ([`cast_to`]). The
//!   lossless codec already XORs against a base, splits byte planes and entropy codes them
//!   with the base's exponent as context, which is what a residual of this kind needs; the
//!   segment's base hash ties it to the exact approximation it was made against, and its
//!   checksum covers it. [`apply_exact_residual`] gives back the original bit for bit.
//! - **top-k** ([`topk_residual`]): the `k` entries where `|original - approx|` is largest,
//!   as `(index, original - approx)` in fp16 or bf16, in an HPΔKV blob
//!   ([`crate::hpdkv`]). [`apply_residual`] adds them to the approximation; at every kept
//!   index the error shrinks to the rounding error of the stored difference, and nowhere
//!   does it grow.
//!
//! ```
//! use strata_codec::quant::{QuantBits, QuantParams};
//! use strata_codec::segment::{self, Segment};
//! use strata_codec::{hpdkv::{HalfDType, HpdkvView}, lossless::LosslessOptions, residual, DType};
//!
//! let original: Vec<f32> = (0..256).map(|i| ((i as f32) * 0.7).sin() * 0.02).collect();
//! let tier = segment::encode_quantized(DType::F32, &original, &QuantParams::new(QuantBits::B5))?;
//! let approx = Segment::parse(&tier)?.dequantize(1 << 20)?;
//!
//! // Exact: rebuild the original bytes from the tier and the residual.
//! let orig_bytes = residual::cast_to(DType::F32, &original)?;
//! let approx_bytes = residual::cast_to(DType::F32, &approx)?;
//! let exact = residual::exact_residual(DType::F32, &orig_bytes, &approx_bytes, &LosslessOptions::default())?;
//! assert_eq!(residual::apply_exact_residual(&exact, &approx_bytes, 1 << 20)?, orig_bytes);
//!
//! // Top-k: the 16 worst entries, in fp16.
//! let blob = residual::topk_residual(&original, &approx, &[256], 16, HalfDType::F16)?.encode(true)?;
//! let mut better = approx.clone();
//! residual::apply_residual(&HpdkvView::parse(&blob)?, &mut better)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use thiserror::Error;

use crate::convert;
use crate::hpdkv::{self, HalfDType, HpdkvBlob, HpdkvError, HpdkvView};
use crate::lossless::LosslessOptions;
use crate::segment::{self, Encoding, Segment, SegmentError};
use crate::DType;

/// Errors of computing and applying residuals.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ResidualError {
    /// Residuals are defined for float dtypes only.
    #[error("residuals need a float dtype, not {dtype}")]
    NotFloat {
        /// The dtype given.
        dtype: DType,
    },
    /// Two inputs that must have the same length do not.
    #[error("{what} has {actual} elements, expected {expected}")]
    Length {
        /// Which input.
        what: &'static str,
        /// Elements expected.
        expected: u64,
        /// Elements given.
        actual: u64,
    },
    /// An input value is NaN or infinite: no quantized tier holds such a value, so it has
    /// no residual against one.
    #[error("{what} value at index {index} is not finite (bits {bits:#010x})")]
    NonFinite {
        /// Which input.
        what: &'static str,
        /// Index of the first non-finite value.
        index: usize,
        /// Its bit pattern.
        bits: u32,
    },
    /// A stored residual value is NaN or infinite; adding it would destroy the element.
    #[error("residual entry {position} (element {index}) is not finite")]
    NonFiniteResidual {
        /// Entry number in the blob.
        position: usize,
        /// Element it applies to.
        index: u64,
    },
    /// The segment given as an exact residual is not a lossless delta.
    #[error("an exact residual is a lossless delta segment, this one is {encoding:?}")]
    NotDelta {
        /// Its encoding.
        encoding: Encoding,
    },
    /// The HPΔKV blob is invalid or cannot be written.
    #[error("HPΔKV: {0}")]
    Hpdkv(#[from] HpdkvError),
    /// The residual segment is invalid, or was made against another approximation.
    #[error("residual segment: {0}")]
    Segment(#[from] SegmentError),
}

/// `values` stored as `dtype`, little-endian: exact for f32 and f64, round to nearest even
/// for f16 and bf16 (an f32 beyond the f16 range becomes an infinity, as a cast does).
///
/// This is "the dequantized block cast back to the original dtype" that an exact residual
/// is made against and applied to: [`convert::from_f32`], the codec's one definition of
/// that cast, deterministic on every target.
///
/// # Errors
/// [`ResidualError::NotFloat`] for an integer dtype.
pub fn cast_to(dtype: DType, values: &[f32]) -> Result<Vec<u8>, ResidualError> {
    convert::from_f32(dtype, values).map_err(|_| ResidualError::NotFloat { dtype })
}

/// The exact residual of `original` against `approx` (both `dtype`, same length, as
/// [`cast_to`] writes them): a lossless delta segment ([`segment::encode_delta`]) that
/// records `approx`'s hash as its base.
///
/// # Errors
/// [`ResidualError::NotFloat`], [`ResidualError::Length`], or
/// [`ResidualError::Segment`] for a length that is not whole elements.
pub fn exact_residual(
    dtype: DType,
    original: &[u8],
    approx: &[u8],
    opts: &LosslessOptions,
) -> Result<Vec<u8>, ResidualError> {
    if !dtype.is_float() {
        return Err(ResidualError::NotFloat { dtype });
    }
    if original.len() != approx.len() {
        return Err(ResidualError::Length {
            what: "approximation (bytes)",
            expected: original.len() as u64,
            actual: approx.len() as u64,
        });
    }
    Ok(segment::encode_delta(dtype, original, approx, opts)?)
}

/// Rebuilds the original bytes from an exact residual and the approximation it was made
/// against, refusing blocks over `limit` bytes.
///
/// # Errors
/// [`ResidualError::NotDelta`], or [`ResidualError::Segment`]: a corrupt residual, an
/// approximation other than the one it was made against
/// ([`SegmentError::BaseMismatch`]), or a block over the limit.
pub fn apply_exact_residual(
    residual: &[u8],
    approx: &[u8],
    limit: usize,
) -> Result<Vec<u8>, ResidualError> {
    let seg = Segment::parse(residual)?;
    let encoding = seg.header().encoding;
    if encoding != Encoding::Delta {
        return Err(ResidualError::NotDelta { encoding });
    }
    Ok(seg.decode_lossless(Some(approx), limit)?)
}

/// The top-`k` residual: the (at most) `k` entries with the largest `|original - approx|`
/// (ties to the lower index), as `original - approx` rounded to `dtype`, in a sparse
/// HPΔKV blob of `shape` (whose element count must be the input length).
///
/// Entries whose difference is zero, or rounds to zero in `dtype`, are left out, so the
/// blob may hold fewer than `k`; `k` above the length means every entry. A difference
/// beyond the fp16 range is stored as the largest finite fp16 of its sign (it still moves
/// the value towards the original). Encode the result with [`HpdkvBlob::encode`].
///
/// # Errors
/// [`ResidualError::Length`], [`ResidualError::NonFinite`], or
/// [`ResidualError::Hpdkv`] for a shape the format cannot hold.
pub fn topk_residual(
    original: &[f32],
    approx: &[f32],
    shape: &[u32],
    k: usize,
    dtype: HalfDType,
) -> Result<HpdkvBlob, ResidualError> {
    // At most 2^32 elements, so every index fits in a u32.
    let elements = hpdkv::shape_elements(shape.iter().copied())?;
    if elements != original.len() as u64 {
        return Err(ResidualError::Length {
            what: "original (against the shape)",
            expected: elements,
            actual: original.len() as u64,
        });
    }
    if approx.len() != original.len() {
        return Err(ResidualError::Length {
            what: "approximation",
            expected: original.len() as u64,
            actual: approx.len() as u64,
        });
    }
    check_finite("original", original)?;
    check_finite("approximation", approx)?;

    // (magnitude bits, index) of every non-zero difference; magnitude bits of a finite
    // non-negative f32 order like the value.
    let mut cand: Vec<(u32, u32)> = Vec::new();
    for (i, (&o, &a)) in original.iter().zip(approx).enumerate() {
        let d = diff(o, a);
        if d != 0.0 {
            cand.push((d.abs().to_bits(), i as u32));
        }
    }
    let order = |x: &(u32, u32), y: &(u32, u32)| y.0.cmp(&x.0).then(x.1.cmp(&y.1));
    if k < cand.len() {
        if k > 0 {
            cand.select_nth_unstable_by(k - 1, order);
        }
        cand.truncate(k);
    }
    let mut idx: Vec<u32> = cand.into_iter().map(|(_, i)| i).collect();
    idx.sort_unstable();

    let mut indices = Vec::with_capacity(idx.len());
    let mut values = Vec::with_capacity(idx.len());
    for i in idx {
        let d = diff(original[i as usize], approx[i as usize]);
        let w = to_half_saturating(dtype, d);
        if dtype.to_f32(w) != 0.0 {
            indices.push(i);
            values.push(w);
        }
    }
    Ok(HpdkvBlob {
        dtype,
        shape: shape.to_vec(),
        indices: Some(indices),
        values,
    })
}

/// Adds a residual blob's values to `approx` (which must hold the blob's element count):
/// at its indices for a sparse blob, everywhere for a dense one.
///
/// # Errors
/// [`ResidualError::Length`], [`ResidualError::NonFiniteResidual`] (nothing is changed
/// then), or [`ResidualError::Hpdkv`] for a bad payload.
pub fn apply_residual(blob: &HpdkvView<'_>, approx: &mut [f32]) -> Result<(), ResidualError> {
    if approx.len() as u64 != blob.elements() {
        return Err(ResidualError::Length {
            what: "approximation",
            expected: blob.elements(),
            actual: approx.len() as u64,
        });
    }
    // `parse` bounded the value count by the payload; `approx` bounds it by memory.
    let values = blob.values(usize::MAX)?;
    let dtype = blob.dtype();
    let as_f32 = |(position, &w): (usize, &u16)| {
        let v = dtype.to_f32(w);
        if v.is_finite() {
            Ok(v)
        } else {
            let index = if blob.is_sparse() {
                blob.indices().nth(position).map_or(0, u64::from)
            } else {
                position as u64
            };
            Err(ResidualError::NonFiniteResidual { position, index })
        }
    };
    let deltas: Vec<f32> = values
        .iter()
        .enumerate()
        .map(as_f32)
        .collect::<Result<_, _>>()?;
    if blob.is_sparse() {
        // Indices were checked against the element count, which is `approx.len()`.
        for (i, d) in blob.indices().zip(deltas) {
            approx[i as usize] += d;
        }
    } else {
        for (a, d) in approx.iter_mut().zip(deltas) {
            *a += d;
        }
    }
    Ok(())
}

/// `o - a`, computed exactly in f64 and rounded once to f32.
fn diff(o: f32, a: f32) -> f32 {
    (f64::from(o) - f64::from(a)) as f32
}

fn to_half_saturating(dtype: HalfDType, x: f32) -> u16 {
    let w = dtype.from_f32(x);
    if dtype.to_f32(w).is_finite() {
        return w;
    }
    let max = match dtype {
        HalfDType::F16 => half::f16::MAX.to_bits(),
        HalfDType::BF16 => half::bf16::MAX.to_bits(),
    };
    if x < 0.0 {
        max | 0x8000
    } else {
        max
    }
}

fn check_finite(what: &'static str, v: &[f32]) -> Result<(), ResidualError> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(index) => Err(ResidualError::NonFinite {
            what,
            index,
            bits: v[index].to_bits(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;

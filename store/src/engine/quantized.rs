//! Float blocks to and from quantized segments, and the residuals kept beside them.
//!
//! Quantization works on `f32`: f16 and bf16 widen exactly, f64 narrows (round to nearest).
//! On the way out, values are rounded to the tensor's dtype (nearest even), and the
//! [`Fidelity`] bound includes that rounding.

use strata_codec::convert;
use strata_codec::frames::{FrameError, FrameSegment};
use strata_codec::hpdkv::{HalfDType, HpdkvView};
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams};
use strata_codec::residual::{self, ResidualError};
use strata_codec::segment::{self, Segment, SegmentError};
use strata_codec::DType;
use strata_tiering::Precision;

use crate::tensor::Fidelity;
use crate::tiers::policy::Residual;

/// The values of float `bytes` as `f32` (`None` for an integer dtype).
pub(crate) fn to_f32(dtype: DType, bytes: &[u8]) -> Option<Vec<f32>> {
    convert::to_f32(dtype, bytes).ok()
}

/// `values` as little-endian bytes of float `dtype` (round to nearest even); an integer
/// dtype gets f32 bytes (never asked: only float blocks are quantized).
pub(crate) fn from_f32(dtype: DType, values: &[f32]) -> Vec<u8> {
    convert::from_f32(dtype, values)
        .or_else(|_| convert::from_f32(DType::F32, values))
        .unwrap_or_default()
}

/// Relative error added by rounding a value to `dtype` on the way out (half an ulp,
/// relative to the value, hence to its group's largest magnitude).
pub(crate) fn dtype_rounding(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        _ => 0.0,
    }
}

/// The fidelity of data of `precision` read back as `dtype`.
pub(crate) fn fidelity_of(precision: Precision, dtype: DType) -> Fidelity {
    match precision {
        Precision::Exact => Fidelity::Exact,
        Precision::Lossy {
            min_bits,
            bound_rel,
        } => Fidelity::Bounded {
            bits: min_bits,
            max_rel_error: bound_rel + dtype_rounding(dtype),
        },
        Precision::NoData => Fidelity::Zeros,
    }
}

/// Residual bytes to store beside a quantized block.
#[derive(Debug)]
pub(crate) enum ResidualBytes {
    /// An exact XOR residual: a lossless delta segment against the lossy bytes.
    Exact(Vec<u8>),
    /// A sparse top-k HPΔKV blob.
    Sparse(Vec<u8>),
}

impl ResidualBytes {
    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            ResidualBytes::Exact(b) | ResidualBytes::Sparse(b) => b,
        }
    }
}

/// A block encoded at a quantized tier.
#[derive(Debug)]
pub(crate) struct LossyBlock {
    /// The quantized segment.
    pub(crate) segment: Vec<u8>,
    /// What it keeps of the quantization error.
    pub(crate) residual: Option<ResidualBytes>,
}

/// Quantizes `values` (of a block of `dtype`) at `bits` with the residual `residual` asks
/// for: an exact one needs `exact` (the block's exact bytes; none is made without them), a
/// top-k one is taken against `values`.
pub(crate) fn encode(
    dtype: DType,
    values: &[f32],
    bits: QuantBits,
    group_size: u32,
    exact: Option<&[u8]>,
    residual: Residual,
    lossless: &LosslessOptions,
) -> Result<LossyBlock, ResidualError> {
    let params = QuantParams::new(bits).with_group_size(group_size);
    let segment = segment::encode_quantized(dtype, values, &params)?;
    let len = values.len() * dtype.size();
    let residual = match (residual, exact) {
        (Residual::None, _) | (Residual::Exact, None) => None,
        (Residual::Exact, Some(exact)) => {
            let lossy = decode(dtype, &segment, exact.len())?;
            Some(ResidualBytes::Exact(residual::exact_residual(
                dtype, exact, &lossy, lossless,
            )?))
        }
        (Residual::TopK { fraction }, _) => {
            let approx = decode_values(dtype, &segment, len)?;
            Some(ResidualBytes::Sparse(sparse_residual(
                dtype, values, &approx, fraction,
            )?))
        }
    };
    Ok(LossyBlock { segment, residual })
}

/// The f32 values of a quantized segment of `len` bytes of `dtype` when decoded.
pub(crate) fn decode_values(
    dtype: DType,
    segment: &[u8],
    len: usize,
) -> Result<Vec<f32>, SegmentError> {
    let seg = Segment::parse(segment)?;
    let elements = len / dtype.size().max(1);
    let values = seg.dequantize(elements.saturating_mul(4))?;
    if values.len() != elements {
        return Err(SegmentError::OutputLength {
            expected: elements * dtype.size(),
            actual: values.len() * dtype.size(),
        });
    }
    Ok(values)
}

/// The bytes (of `dtype`, `len` of them) of a quantized segment.
pub(crate) fn decode(dtype: DType, segment: &[u8], len: usize) -> Result<Vec<u8>, SegmentError> {
    Ok(from_f32(dtype, &decode_values(dtype, segment, len)?))
}

/// The bytes (of `dtype`, `len` of them) of frame `index` of a multi-frame segment.
pub(crate) fn decode_frame(
    dtype: DType,
    segment: &[u8],
    index: u32,
    len: usize,
) -> Result<Vec<u8>, FrameError> {
    let frames = FrameSegment::parse(segment)?;
    let values = frames.decode_frame(index, (len / dtype.size().max(1)).saturating_mul(4))?;
    Ok(from_f32(dtype, &values))
}

/// The exact bytes from lossy bytes and an exact residual segment.
pub(crate) fn apply_exact_residual(
    lossy: &[u8],
    exact_residual: &[u8],
    len: usize,
) -> Result<Vec<u8>, ResidualError> {
    residual::apply_exact_residual(exact_residual, lossy, len)
}

/// The half type a sparse residual of a `dtype` block is kept in.
fn half_of(dtype: DType) -> HalfDType {
    match dtype {
        DType::BF16 => HalfDType::BF16,
        _ => HalfDType::F16,
    }
}

/// A sparse HPΔKV blob holding the `fraction` of entries where `approx` is furthest from
/// `original` (their difference, in f16, or bf16 for bf16 blocks).
pub(crate) fn sparse_residual(
    dtype: DType,
    original: &[f32],
    approx: &[f32],
    fraction: f32,
) -> Result<Vec<u8>, ResidualError> {
    let n = original.len();
    let k = ((f64::from(fraction) * n as f64).ceil() as usize).min(n);
    let shape = [u32::try_from(n).unwrap_or(u32::MAX)];
    let blob = residual::topk_residual(original, approx, &shape, k, half_of(dtype))?;
    Ok(blob.encode(true)?)
}

/// Adds a sparse HPΔKV blob to `values`.
pub(crate) fn apply_sparse(blob: &[u8], values: &mut [f32]) -> Result<(), ResidualError> {
    let view = HpdkvView::parse(blob)?;
    residual::apply_residual(&view, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_round_trips() {
        let v = [0.5f32, -1.25, 3.0, 0.0];
        for dt in [DType::F32, DType::F16, DType::BF16, DType::F64] {
            let bytes = from_f32(dt, &v);
            assert_eq!(bytes.len(), v.len() * dt.size());
            assert_eq!(to_f32(dt, &bytes).unwrap(), v);
        }
        assert!(to_f32(DType::I32, &[0; 4]).is_none());
    }

    #[test]
    fn exact_residual_rebuilds_the_bytes() {
        let values: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        for dt in [DType::F32, DType::BF16] {
            let bytes = from_f32(dt, &values);
            let vals = to_f32(dt, &bytes).unwrap();
            let b = encode(
                dt,
                &vals,
                QuantBits::B5,
                64,
                Some(&bytes),
                Residual::Exact,
                &LosslessOptions::default(),
            )
            .unwrap();
            let lossy = decode(dt, &b.segment, bytes.len()).unwrap();
            assert_ne!(lossy, bytes);
            let Some(ResidualBytes::Exact(res)) = &b.residual else {
                panic!("no exact residual")
            };
            let back = apply_exact_residual(&lossy, res, bytes.len()).unwrap();
            assert_eq!(back, bytes);
        }
    }
}

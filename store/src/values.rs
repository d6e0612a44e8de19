//! Element values as `f64`, for display and analysis (norms, diffs, histories).

use crate::tensor::{Tensor, TensorSlice};
use crate::DType;

/// The elements of little-endian `bytes` of `dtype` as `f64` (exact for every dtype but
/// 64-bit integers above 2^53; bool is 0 or 1; NaN for a dtype added after this function).
/// A trailing partial element is ignored.
pub fn to_f64(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    use le_values as each;
    match dtype {
        DType::F32 => each(bytes, |a| f64::from(f32::from_le_bytes(a))),
        DType::F16 => each(bytes, |a| half::f16::from_le_bytes(a).to_f64()),
        DType::BF16 => each(bytes, |a| half::bf16::from_le_bytes(a).to_f64()),
        DType::F64 => each(bytes, f64::from_le_bytes),
        DType::I8 => each(bytes, |a: [u8; 1]| f64::from(a[0] as i8)),
        DType::U8 => each(bytes, |a: [u8; 1]| f64::from(a[0])),
        DType::Bool => each(bytes, |a: [u8; 1]| f64::from(u8::from(a[0] != 0))),
        DType::I16 => each(bytes, |a| f64::from(i16::from_le_bytes(a))),
        DType::U16 => each(bytes, |a| f64::from(u16::from_le_bytes(a))),
        DType::I32 => each(bytes, |a| f64::from(i32::from_le_bytes(a))),
        DType::U32 => each(bytes, |a| f64::from(u32::from_le_bytes(a))),
        DType::I64 => each(bytes, |a| i64::from_le_bytes(a) as f64),
        DType::U64 => each(bytes, |a| u64::from_le_bytes(a) as f64),
        other => vec![f64::NAN; bytes.len() / other.size().max(1)],
    }
}

/// `f` applied to each `N`-byte element of `bytes` (a trailing partial element is ignored).
pub(crate) fn le_values<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}

impl Tensor {
    /// The elements as `f64` (see [`to_f64`]).
    pub fn to_f64(&self) -> Vec<f64> {
        to_f64(self.dtype, &self.data)
    }
}

impl TensorSlice {
    /// The elements of the slice as `f64` (see [`to_f64`]).
    pub fn to_f64(&self) -> Vec<f64> {
        to_f64(self.dtype, &self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_each_dtype() {
        assert_eq!(to_f64(DType::F32, &1.5f32.to_le_bytes()), vec![1.5]);
        assert_eq!(to_f64(DType::BF16, &[0x80, 0x3f]), vec![1.0]);
        assert_eq!(to_f64(DType::F16, &[0x00, 0x3c]), vec![1.0]);
        assert_eq!(to_f64(DType::I8, &[0xff]), vec![-1.0]);
        assert_eq!(to_f64(DType::Bool, &[0, 7]), vec![0.0, 1.0]);
        assert_eq!(to_f64(DType::I64, &(-3i64).to_le_bytes()), vec![-3.0]);
        assert_eq!(to_f64(DType::F32, &[0, 0, 0]), Vec::<f64>::new());
    }
}

//! Helpers of the codec's real-data tests: the checkpoint series (from `strata-testkit`,
//! which says where they are and when the shared one runs) and float conversion.

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    missing_docs,
    clippy::panic
)]

pub use strata_testkit::series::{all_series, Series};

use strata_codec::DType;

/// Little-endian float `bytes` of `dtype` as f32 (exact for f32, bf16 and f16).
pub fn to_f32(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|w| f32::from_bits(u32::from(u16::from_le_bytes([w[0], w[1]])) << 16))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|w| half::f16::from_le_bytes([w[0], w[1]]).to_f32())
            .collect(),
        other => panic!("{other} is not a float dtype"),
    }
}

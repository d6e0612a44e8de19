//! Helpers of the real-data tests: the shared checkpoint series and float conversion.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::panic)]

use std::path::{Path, PathBuf};

use strata_codec::DType;

const SERIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/series");

/// `shared/data/series` next to the workspace (CI provides it).
pub fn series_dir() -> PathBuf {
    let dir = Path::new(SERIES);
    assert!(
        dir.is_dir(),
        "real-data test needs the checkpoint series at {} (shared/data/series next to the \
         workspace; CI provides it)",
        dir.display()
    );
    dir.to_path_buf()
}

/// The bytes of a file of the series, e.g. `dev_ft/bf16/step_000430.safetensors`.
pub fn read(rel: &str) -> Vec<u8> {
    let path = series_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

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

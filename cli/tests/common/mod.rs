//! Helpers of the tests that run `strata`: checkpoints of the real series with store
//! dtypes, and small f32 tensors written as safetensors files. Where the series are, and the
//! noise, come from `strata-testkit` (its `series` module says which copies a run uses and
//! how `STRATA_SHARED_DATA` changes that).

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    missing_docs,
    clippy::panic
)]

use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use strata_store::DType;
pub use strata_testkit::noise::{f32_bytes, noise};
use strata_testkit::series::load_checkpoints;
pub use strata_testkit::series::{committed_root, series_root};

/// One checkpoint file of the real series, with store dtypes.
pub type Ckpt = strata_testkit::series::Ckpt<DType>;

/// Reads every `step_*.safetensors` of `dir` (e.g. "dev_pre" or "dev_ft/bf16"), by step.
pub fn load_series(dir: &str) -> Vec<Ckpt> {
    load_checkpoints(&series_root().join(dir), DType::from_safetensors_name)
}

/// The tensor names of a safetensors file, sorted.
pub fn tensor_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).expect("read a safetensors file");
    let st = SafeTensors::deserialize(&bytes).expect("parse a safetensors file");
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    names
}

/// Writes a safetensors file of `count` f32 tensors of `elems` random (incompressible)
/// values each.
pub fn write_noise_safetensors(path: &Path, count: usize, elems: usize) {
    let data: Vec<(String, Vec<u8>)> = (0..count)
        .map(|i| {
            let bits: Vec<u8> = (0..elems as u64)
                .flat_map(|j| {
                    let x = (j ^ (i as u64) << 32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    f32::from_bits(((x >> 33) as u32 & 0x3fff_ffff) | 0x3000_0000).to_le_bytes()
                })
                .collect();
            (format!("t{i:03}"), bits)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(Dtype::F32, vec![elems], b)
                    .expect("a tensor view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write a safetensors file");
}

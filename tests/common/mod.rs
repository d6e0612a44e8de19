//! Helpers of the facade's end-to-end tests: tensors of the real checkpoint series and
//! their errors. Where the series are, the seeded random source and the f32 conversions come
//! from `strata-testkit` (its `series` module says which copies a run uses and how
//! `STRATA_SHARED_DATA` changes that).

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    missing_docs,
    clippy::panic
)]

use std::path::Path;

use strata::store::{DType, TensorRef};
pub use strata_testkit::noise::{f32_bytes, f32s, seed, Rng};
use strata_testkit::series::read_tensors;
pub use strata_testkit::series::{all_series, committed_root, shared_root, step_files, Series};

/// A tensor with its name.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

impl Named {
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &self.data,
        }
    }
}

/// Every tensor of a safetensors file, sorted by name.
pub fn load_file(path: &Path) -> Vec<Named> {
    read_tensors(path)
        .into_iter()
        .map(|t| Named {
            dtype: DType::from_safetensors_name(&t.dtype)
                .unwrap_or_else(|| panic!("{}: {}: dtype {}", path.display(), t.name, t.dtype)),
            shape: t.shape,
            data: t.data,
            name: t.name,
        })
        .collect()
}

/// Reading checkpoint files of one copy of the series.
pub trait SeriesExt {
    /// The tensors of one checkpoint file, e.g. `dev_ft/bf16/step_000410.safetensors`.
    fn load(&self, rel: &str) -> Vec<Named>;
}

impl SeriesExt for Series {
    fn load(&self, rel: &str) -> Vec<Named> {
        load_file(&self.root.join(rel))
    }
}

/// The committed dev_ft checkpoint at `step` (350, 400, 410, 420 or 430): f32, or bf16.
pub fn committed(step: u64, bf16: bool) -> Vec<Named> {
    let sub = if bf16 { "dev_ft/bf16" } else { "dev_ft" };
    load_file(&committed_root().join(format!("{sub}/step_{step:06}.safetensors")))
}

/// Relative Frobenius error of `got` (bytes of `t`'s float dtype) against `t`'s data.
pub fn rel_error(t: &Named, got: &[u8]) -> f64 {
    let convert = |b| strata::codec::convert::to_f32(t.dtype, b).expect("convert to f32");
    strata_testkit::noise::rel_error(&convert(got), &convert(&t.data))
}

//! Helpers shared by the store's integration tests: checkpoints of the real series as
//! store dtypes, and temp stores. Where the series are, and the noise, come from
//! `strata-testkit` (its `series` module says which copies a run uses and how
//! `STRATA_SHARED_DATA` changes that).

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    missing_docs,
    clippy::panic
)]

use std::path::{Path, PathBuf};

use strata_store::{DType, TensorRef};
pub use strata_testkit::noise::{f32_bytes, noise};
pub use strata_testkit::series::{all_series, series_root, Series};
use strata_testkit::series::{load_checkpoint, load_checkpoints, step_files};

/// One checkpoint file of the real series, with store dtypes.
pub type Ckpt = strata_testkit::series::Ckpt<DType>;

/// Reads every `step_*.safetensors` of `dir` (e.g. "dev_pre" or "dev_ft/bf16") of
/// [`series_root`], by step.
pub fn load_series(dir: &str) -> Vec<Ckpt> {
    load_series_from(&series_root(), dir)
}

/// Reads every `step_*.safetensors` of `root/dir`, by step.
pub fn load_series_from(root: &Path, dir: &str) -> Vec<Ckpt> {
    load_checkpoints(&root.join(dir), DType::from_safetensors_name)
}

/// Reading checkpoints of one copy of the series.
pub trait SeriesExt {
    /// Every checkpoint of `dir` (e.g. "dev_pre" or "dev_ft/bf16"), by step.
    fn load(&self, dir: &str) -> Vec<Ckpt>;
    /// The `i`-th checkpoint (by step) of `dir`, read alone.
    fn load_nth(&self, dir: &str, i: usize) -> Ckpt;
}

impl SeriesExt for Series {
    fn load(&self, dir: &str) -> Vec<Ckpt> {
        load_series_from(&self.root, dir)
    }

    fn load_nth(&self, dir: &str, i: usize) -> Ckpt {
        let files = step_files(&self.root.join(dir));
        let (step, path) = files
            .get(i)
            .unwrap_or_else(|| panic!("{} {dir}: no checkpoint {i}", self.label));
        load_checkpoint(*step, path, DType::from_safetensors_name)
    }
}

/// A fresh temp folder and a store path inside it.
pub fn temp_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("test.strata");
    (dir, path)
}

/// Tensors as `(name, dtype, shape, bytes)` (a [`Ckpt`]'s), as the `(name, TensorRef)` pairs
/// `save_checkpoint` takes.
pub fn tensor_refs(tensors: &[(String, DType, Vec<u64>, Vec<u8>)]) -> Vec<(&str, TensorRef<'_>)> {
    tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.as_str(),
                TensorRef {
                    dtype: *d,
                    shape: s,
                    bytes: b,
                },
            )
        })
        .collect()
}

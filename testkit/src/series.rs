//! The real checkpoint series.
//!
//! Two copies, laid out alike (`series/<dir>/step_NNNNNN.safetensors`, `<dir>` e.g.
//! `dev_ft` or `dev_ft/bf16`):
//!
//! - the **committed** series, `testdata/series` in the repository: a few checkpoints of a
//!   few tensors cut from the shared one (see `testdata/README.md`). Always there.
//! - the **shared** series, `../shared/data/series` beside the repository: every checkpoint
//!   of every tensor. There on CI and on the developers' machines, absent from a fresh clone.
//!
//! Real-data tests run on [`all_series()`]: the committed series, then the shared one when it
//! is present; the first call in a process says which on stderr ("shared series at ...: also
//! running on it" or "shared series absent ...: committed series only").
//!
//! The environment variable `STRATA_SHARED_DATA` overrides where the shared data is looked
//! for: `none` (or empty) pretends it is absent, any other value is the shared data folder
//! (the one holding `series/`). Unset: `../shared/data` beside the repository.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The committed series, `testdata/series` in the repository.
pub fn committed_root() -> PathBuf {
    repo_root().join("testdata/series")
}

/// Where the shared series should be, and whether it is used: `Err(why)` when absent.
fn shared_lookup() -> Result<PathBuf, String> {
    let data = match std::env::var_os("STRATA_SHARED_DATA") {
        Some(v) if v.is_empty() || v == "none" => {
            return Err("(STRATA_SHARED_DATA=none)".to_string())
        }
        Some(v) => PathBuf::from(v),
        None => repo_root().join("../shared/data"),
    };
    let series = data.join("series");
    if series.is_dir() {
        Ok(series.canonicalize().unwrap_or(series))
    } else {
        Err(format!("(no folder {})", series.display()))
    }
}

/// The shared series (`../shared/data/series`), when present.
pub fn shared_root() -> Option<PathBuf> {
    static SAID: Once = Once::new();
    let found = shared_lookup();
    // Written past the test harness's capture, once per process, so that a run says what
    // it ran on.
    SAID.call_once(|| {
        let line = match &found {
            Ok(p) => format!("shared series at {}: also running on it\n", p.display()),
            Err(why) => format!("shared series absent {why}: committed series only\n"),
        };
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
    found.ok()
}

/// The shared series when present, else the committed one: the fullest copy there is.
///
/// # Panics
/// If that folder is missing (the committed series is part of the repository).
pub fn series_root() -> PathBuf {
    let p = shared_root().unwrap_or_else(committed_root);
    assert!(
        p.is_dir(),
        "test data missing: {} is not a folder",
        p.display()
    );
    p
}

/// One copy of the real series.
#[derive(Debug, Clone)]
pub struct Series {
    /// `"committed"` or `"shared"`.
    pub label: &'static str,
    /// The `series` folder.
    pub root: PathBuf,
}

impl Series {
    /// Whether this is the shared copy.
    pub fn is_shared(&self) -> bool {
        self.label == "shared"
    }

    /// The bytes of a file of the series, e.g. `dev_ft/bf16/step_000430.safetensors`.
    ///
    /// # Panics
    /// If the file cannot be read.
    pub fn read(&self, rel: &str) -> Vec<u8> {
        let path = self.root.join(rel);
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }
}

/// The committed series, then the shared one when present.
pub fn all_series() -> Vec<Series> {
    let mut out = vec![Series {
        label: "committed",
        root: committed_root(),
    }];
    if let Some(root) = shared_root() {
        out.push(Series {
            label: "shared",
            root,
        });
    }
    out
}

/// The checkpoint files (`step_NNNNNN.safetensors`) of a series folder, in step order,
/// with their steps.
///
/// # Panics
/// If the folder cannot be read.
pub fn step_files(folder: &Path) -> Vec<(u64, PathBuf)> {
    list_step_files(folder).unwrap_or_else(|e| panic!("{e}"))
}

/// [`step_files`], with the error of a folder that cannot be read (for tools given a folder
/// by their user).
///
/// # Errors
/// The error of listing `folder`, its message naming the folder.
pub fn list_step_files(folder: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let entries = std::fs::read_dir(folder).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot read series {}: {e}", folder.display()),
        )
    })?;
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_name()?.to_str()?;
            let step = name
                .strip_prefix("step_")?
                .strip_suffix(".safetensors")?
                .parse()
                .ok()?;
            Some((step, path))
        })
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_series_is_there_in_step_order() {
        let files = step_files(&committed_root().join("dev_ft/bf16"));
        assert!(files.len() >= 2, "{files:?}");
        assert!(files.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(
            all_series()[0]
                .read("dev_ft/bf16/step_000430.safetensors")
                .len()
                > 8
        );
        let tensors = read_tensors(&files[0].1);
        assert!(tensors.windows(2).all(|w| w[0].name < w[1].name));
        assert!(tensors.iter().all(|t| t.dtype == "BF16"));
    }
}

/// A tensor of a safetensors file, its dtype by safetensors name (`"F32"`, `"BF16"`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTensor {
    /// Tensor name.
    pub name: String,
    /// The safetensors dtype name.
    pub dtype: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// Little-endian bytes.
    pub data: Vec<u8>,
}

/// Every tensor of a safetensors file, sorted by name.
///
/// # Panics
/// If the file cannot be read or parsed, or holds no tensor.
pub fn read_tensors(path: &Path) -> Vec<RawTensor> {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .unwrap_or_else(|e| panic!("{}: not safetensors: {e}", path.display()));
    let mut out: Vec<RawTensor> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| RawTensor {
            dtype: format!("{:?}", view.dtype()),
            shape: view.shape().iter().map(|&d| d as u64).collect(),
            data: view.data().to_vec(),
            name,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!out.is_empty(), "{}: no tensors", path.display());
    out
}

/// One checkpoint file: its step and tensors (name, dtype, shape, bytes), sorted by name;
/// `D` is the dtype type of the crate under test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ckpt<D> {
    /// The step in the file's name.
    pub step: u64,
    /// (name, dtype, shape, bytes), sorted by name.
    pub tensors: Vec<(String, D, Vec<u64>, Vec<u8>)>,
}

impl<D> Ckpt<D> {
    /// Bytes of tensor data.
    pub fn raw_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.3.len() as u64).sum()
    }
}

/// The checkpoint at `path` (step `step`), each dtype name turned into a `D` by `dtype`.
///
/// # Panics
/// If the file cannot be read, or `dtype` knows a tensor's dtype name not.
pub fn load_checkpoint<D>(step: u64, path: &Path, dtype: impl Fn(&str) -> Option<D>) -> Ckpt<D> {
    let tensors = read_tensors(path)
        .into_iter()
        .map(|t| {
            let d = dtype(&t.dtype)
                .unwrap_or_else(|| panic!("unexpected dtype {} in {}", t.dtype, path.display()));
            (t.name, d, t.shape, t.data)
        })
        .collect();
    Ckpt { step, tensors }
}

/// Every checkpoint of a series folder, by step (see [`load_checkpoint`]).
///
/// # Panics
/// If the folder holds no checkpoint, and as [`load_checkpoint`].
pub fn load_checkpoints<D>(folder: &Path, dtype: impl Fn(&str) -> Option<D>) -> Vec<Ckpt<D>> {
    let files = step_files(folder);
    assert!(!files.is_empty(), "no checkpoints in {}", folder.display());
    files
        .iter()
        .map(|(step, path)| load_checkpoint(*step, path, &dtype))
        .collect()
}

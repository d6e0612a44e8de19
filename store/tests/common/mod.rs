//! Helpers shared by the integration tests: the real checkpoint series and temp stores.
//!
//! # Real checkpoint series
//!
//! Two copies, laid out alike (`series/<dir>/step_NNNNNN.safetensors`, `<dir>` e.g.
//! `dev_pre` or `dev_ft/bf16`):
//!
//! - the **committed** series, `testdata/series` in the repository: a few checkpoints of a
//!   few tensors cut from the shared one (see `testdata/README.md`). Always there.
//! - the **shared** series, `../shared/data/series` beside the repository: every checkpoint
//!   of every tensor. There on CI and on the developers' machines, absent from a fresh clone.
//!
//! Real-data tests run on [`all_series()`]: the committed series, then the shared one when it
//! is present; the first call says which on stderr ("shared series at ...: also running on
//! it" or "shared series absent ...: committed series only"). Tests that take one series
//! ([`series_root`], [`load_series`]) get the shared one when present, else the committed one.
//!
//! The environment variable `STRATA_SHARED_DATA` overrides where the shared data is looked
//! for: `none` (or empty) pretends it is absent, any other value is the shared data folder
//! (the one holding `series/`). Unset: `../shared/data` beside the repository.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Once;

use safetensors::{Dtype, SafeTensors};
use strata_store::DType;

/// The committed series, `testdata/series` in the repository.
pub fn committed_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/series"))
}

/// Where the shared series should be, and whether it is used: `Err(why)` when absent.
fn shared_lookup() -> Result<PathBuf, String> {
    let data = match std::env::var_os("STRATA_SHARED_DATA") {
        Some(v) if v.is_empty() || v == "none" => {
            return Err("(STRATA_SHARED_DATA=none)".to_string())
        }
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")),
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
    // Written past the test harness's capture, once per test binary, so that a run says
    // what it ran on.
    SAID.call_once(|| {
        let line = match &found {
            Ok(p) => format!("shared series at {}: also running on it\n", p.display()),
            Err(why) => format!("shared series absent {why}: committed series only\n"),
        };
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
    found.ok()
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
    pub fn is_shared(&self) -> bool {
        self.label == "shared"
    }

    /// Every checkpoint of `dir` (e.g. "dev_pre" or "dev_ft/bf16"), by step.
    pub fn load(&self, dir: &str) -> Vec<Ckpt> {
        load_series_from(&self.root, dir)
    }

    /// The `i`-th checkpoint (by step) of `dir`, read alone.
    pub fn load_nth(&self, dir: &str, i: usize) -> Ckpt {
        let files = series_files(&self.root.join(dir));
        let f = files
            .get(i)
            .unwrap_or_else(|| panic!("{} {dir}: no checkpoint {i}", self.label));
        load_file(f)
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

/// The folder of real checkpoint series for tests that take one: the shared series when
/// present, else the committed one.
pub fn series_root() -> PathBuf {
    let p = shared_root().unwrap_or_else(committed_root);
    assert!(
        p.is_dir(),
        "test data missing: {} is not a folder",
        p.display()
    );
    p
}

/// One checkpoint file: its step and tensors (name, dtype, shape, bytes), sorted by name.
pub struct Ckpt {
    pub step: u64,
    pub tensors: Vec<(String, DType, Vec<u64>, Vec<u8>)>,
}

impl Ckpt {
    pub fn raw_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.3.len() as u64).sum()
    }
}

/// Reads every `step_*.safetensors` of `dir` (e.g. "dev_pre" or "dev_ft/bf16") of
/// [`series_root`], by step.
pub fn load_series(dir: &str) -> Vec<Ckpt> {
    load_series_from(&series_root(), dir)
}

/// Reads every `step_*.safetensors` of `root/dir`, by step.
pub fn load_series_from(root: &Path, dir: &str) -> Vec<Ckpt> {
    series_files(&root.join(dir))
        .iter()
        .map(|f| load_file(f))
        .collect()
}

/// The `*.safetensors` files of a folder, sorted (by step: the names are zero-padded).
fn series_files(folder: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(folder)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", folder.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no safetensors files in {}",
        folder.display()
    );
    files
}

fn load_file(path: &Path) -> Ckpt {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("file name");
    let step: u64 = stem
        .trim_start_matches("step_")
        .parse()
        .unwrap_or_else(|_| panic!("unexpected file name {}", path.display()));
    let bytes = std::fs::read(path).expect("read safetensors");
    let st = SafeTensors::deserialize(&bytes).expect("parse safetensors");
    let mut tensors: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let dtype = match view.dtype() {
                Dtype::F32 => DType::F32,
                Dtype::BF16 => DType::BF16,
                Dtype::F16 => DType::F16,
                other => panic!("unexpected dtype {other:?} in {}", path.display()),
            };
            let shape = view.shape().iter().map(|&d| d as u64).collect();
            (name, dtype, shape, view.data().to_vec())
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    Ckpt { step, tensors }
}

/// A fresh temp folder and a store path inside it.
pub fn temp_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("test.strata");
    (dir, path)
}

/// Little-endian f32 bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Deterministic pseudo-random f32s (xorshift).
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
        })
        .collect()
}

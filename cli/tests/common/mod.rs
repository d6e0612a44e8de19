//! Helpers shared by the tests that run `strata`: the real checkpoint series, and small f32
//! tensors. (A copy of what they need from `store/tests/common/mod.rs`.)
//!
//! The real series: the shared one (`../shared/data/series` beside the repository, every
//! checkpoint of every tensor) when present, else the committed one (`testdata/series`, a
//! few checkpoints of a few tensors cut from it; see `testdata/README.md`). The first call
//! says which on stderr. `STRATA_SHARED_DATA` overrides where the shared data is looked for:
//! `none` (or empty) pretends it is absent, any other value is the shared data folder (the
//! one holding `series/`).

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
            Ok(p) => format!("shared series at {}: running on it\n", p.display()),
            Err(why) => format!("shared series absent {why}: committed series only\n"),
        };
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
    found.ok()
}

/// The folder of real checkpoint series: the shared series when present, else the
/// committed one.
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

/// Reads every `step_*.safetensors` of `dir` (e.g. "dev_pre" or "dev_ft/bf16"), by step.
pub fn load_series(dir: &str) -> Vec<Ckpt> {
    let folder = series_root().join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
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
    files.iter().map(|f| load_file(f)).collect()
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

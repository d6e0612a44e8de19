//! Helpers of the facade's end-to-end tests: the real checkpoint series, a seeded random
//! source, and small conversions.
//!
//! # Real checkpoint series
//!
//! Two copies, laid out alike (`series/<dir>/step_NNNNNN.safetensors`, `<dir>` e.g.
//! `dev_ft` or `dev_ft/bf16`):
//!
//! - the **committed** series, `testdata/series` in the repository: a few checkpoints of a
//!   few tensors cut from the shared one (see `testdata/README.md`). Always there.
//! - the **shared** series, `../shared/data/series` beside the repository: every checkpoint
//!   of every tensor. There on CI and on the developers' machines, absent from a fresh clone.
//!
//! Tests that compare with real data run on [`all_series()`]: the committed series, then the
//! shared one when it is present; the first call says which on stderr ("shared series at
//! ...: also running on it" or "shared series absent ...: committed series only").
//!
//! The environment variable `STRATA_SHARED_DATA` overrides where the shared data is looked
//! for: `none` (or empty) pretends it is absent, any other value is the shared data folder
//! (the one holding `series/`). Unset: `../shared/data` beside the repository.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Once;

use safetensors::SafeTensors;
use strata::store::{DType, TensorRef};

/// The committed series, `testdata/series` in the repository.
pub fn committed_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/series"))
}

/// Where the shared series should be, and whether it is used: `Err(why)` when absent.
fn shared_lookup() -> Result<PathBuf, String> {
    let data = match std::env::var_os("STRATA_SHARED_DATA") {
        Some(v) if v.is_empty() || v == "none" => {
            return Err("(STRATA_SHARED_DATA=none)".to_string())
        }
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")),
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

    /// The tensors of one checkpoint file, e.g. `dev_ft/bf16/step_000410.safetensors`.
    pub fn load(&self, rel: &str) -> Vec<Named> {
        load_file(&self.root.join(rel))
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
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes)
        .unwrap_or_else(|e| panic!("{}: not safetensors: {e}", path.display()));
    let mut out: Vec<Named> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| Named {
            dtype: DType::from_safetensors_name(&format!("{:?}", view.dtype()))
                .unwrap_or_else(|| panic!("{}: {name}: dtype {:?}", path.display(), view.dtype())),
            shape: view.shape().iter().map(|&d| d as u64).collect(),
            data: view.data().to_vec(),
            name,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!out.is_empty(), "{}: no tensors", path.display());
    out
}

/// The committed dev_ft checkpoint at `step` (350, 400, 410, 420 or 430): f32, or bf16.
pub fn committed(step: u64, bf16: bool) -> Vec<Named> {
    let sub = if bf16 { "dev_ft/bf16" } else { "dev_ft" };
    load_file(&committed_root().join(format!("{sub}/step_{step:06}.safetensors")))
}

/// Relative Frobenius error of `got` (bytes of `t`'s float dtype) against `t`'s data.
pub fn rel_error(t: &Named, got: &[u8]) -> f64 {
    let convert = |b| strata::codec::convert::to_f32(t.dtype, b).expect("convert to f32");
    let (a, b) = (convert(got), convert(&t.data));
    let e: f64 = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| f64::from(x - y).powi(2))
        .sum();
    let n: f64 = b.iter().map(|&y| f64::from(y).powi(2)).sum();
    (e / n.max(f64::MIN_POSITIVE)).sqrt()
}

/// xorshift64: deterministic pseudo-random numbers from a seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A seed: `STRATA_TEST_SEED` when set (to replay a run), else from the clock. Printed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("STRATA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (replay with STRATA_TEST_SEED={seed})");
    seed
}

/// Little-endian f32 bytes as values.
pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Values as little-endian f32 bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

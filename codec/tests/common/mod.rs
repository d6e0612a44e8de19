//! Helpers of the real-data tests: the checkpoint series and float conversion.
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
//! Real-data tests run on [`all_series()`]: the committed series, then the shared one when it
//! is present; the first call says which on stderr ("shared series at ...: also running on
//! it" or "shared series absent ...: committed series only").
//!
//! The environment variable `STRATA_SHARED_DATA` overrides where the shared data is looked
//! for: `none` (or empty) pretends it is absent, any other value is the shared data folder
//! (the one holding `series/`). Unset: `../shared/data` beside the repository.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::panic)]

use std::io::Write;
use std::path::PathBuf;
use std::sync::Once;

use strata_codec::DType;

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

    /// The bytes of a file of the series, e.g. `dev_ft/bf16/step_000430.safetensors`.
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

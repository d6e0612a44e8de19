//! Single-byte flips in a store file's low-entropy pages, and what each does to a reader:
//! shared by `tests/damaged_pages.rs` (a seeded sample, which must hold no silent damage and
//! no panic) and `examples/flip-bench.rs` (the README's figures).
//!
//! The store is the committed bf16 fine-tuning series (`testdata/series/dev_ft/bf16`, 5
//! checkpoints) imported and compacted. Its pages of segment bytes are near noise; the pages
//! that are mostly zeros are redb's own (B-tree branches and leaves, the allocator's state,
//! the header) and Strata's small records, where a flip reaches redb's parsing, which trusts
//! its pages. Each flip XORs one random byte of one such page with a random non-zero value;
//! the damaged file is then opened, verified, listed, every checkpoint exported and compared
//! with the undamaged export, a checkpoint saved and read back, and the store dropped (redb
//! commits as it closes), all in a thread that must end within [`JUDGE_LIMIT`]. A panic that
//! redb raises in a commit must not abort the process (its drops made safe while unwinding:
//! `vendor/redb`). The outcome is one of:
//!
//! - **caught**: an open, a listing, `verify` (an error, or issues in its report) or an export
//!   said the file is damaged;
//! - **harmless**: everything opened, verified and exported bit-exact, and the save read back;
//! - **silent**: no error, and a checkpoint exported other bytes or vanished from the list, or
//!   the save read back other bytes;
//! - **panic**: a panic escaped a `Store` method (or the drop);
//! - **hang**: the reads did not end within [`JUDGE_LIMIT`].

#![allow(dead_code, clippy::panic)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use strata::store::{DType, Store, TensorRef};
use strata_testkit::noise::Rng;
use strata_testkit::series::{committed_root, step_files};

/// The most one damaged file's reads may take.
pub(crate) const JUDGE_LIMIT: Duration = Duration::from_secs(30);
/// The step of the checkpoint saved after the reads (none of the series' steps).
const PROBE_STEP: u64 = 1 << 40;
/// Pages of the file: redb's default page size.
const PAGE: usize = 4096;

/// What one flip did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Reported as damage, with the first error.
    Caught(String),
    /// Read back whole and exact.
    Harmless,
    /// Wrong or missing data without an error.
    Silent(String),
    /// A panic that escaped the store.
    Panic(String),
    /// The reads did not end.
    Hang,
}

/// The outcomes of many flips, counted.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    /// Flips reported as damage.
    pub(crate) caught: usize,
    /// Flips that changed nothing a reader sees.
    pub(crate) harmless: usize,
    /// Flips that gave wrong data without an error (each with its description).
    pub(crate) silent: Vec<String>,
    /// Flips that made a store method panic.
    pub(crate) panics: Vec<String>,
    /// Flips whose reads did not end.
    pub(crate) hangs: usize,
    /// Of the caught ones, how many the database engine's own checks (a contained panic,
    /// `Corruption::Engine` or `OpenError::Damaged`) reported.
    pub(crate) caught_by_engine: usize,
}

impl Tally {
    /// Counts one outcome (`what` says which flip).
    pub(crate) fn add(&mut self, what: &str, o: Outcome) {
        match o {
            Outcome::Caught(e) => {
                self.caught += 1;
                if e.contains("database engine") || e.contains("is damaged") {
                    self.caught_by_engine += 1;
                }
            }
            Outcome::Harmless => self.harmless += 1,
            Outcome::Silent(s) => self.silent.push(format!("{what}: {s}")),
            Outcome::Panic(p) => self.panics.push(format!("{what}: {p}")),
            Outcome::Hang => self.hangs += 1,
        }
    }
}

/// The undamaged store: its bytes and each checkpoint's export.
#[derive(Debug)]
pub(crate) struct Base {
    /// The compacted store file's bytes.
    pub(crate) bytes: Vec<u8>,
    /// Each checkpoint's step and safetensors export.
    pub(crate) exports: Vec<(u64, Vec<u8>)>,
    /// Offsets of the low-entropy pages.
    pub(crate) pages: Vec<usize>,
}

/// Imports the committed `dev_ft/bf16` series into `dir/base.strata`, compacts it, and
/// exports every checkpoint.
pub(crate) fn base(dir: &Path) -> Base {
    let path = dir.join("base.strata");
    let series = committed_root().join("dev_ft/bf16");
    let files = step_files(&series);
    let mut store = Store::open(&path).unwrap_or_else(|e| panic!("create: {e}"));
    for (step, file) in &files {
        store
            .import_safetensors(file, *step)
            .unwrap_or_else(|e| panic!("import {}: {e}", file.display()));
    }
    store.compact().unwrap_or_else(|e| panic!("compact: {e}"));
    let exports = files
        .iter()
        .map(|(step, _)| {
            let out = dir.join(format!("base-{step}.safetensors"));
            store
                .export_safetensors(*step, &out)
                .unwrap_or_else(|e| panic!("export {step}: {e}"));
            (
                *step,
                std::fs::read(&out).unwrap_or_else(|e| panic!("read export: {e}")),
            )
        })
        .collect();
    drop(store);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read the store: {e}"));
    let pages = low_entropy_pages(&bytes);
    Base {
        bytes,
        exports,
        pages,
    }
}

/// Offsets of the pages at least half of whose bytes are zero.
pub(crate) fn low_entropy_pages(bytes: &[u8]) -> Vec<usize> {
    bytes
        .chunks(PAGE)
        .enumerate()
        .filter(|(_, p)| p.iter().filter(|&&b| b == 0).count() * 2 >= p.len())
        .map(|(i, _)| i * PAGE)
        .collect()
}

/// A copy of `base` with one byte of one low-entropy page flipped; says where.
pub(crate) fn flip(base: &Base, rng: &mut Rng) -> (Vec<u8>, String) {
    let mut bytes = base.bytes.clone();
    let page = base.pages[(rng.next_u64() % base.pages.len() as u64) as usize];
    let len = PAGE.min(bytes.len() - page);
    let at = page + (rng.next_u64() % len as u64) as usize;
    let x = (rng.next_u64() % 255 + 1) as u8;
    bytes[at] ^= x;
    (bytes, format!("byte {at} ^= {x:#04x}"))
}

/// Writes `bytes` to `path` and judges what a reader gets, within [`JUDGE_LIMIT`].
pub(crate) fn judge(path: &Path, bytes: &[u8], base: &Base, scratch: &Path) -> Outcome {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let (tx, rx) = mpsc::channel();
    let (path, scratch) = (path.to_path_buf(), scratch.to_path_buf());
    let exports = base.exports.clone();
    std::thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(|| read_all(&path, &exports, &scratch)));
        let _ = tx.send(r.unwrap_or_else(|p| {
            Outcome::Panic(
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
            )
        }));
    });
    rx.recv_timeout(JUDGE_LIMIT).unwrap_or(Outcome::Hang)
}

/// Every read a user would do after the damage, in order; the first error ends it.
fn read_all(path: &Path, exports: &[(u64, Vec<u8>)], scratch: &Path) -> Outcome {
    let store = match Store::open(path) {
        Ok(s) => s,
        Err(e) => return Outcome::Caught(e.to_string()),
    };
    let outcome = (|| {
        match store.verify() {
            Ok(r) if r.is_ok() => {}
            Ok(r) => return Outcome::Caught(format!("verify: {:?}", r.issues.first())),
            Err(e) => return Outcome::Caught(e.to_string()),
        }
        let steps = match store.checkpoints() {
            Ok(s) => s,
            Err(e) => return Outcome::Caught(e.to_string()),
        };
        if let Err(e) = store.tensors() {
            return Outcome::Caught(e.to_string());
        }
        for (step, want) in exports {
            if !steps.contains(step) {
                return Outcome::Silent(format!("checkpoint {step} is no longer listed"));
            }
            let out = scratch.join("flip-export.safetensors");
            if let Err(e) = store.export_safetensors(*step, &out) {
                return Outcome::Caught(e.to_string());
            }
            let got = std::fs::read(&out).unwrap_or_default();
            if got != *want {
                return Outcome::Silent(format!("checkpoint {step} exports other bytes"));
            }
        }
        Outcome::Harmless
    })();
    let outcome = save_after(&store, outcome);
    drop(store);
    outcome
}

/// A save after the reads, whatever they found: a user may go on training on a store that
/// reported damage. A commit walks redb's freed-page and allocator tables, which no read
/// touches. The save may fail (the damage is then caught) or succeed, and then what it
/// wrote must read back exact.
fn save_after(store: &Store, outcome: Outcome) -> Outcome {
    let bytes: Vec<u8> = (0..64u8).collect();
    let probe = TensorRef {
        dtype: DType::F32,
        shape: &[16],
        bytes: &bytes,
    };
    let saved = store
        .save_checkpoint(PROBE_STEP, &[("flip.probe", probe)], "")
        .and_then(|()| store.get("flip.probe", PROBE_STEP));
    match (outcome, saved) {
        (Outcome::Harmless, Err(e)) => Outcome::Caught(format!("a save: {e}")),
        (Outcome::Harmless, Ok(t)) if t.data != bytes => {
            Outcome::Silent("a save read back other bytes".to_string())
        }
        (outcome, _) => outcome,
    }
}

//! Crash safety: the `strata` binary importing the dev_pre f32 series is killed with SIGKILL at
//! random moments (seeded); after each kill the store opens, verifies, and every checkpoint it
//! lists is whole and bit-exact. Imports resume with `--skip-existing`, so kills also land on
//! a store that already holds checkpoints (and can land in the final compaction).

// The checking helpers fail the test by panicking, as assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{load_series, series_root, Ckpt};
use strata_store::{OpenError, Store, StoreError};

/// Kills per run.
const ITERATIONS: usize = 20;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn spawn_import(store: &Path, src: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["import", "--quiet", "--skip-existing"])
        .arg(store)
        .arg(src)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn strata")
}

/// Opens the store, retrying for up to 5 s while a killed process's lock is still held.
fn open_retrying(path: &Path) -> Store {
    let in_use = |e: &StoreError| matches!(e, StoreError::Open(OpenError::InUse { .. }));
    strata_testkit::retrying(Duration::from_secs(5), || Store::open(path), in_use)
        .unwrap_or_else(|e| panic!("store does not open after a kill: {e}"))
}

/// Everything a reader can see is whole and exact. Returns the checkpoint steps.
fn check(path: &Path, series: &[Ckpt]) -> Vec<u64> {
    let store = open_retrying(path);
    let report = store.verify().expect("verify runs");
    assert!(report.is_ok(), "verify after a kill: {:?}", report.issues);
    let steps = store.checkpoints().expect("checkpoints");
    let listed: BTreeSet<u64> = steps.iter().copied().collect();
    for &step in &steps {
        let src = series
            .iter()
            .find(|c| c.step == step)
            .unwrap_or_else(|| panic!("checkpoint {step} is not a source step"));
        let cp = store.load_checkpoint(step).expect("load checkpoint");
        let mut got: Vec<_> = cp.tensors.iter().collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got.len(), src.tensors.len(), "checkpoint {step} is partial");
        for ((name, t), (n, d, s, b)) in got.iter().zip(&src.tensors) {
            assert_eq!(name, n, "step {step}");
            assert_eq!((t.dtype, &t.shape), (*d, s), "{name} step {step}");
            assert!(t.data == *b, "{name} step {step}: bytes differ");
        }
    }
    // No version outside the listed checkpoints: nothing of a torn checkpoint is visible.
    for name in store.tensors().expect("tensors") {
        for v in store.versions(&name).expect("versions") {
            assert!(
                listed.contains(&v.step),
                "{name} has a version at step {} outside any checkpoint",
                v.step
            );
        }
    }
    steps
}

#[test]
fn sigkill_during_import_never_tears_a_checkpoint() {
    let series = load_series("dev_pre");
    let src = series_root().join("dev_pre");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("crash.strata");

    // One uninterrupted import sets the range of kill delays.
    let t = Instant::now();
    let status = spawn_import(&path, &src).wait().expect("wait");
    assert!(status.success(), "uninterrupted import failed");
    let full = t.elapsed();
    assert_eq!(check(&path, &series).len(), series.len());
    std::fs::remove_file(&path).expect("remove");
    eprintln!("uninterrupted import: {full:?}");

    let mut rng = Rng(0x00C0_FFEE_D00D_F00D);
    let (mut killed, mut finished, mut restarts) = (0, 0, 0);
    // Kill delays are drawn below the time an import takes. That time varies with the load of a
    // shared machine: an import that finishes before its kill lowers the range to its delay, and
    // the loop runs until half the planned kills landed (at most three times as many runs).
    let mut full_ms = (full.as_millis() as u64).max(10);
    let test_start = Instant::now();
    let mut i = 0;
    while i < ITERATIONS || (killed < ITERATIONS / 2 && i < 3 * ITERATIONS) {
        i += 1;
        let delay_ms = 5 + rng.next() % full_ms;
        let delay = Duration::from_millis(delay_ms);
        let mut child = spawn_import(&path, &src);
        std::thread::sleep(delay);
        if child.try_wait().expect("try_wait").is_some() {
            finished += 1;
            full_ms = delay_ms.max(10);
        } else {
            child.kill().expect("SIGKILL");
            killed += 1;
        }
        child.wait().expect("wait");
        let steps = check(&path, &series);
        eprintln!(
            "kill {i}: after {delay:?}, {} checkpoint(s) visible",
            steps.len()
        );
        // Start over when complete (and now and then anyway), so kills land on every phase.
        if steps.len() == series.len() || rng.next().is_multiple_of(4) {
            std::fs::remove_file(&path).expect("remove");
            restarts += 1;
        }
    }
    eprintln!(
        "{killed} killed, {finished} finished before the kill, {restarts} restarts, {:?}",
        test_start.elapsed()
    );
    assert!(killed >= ITERATIONS / 2, "too few kills landed: {killed}");
}

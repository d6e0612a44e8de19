//! Aging ([`Store::age`], ADR 0020) killed with SIGKILL at random moments: `age` rewrites
//! every old checkpoint in one write transaction, so after any kill the store opens,
//! verifies, and holds either every aged-eligible checkpoint aged or none, never a mix.
//!
//! The committed series `dev_ft/bf16` (5 checkpoints) is imported once; each round ages a
//! fresh copy of that store in a child process (this test binary run again with
//! `STRATA_AGING_STORE` set: the test `aging_process`, which does nothing otherwise) and
//! kills it after a random delay. Two uninterrupted children first measure how long a pass
//! takes (process start, open, aging, compaction, exit; the slower one counts) and give the
//! aged bytes to expect. The delays are spread over 1.5 times that pass, `1.5 · pass · u²`
//! with one `u` at random in each of [`ROUNDS`] equal slices of `[0, 1)` (denser early,
//! where the child opens the store and ages), so that kills land before, during and after
//! the aging, and rounds end both aged and exact (asserted). After each kill, the store is
//! read read-only (as the killed writer left it) and then by a writer (after its repair):
//! `verify` finds no issue, and either
//! - **aged**: every tensor of two or more dimensions of the checkpoints before the last 2
//!   reads back `Fidelity::Aged` within the 1e-2 budget, with the bytes of the uninterrupted
//!   pass, and everything else (1-D tensors, the last 2 checkpoints) exact; or
//! - **exact**: every tensor of every checkpoint reads back bit-exact, `Fidelity::Exact`,
//!   as the safetensors files hold it.
//!
//! The child prints `aging: opened`, `aging: aged` and `aging: done` as it goes, which the
//! test checks against what it finds: a child that printed `aged` left an aged store, one
//! that did not print `opened` an exact one. Delays come from a seed printed by the test
//! (`STRATA_TEST_SEED` replays one).

// Checks fail the test by panicking, as assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{all_series, Named, Rng};
use strata::store::{AgePolicy, Fidelity, OpenError, Store, StoreError};
use strata_testkit::child::Spawned;

/// Kill rounds per run of the test.
const ROUNDS: usize = 20;
/// Checkpoints kept exact: the last 2.
const KEEP_EXACT_LAST: usize = 2;
/// Relative error budget of an aged block.
const BUDGET: f64 = 1e-2;
/// The store path; set, this binary is the aging process.
const AGING_ENV: &str = "STRATA_AGING_STORE";
/// The aging process's lines start with this (the harness may print on the same line before).
const MARK: &str = "aging: ";

fn policy() -> AgePolicy {
    AgePolicy {
        keep_exact_last: KEEP_EXACT_LAST,
        budget: BUDGET,
        ..AgePolicy::default()
    }
}

/// This binary as the aging process, when [`AGING_ENV`] is set; nothing otherwise. Prints
/// `opened`, `aged` when `age` returns and `done` when the store is closed, each with the
/// microseconds since it started.
#[test]
fn aging_process() {
    let Some(path) = std::env::var_os(AGING_ENV) else {
        return;
    };
    let t = Instant::now();
    let mut store = Store::open(&path).expect("open the store to age");
    println!("{MARK}opened {}", t.elapsed().as_micros());
    let report = store.age(&policy()).expect("age");
    println!(
        "{MARK}aged {} {} {}",
        t.elapsed().as_micros(),
        report.versions_aged,
        report.compacted
    );
    drop(store);
    println!("{MARK}done {}", t.elapsed().as_micros());
}

/// What an aging process printed: microseconds since its start at each point.
#[derive(Debug, Default, Clone, Copy)]
struct Printed {
    opened: Option<u64>,
    aged: Option<u64>,
    done: Option<u64>,
}

fn parse(lines: &[String]) -> Printed {
    let mut p = Printed::default();
    for line in lines {
        let Some(at) = line.find(MARK) else { continue };
        let mut words = line[at + MARK.len()..].split(' ');
        let what = words.next().unwrap_or_default();
        let us = words.next().and_then(|w| w.parse().ok());
        match what {
            "opened" => p.opened = us,
            "aged" => p.aged = us,
            "done" => p.done = us,
            _ => {}
        }
    }
    p
}

/// Starts this test binary again as the aging process.
fn spawn_ager(path: &Path) -> Spawned {
    Spawned::test_process("aging_process", AGING_ENV, path)
}

/// Opens the store, retrying for up to 5 s while a killed process's lock is still held.
fn open_retrying(path: &Path) -> Store {
    let in_use = |e: &StoreError| matches!(e, StoreError::Open(OpenError::InUse { .. }));
    strata_testkit::retrying(Duration::from_secs(5), || Store::open(path), in_use)
        .unwrap_or_else(|e| panic!("store does not open after a kill: {e}"))
}

/// The committed series' checkpoints: step, file, tensors.
fn series() -> Vec<(u64, PathBuf, Vec<Named>)> {
    let dir = all_series()[0].root.join("dev_ft/bf16");
    let mut out: Vec<(u64, PathBuf, Vec<Named>)> = std::fs::read_dir(&dir)
        .expect("list the series folder")
        .filter_map(|e| {
            let p = e.ok()?.path();
            let stem = p.file_name()?.to_str()?.strip_suffix(".safetensors")?;
            let step = stem.strip_prefix("step_")?.parse().ok()?;
            Some((step, p))
        })
        .map(|(s, p)| {
            let t = common::load_file(&p);
            (s, p, t)
        })
        .collect();
    out.sort_by_key(|c| c.0);
    out
}

/// What a store holds after a kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Exact,
    Aged,
}

/// Bytes of every aged tensor version, by (name, step).
type AgedBytes = BTreeMap<(String, u64), Vec<u8>>;

/// Reads every tensor of every checkpoint and says whether the store is wholly exact or
/// wholly aged; panics on anything else. `reference`: the aged bytes of an uninterrupted
/// pass, which an aged store must hold (`None` while reading that pass itself). Returns the
/// state and the aged bytes read.
fn classify(
    store: &Store,
    cps: &[(u64, PathBuf, Vec<Named>)],
    reference: Option<&AgedBytes>,
    label: &str,
) -> (State, AgedBytes) {
    let steps: Vec<u64> = cps.iter().map(|c| c.0).collect();
    assert_eq!(
        store.checkpoints().expect("checkpoints"),
        steps,
        "{label}: checkpoints"
    );
    let eligible = cps.len() - KEEP_EXACT_LAST;
    let (mut aged, mut exact) = (Vec::new(), Vec::new());
    let mut bytes = AgedBytes::new();
    for (i, (step, _, tensors)) in cps.iter().enumerate() {
        let cp = store.load_checkpoint(*step).expect("load a checkpoint");
        assert_eq!(cp.tensors.len(), tensors.len(), "{label}: step {step}");
        for t in tensors {
            let at = format!("{label}: {} @ {step}", t.name);
            let got = store.get(&t.name, *step).expect("read a version");
            assert_eq!((got.dtype, &got.shape), (t.dtype, &t.shape), "{at}");
            let in_cp = cp.tensors.iter().find(|(n, _)| *n == t.name);
            assert!(
                in_cp.is_some_and(|(_, c)| c.data == got.data && c.fidelity == got.fidelity),
                "{at}: the checkpoint's load and get differ"
            );
            // Exact where the policy keeps it so, whatever the state.
            if i >= eligible || t.shape.len() < 2 {
                assert_eq!(got.fidelity, Fidelity::Exact, "{at}");
                assert!(got.data == t.data, "{at}: not bit-exact");
                continue;
            }
            match got.fidelity {
                Fidelity::Exact => {
                    assert!(got.data == t.data, "{at}: exact but not bit-exact");
                    exact.push(at);
                }
                Fidelity::Aged { rel_error: e } => {
                    assert!(e <= BUDGET, "{at}: reported error {e}");
                    let measured = common::rel_error(t, &got.data);
                    assert!(
                        measured <= e * (1.0 + 1e-4) + 1e-9,
                        "{at}: measured error {measured}, reported {e}"
                    );
                    if let Some(r) = reference {
                        let want = r.get(&(t.name.clone(), *step));
                        assert!(
                            want == Some(&got.data),
                            "{at}: aged bytes differ from an uninterrupted pass's"
                        );
                    }
                    aged.push(at.clone());
                    bytes.insert((t.name.clone(), *step), got.data);
                }
                other => panic!("{at}: fidelity {other:?}"),
            }
        }
    }
    assert!(
        aged.is_empty() || exact.is_empty(),
        "{label}: half aged: {} aged versions, {} exact ones, e.g. {} and {}",
        aged.len(),
        exact.len(),
        aged[0],
        exact[0]
    );
    let state = if aged.is_empty() {
        State::Exact
    } else {
        State::Aged
    };
    (state, bytes)
}

/// Checks a store after a kill: read-only as the killed writer left it, then by a writer
/// (which repairs it), each with `verify`; returns the state both saw.
fn check(
    path: &Path,
    cps: &[(u64, PathBuf, Vec<Named>)],
    reference: &AgedBytes,
    label: &str,
) -> State {
    let ro = Store::open_read_only(path).expect("read-only open after a kill");
    let (seen, _) = classify(&ro, cps, Some(reference), &format!("{label} (read-only)"));
    drop(ro);
    let store = open_retrying(path);
    let report = store.verify().expect("verify runs");
    assert!(report.is_ok(), "{label}: verify: {:?}", report.issues);
    let (state, _) = classify(&store, cps, Some(reference), label);
    assert_eq!(seen, state, "{label}: a reader and the writer disagree");
    state
}

#[test]
fn aging_killed_at_random_points_is_all_or_nothing() {
    let started = Instant::now();
    let cps = series();
    assert!(cps.len() > KEEP_EXACT_LAST + 1, "{} checkpoints", cps.len());
    let dir = tempfile::tempdir().expect("temp dir");
    let exact_copy = dir.path().join("exact.strata");
    {
        let store = Store::open(&exact_copy).expect("create the store");
        for (step, file, _) in &cps {
            store.import_safetensors(file, *step).expect("import");
        }
    }
    let path = dir.path().join("aging.strata");

    // Uninterrupted passes: the aged state every killed one must reach or not start, and
    // how long a pass takes in the child (the slower of two, from spawn to exit).
    let mut full = Duration::ZERO;
    let mut reference = None;
    for _ in 0..2 {
        std::fs::copy(&exact_copy, &path).expect("copy the store");
        let t = Instant::now();
        let run = spawn_ager(&path).wait();
        let (ok, p) = (run.success, parse(&run.lines));
        full = full.max(t.elapsed());
        assert!(ok && p.done.is_some(), "uninterrupted aging failed: {p:?}");
        eprintln!(
            "uninterrupted: {:?} from spawn to exit; in the child, opened at {:?} us, \
             aged (age returned) at {:?} us, closed at {:?} us",
            t.elapsed(),
            p.opened,
            p.aged,
            p.done
        );
        let store = Store::open(&path).expect("open the aged store");
        assert!(store.verify().expect("verify").is_ok());
        let (state, bytes) = classify(&store, &cps, reference.as_ref(), "uninterrupted");
        assert_eq!(state, State::Aged, "an uninterrupted pass aged nothing");
        reference.get_or_insert(bytes);
    }
    let reference = reference.expect("a reference pass");

    let mut rng = Rng::new(common::seed("aging_kill"));
    let window = full.as_micros() as u64 * 3 / 2;
    let (mut n_aged, mut n_exact) = (0, 0);
    let (mut before_open, mut while_aging, mut after_age, mut ended) = (0, 0, 0, 0);
    for round in 0..ROUNDS {
        // `window · u²`, `u` at random in the round's slice of ROUNDS equal slices of
        // [0, 1): denser early, where the child opens the store (a few ms) and ages (the
        // write transaction, then compaction).
        let u = (round as f64 + rng.unit()) / ROUNDS as f64;
        let delay = Duration::from_micros((window as f64 * u * u) as u64);
        std::fs::copy(&exact_copy, &path).expect("copy the store");
        let ager = spawn_ager(&path);
        std::thread::sleep(delay);
        let run = ager.kill();
        let (killed, ok, p) = (run.killed, run.success, parse(&run.lines));
        let label = format!("round {round} ({delay:?})");
        let state = check(&path, &cps, &reference, &label);
        let moment = if !killed {
            assert!(ok && p.done.is_some(), "{label}: the child failed: {p:?}");
            ended += 1;
            "ended before the kill"
        } else if p.opened.is_none() {
            before_open += 1;
            "killed before aging"
        } else if p.aged.is_none() {
            while_aging += 1;
            "killed while aging"
        } else {
            after_age += 1;
            "killed after age returned"
        };
        eprintln!("{label}: {moment}, store {state:?}");
        // What the child printed bounds what the store holds.
        if p.aged.is_some() {
            assert_eq!(state, State::Aged, "{label}: age returned, store not aged");
        }
        if p.opened.is_none() {
            assert_eq!(state, State::Exact, "{label}: aged before the store opened");
        }
        match state {
            State::Aged => n_aged += 1,
            State::Exact => n_exact += 1,
        }
    }
    eprintln!(
        "{ROUNDS} rounds: {n_aged} ended aged, {n_exact} exact; killed {before_open} before the \
         store opened, {while_aging} while aging, {after_age} after age returned, {ended} ended \
         first; {:?} in all",
        started.elapsed()
    );
    assert!(
        n_aged > 0 && n_exact > 0,
        "kills did not land on both sides of the commit: {n_aged} aged, {n_exact} exact"
    );
}

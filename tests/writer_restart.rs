//! A trainer restarting after a crash while an evaluator opens the store read-only (issue 26,
//! case 6): the crashed store needs the repair only a writer's open does, so the read-only
//! open repairs it as a writer would, and a writer opening meanwhile used to fail with
//! `InUse` (11 of 30 tries). Now the reader holds a marker lock while it repairs and the
//! writer waits for it.
//!
//! Each round a writer process (this test binary run again with `STRATA_RESTART_STORE` set:
//! the test `writer_process`, which does nothing otherwise) saves checkpoints until it is
//! killed with SIGKILL; then a read-only open starts in a thread, and a writer's open as soon
//! as the reader's repair marker appears. Both must succeed, every round, and the restarted
//! writer sees every checkpoint the killed one reported committed.

#![allow(clippy::panic)]

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use strata::store::{DType, Store, TensorRef};
use strata_testkit::child::Spawned;

/// Rounds of crash and restart.
const ROUNDS: usize = 30;
/// The store path; set, this binary is the writer process.
const WRITER_ENV: &str = "STRATA_RESTART_STORE";
/// Elements of each of the checkpoint's tensors (4 MB each: repairs take a moment).
const ELEMS: usize = 1 << 20;

/// One checkpoint's tensors at `step`: two f32 tensors that change a little each step.
fn tensors(step: u64) -> Vec<Vec<u8>> {
    (0..2u32)
        .map(|t| {
            (0..ELEMS)
                .flat_map(|i| {
                    let x = ((i as u32).wrapping_mul(2_654_435_761) ^ t) as f32 / u32::MAX as f32;
                    (x + step as f32 * 1e-3).to_le_bytes()
                })
                .collect()
        })
        .collect()
}

fn save(store: &Store, step: u64) {
    let data = tensors(step);
    let shape = [ELEMS as u64];
    let refs: Vec<(String, TensorRef<'_>)> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            (
                format!("layer.{i}.weight"),
                TensorRef {
                    dtype: DType::F32,
                    shape: &shape,
                    bytes: d,
                },
            )
        })
        .collect();
    let named: Vec<(&str, TensorRef<'_>)> = refs.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    store
        .save_checkpoint(step, &named, "")
        .unwrap_or_else(|e| panic!("save step {step}: {e}"));
}

/// This binary as the writer process, when [`WRITER_ENV`] is set: saves checkpoints after
/// the store's latest, printing `committed N` after each, until it is killed.
#[test]
fn writer_process() {
    let Ok(path) = std::env::var(WRITER_ENV) else {
        return;
    };
    let store = Store::open(&path).unwrap_or_else(|e| panic!("writer open: {e}"));
    let mut step = store
        .checkpoints()
        .map_or(0, |c| c.last().copied().unwrap_or(0));
    loop {
        step += 1;
        save(&store, step);
        println!("committed {step}");
    }
}

/// Starts the writer process and kills it once it has committed `commits` more checkpoints.
fn crash_a_writer(path: &Path, commits: usize) -> Vec<u64> {
    let child = Spawned::test_process("writer_process", WRITER_ENV, path);
    let t = Instant::now();
    let committed = |c: &Spawned| {
        c.lines()
            .iter()
            .filter_map(|l| l.split("committed ").nth(1)?.trim().parse().ok())
            .collect::<Vec<u64>>()
    };
    while committed(&child).len() < commits {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the writer did not commit"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let ended = child.kill();
    assert!(ended.killed, "the writer ended before it was killed");
    ended
        .lines
        .iter()
        .filter_map(|l| l.split("committed ").nth(1)?.trim().parse().ok())
        .collect()
}

#[test]
fn a_writer_restarting_beside_a_repairing_reader_is_not_refused() {
    if std::env::var(WRITER_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("run.strata");
    let mut reported = Vec::new();
    let mut refused = Vec::new();
    for round in 0..ROUNDS {
        reported.extend(crash_a_writer(&path, 2));
        let start = Arc::new(Barrier::new(2));
        let reader = {
            let (path, start) = (path.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                Store::open_read_only(&path).map(|s| s.checkpoints().map(|c| c.len()))
            })
        };
        start.wait();
        // The trainer restarts while the reader repairs: once its marker exists (within a
        // moment: a store the reader opens before a writer always needs the repair).
        let mut marker = path.as_os_str().to_os_string();
        marker.push(".repair");
        let t = Instant::now();
        while !Path::new(&marker).exists() && t.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_micros(200));
        }
        let writer = Store::open(&path);
        let read = reader.join().expect("reader thread");
        match writer {
            Ok(store) => {
                let held = store.checkpoints().expect("checkpoints");
                for s in &reported {
                    assert!(
                        held.contains(s),
                        "round {round}: step {s} reported committed is gone"
                    );
                }
                let last = *reported.last().expect("a commit");
                let t = store
                    .get("layer.1.weight", last)
                    .expect("read the last step");
                assert!(
                    t.data == tensors(last)[1],
                    "round {round}: step {last} differs"
                );
            }
            Err(e) => refused.push(format!("round {round}: {e}")),
        }
        match read {
            Ok(Ok(_)) => {}
            other => panic!("round {round}: the read-only open failed: {other:?}"),
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {ROUNDS} restarts refused: {refused:?}",
        refused.len()
    );
}

//! Reader processes beside a writer: a trainer saves a checkpoint per step in a loop (and
//! runs retention, which deletes, re-bases chains and compacts under the readers) while [`READERS`]
//! processes open the same store with `Store::open_read_only` and read random (tensor, step)
//! pairs, comparing each with the weights the step was saved with. Every read is exact, and
//! every checkpoint a reader lists loads whole (all its tensors) or, if the writer deleted it
//! meanwhile, is gone from the list: never torn.
//!
//! The readers are this test binary run again with `STRATA_READER_STORE` set. The test runs
//! for `STRATA_SHARE_SECS` seconds (3 by default; the benchmark figure is a 20 s run:
//! `STRATA_SHARE_SECS=20 cargo test --release --test readers_beside_writer -- --nocapture`).

// Checks fail the test by panicking, as assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{committed, Named, Rng};
use strata::store::{InvalidInput, NotFound, RetainPolicy, Store, StoreError, TensorRef};

/// Reader processes.
const READERS: usize = 4;
/// The store path; set, this binary is a reader.
const READER_ENV: &str = "STRATA_READER_STORE";
/// How long the writer writes, in seconds.
const SECS_ENV: &str = "STRATA_SHARE_SECS";

fn secs() -> u64 {
    std::env::var(SECS_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// The weights saved at `step`: the committed bf16 dev_ft step 350 checkpoint with, in every
/// tensor, the lowest mantissa bit flipped in about one element in eight, chosen by `step`.
/// A function of the step alone, so a reader rebuilds any step's weights by itself.
fn weights(base: &[Named], step: u64) -> Vec<Named> {
    base.iter()
        .enumerate()
        .map(|(k, t)| {
            let mut t = t.clone();
            let mut rng = Rng::new(step.wrapping_mul(0x100_0193) ^ k as u64);
            for c in t.data.chunks_exact_mut(2) {
                if rng.next_u64().is_multiple_of(8) {
                    c[0] ^= 1;
                }
            }
            t
        })
        .collect()
}

fn save(store: &Store, step: u64, w: &[Named]) {
    let refs: Vec<(&str, TensorRef<'_>)> =
        w.iter().map(|t| (t.name.as_str(), t.as_ref())).collect();
    store
        .save_checkpoint(step, &refs, &format!("{{\"step\": {step}}}"))
        .expect("save checkpoint");
}

#[test]
fn readers_follow_a_writer() {
    if let Some(path) = std::env::var_os(READER_ENV) {
        run_reader(Path::new(&path));
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("run.strata");
    let base = committed(350, true);
    let mut store = Store::open(&path).expect("open the writer");
    save(&store, 0, &weights(&base, 0));

    let seed = common::seed("readers");
    let mut readers = Readers(Vec::new());
    readers.0 = (0..READERS)
        .map(|i| {
            Command::new(std::env::current_exe().expect("test binary"))
                .args([
                    "readers_follow_a_writer",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(READER_ENV, &path)
                .env("STRATA_READER_SEED", format!("{}", seed ^ i as u64))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a reader")
        })
        .collect();

    // The writer: a checkpoint per step; every tenth step, retention keeps the last 15.
    let deadline = Instant::now() + Duration::from_secs(secs());
    let mut step = 0;
    let (mut retains, mut compacted) = (0, 0);
    while Instant::now() < deadline {
        step += 1;
        save(&store, step, &weights(&base, step));
        if step % 10 == 0 {
            let keep = RetainPolicy {
                keep_last: Some(15),
                ..RetainPolicy::default()
            };
            let report = store.retain(&keep).expect("retain beside readers");
            retains += 1;
            compacted += u32::from(report.compacted);
        }
    }
    // The readers stop when they see the last step marked done.
    store.tag("done", step).expect("tag");
    let mut reads = 0;
    for child in std::mem::take(&mut readers.0) {
        let out = child.wait_with_output().expect("reader exit");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "a reader failed: {text}");
        let n: u64 = text
            .lines()
            .find_map(|l| l.split("reader: reads ").nth(1))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("a reader printed no count: {text}"));
        assert!(n > 0, "a reader made no read");
        reads += n;
    }
    eprintln!(
        "readers_beside_writer: {step} checkpoints written in {} s ({compacted} of {retains} \
         retains compacted), {reads} exact reads by {READERS} reader processes, none torn",
        secs()
    );
    // The readers' handles never wrote: the writer can still compact alone.
    drop(store);
    let ro = Store::open_read_only(&path).expect("open read-only");
    assert!(matches!(
        ro.tag("x", 1),
        Err(StoreError::Invalid(InvalidInput::ReadOnly { .. }))
    ));
}

/// The reader processes, killed if the test fails before it waits for them.
struct Readers(Vec<std::process::Child>);

impl Drop for Readers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A reader: until the writer tags `done`, picks a listed step and a tensor at random and
/// checks it, and every eighth time loads the whole checkpoint.
fn run_reader(path: &Path) {
    let store = Store::open_read_only(path).expect("open read-only beside the writer");
    let base = committed(350, true);
    let seed = std::env::var("STRATA_READER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = Rng::new(seed);
    let mut expected: BTreeMap<u64, Vec<Named>> = BTreeMap::new();
    let mut reads = 0u64;
    // A writer that died never tags `done`: give up a minute after it should have.
    let deadline = Instant::now() + Duration::from_secs(secs() + 60);
    // Each round lists the steps first, then reads: a step deleted in between is NotFound.
    let gone = |store: &Store, step: u64| !store.checkpoints().expect("list").contains(&step);
    loop {
        assert!(Instant::now() < deadline, "the writer never finished");
        let done = !store.tags().expect("tags").is_empty();
        let steps = store.checkpoints().expect("list checkpoints");
        let step = steps[(rng.next_u64() % steps.len() as u64) as usize];
        if expected.len() > 64 {
            expected.clear();
        }
        let w = expected.entry(step).or_insert_with(|| weights(&base, step));
        if rng.next_u64().is_multiple_of(8) {
            match store.load_checkpoint(step) {
                Ok(cp) => {
                    let got: BTreeMap<_, _> = cp.tensors.into_iter().collect();
                    assert_eq!(got.len(), w.len(), "step {step}: a torn checkpoint");
                    for t in w.iter() {
                        assert_eq!(got[&t.name].data, t.data, "step {step} {}", t.name);
                    }
                }
                Err(StoreError::NotFound(_)) if gone(&store, step) => continue,
                Err(e) => panic!("step {step}: {e}"),
            }
        } else {
            let t = &w[(rng.next_u64() % w.len() as u64) as usize];
            match store.get(&t.name, step) {
                Ok(got) => {
                    assert_eq!(got.shape, t.shape, "step {step} {}", t.name);
                    assert_eq!(got.data, t.data, "step {step} {}: wrong bytes", t.name);
                }
                Err(StoreError::NotFound(NotFound::Version { .. })) if gone(&store, step) => {
                    continue
                }
                Err(e) => panic!("step {step} {}: {e}", t.name),
            }
        }
        reads += 1;
        if done {
            break;
        }
    }
    println!("reader: reads {reads}");
}

//! Retention: `Store::retain` keeps exactly the checkpoints its policy names, each still
//! bit-exact, and the file shrinks (at once, or, for a retention after every save, by
//! reusing the room it keeps; ADR 0037).

mod common;

use std::collections::BTreeSet;

use common::{all_series, temp_store, Ckpt, Series, SeriesExt};
use strata_store::{DType, InvalidInput, RetainPolicy, Store, StoreError, TensorRef};

fn assert_checkpoint_matches(store: &Store, c: &Ckpt) {
    let cp = store.load_checkpoint(c.step).expect("load checkpoint");
    let mut got: Vec<_> = cp.tensors.iter().collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), c.tensors.len(), "step {}", c.step);
    for ((name, t), (n, d, s, b)) in got.iter().zip(&c.tensors) {
        assert_eq!(name, n);
        assert_eq!(t.dtype, *d);
        assert_eq!(&t.shape, s);
        assert!(t.data == *b, "{name} step {}: bytes differ", c.step);
    }
}

#[test]
fn retain_keeps_the_last_and_every_kth_of_dev_pre() {
    for src in all_series() {
        if src.is_shared() {
            // Steps 0, 50, ..., 350: the last two and every 200th.
            retain_case(
                &src,
                8,
                RetainPolicy {
                    keep_last: Some(2),
                    keep_every: Some(200),
                    keep_tagged: true,
                },
                &[0, 200, 300, 350],
                &[50, 100, 150, 250],
            );
        } else {
            // Steps 250, 300, 350: the last and every 250th, which removes 300, the base
            // of 350's deltas.
            retain_case(
                &src,
                3,
                RetainPolicy {
                    keep_last: Some(1),
                    keep_every: Some(250),
                    keep_tagged: true,
                },
                &[250, 350],
                &[300],
            );
        }
    }
}

/// Imports dev_pre of `src` (`steps` checkpoints), retains by `policy`, and checks what is
/// kept and removed, that the file shrinks and that the kept checkpoints are bit-exact.
fn retain_case(src: &Series, steps: usize, policy: RetainPolicy, kept: &[u64], removed: &[u64]) {
    eprintln!("on the {} series", src.label);
    let series = src.load("dev_pre");
    assert_eq!(series.len(), steps);
    let (_dir, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    for c in &series {
        let file = src
            .root
            .join("dev_pre")
            .join(format!("step_{:06}.safetensors", c.step));
        store.import_safetensors(&file, c.step).expect("import");
    }
    store.compact().expect("compact");
    let before = store.stats().expect("stats");

    let report = store.retain(&policy).expect("retain");
    let expected = kept.to_vec();
    assert_eq!(report.kept, expected);
    assert_eq!(report.removed, removed.to_vec());
    let per_checkpoint = series[0].tensors.len() as u64;
    assert_eq!(
        report.versions_removed,
        removed.len() as u64 * per_checkpoint
    );
    assert_eq!(report.file_bytes_before, before.file_bytes);
    // A retention that deletes one checkpoint (one called after every save) keeps the room
    // it freed for the next saves; one that deletes more compacts (ADR 0037).
    let after = if removed.len() <= 1 {
        let reason = report.compaction_deferred.clone().unwrap_or_default();
        assert!(
            !report.compacted && reason.contains("kept as room"),
            "{reason:?}"
        );
        store.compact().expect("compact");
        store.file_bytes().expect("file bytes")
    } else {
        assert!(report.compacted, "{:?}", report.compaction_deferred);
        report.file_bytes_after
    };
    assert!(
        after < report.file_bytes_before,
        "file did not shrink: {} -> {after}",
        report.file_bytes_before,
    );
    eprintln!(
        "retain {} dev_pre: file {} -> {after} bytes",
        src.label, report.file_bytes_before
    );
    drop(store);

    let store = Store::open(&path).expect("reopen");
    assert_eq!(store.checkpoints().expect("list"), expected);
    for c in series.iter().filter(|c| expected.contains(&c.step)) {
        assert_checkpoint_matches(&store, c);
    }
    let stats = store.stats().expect("stats");
    assert_eq!(stats.versions, kept.len() as u64 * per_checkpoint);
    let report = store.verify().expect("verify");
    assert!(report.is_ok(), "{:?}", report.issues);
}

fn small_store(path: &std::path::Path, steps: &[u64]) -> Store {
    let store = Store::open(path).expect("open");
    for &s in steps {
        let v: Vec<u8> = (0..4096u32)
            .flat_map(|i| ((i as f32) * 0.001 + s as f32 * 1e-4).to_le_bytes())
            .collect();
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[64, 64],
            bytes: &v,
        };
        store
            .save_checkpoint(s, &[("w", t), ("b", t)], "")
            .expect("save");
    }
    store
}

#[test]
fn tagged_checkpoints_are_kept_unless_asked() {
    let (_dir, path) = temp_store();
    let mut store = small_store(&path, &[10, 20, 30, 40, 50]);
    store.tag("best", 20).expect("tag");
    store
        .put(
            "loose",
            30,
            &TensorRef {
                dtype: DType::U8,
                shape: &[2],
                bytes: &[1, 2],
            },
        )
        .expect("put");
    let r = store
        .retain(&RetainPolicy {
            keep_last: Some(1),
            keep_every: None,
            keep_tagged: true,
        })
        .expect("retain");
    assert_eq!(r.kept, vec![20, 50]);
    assert_eq!(r.removed, vec![10, 30, 40]);
    assert_eq!(r.versions_removed, 6);
    // A version outside any checkpoint stays.
    assert_eq!(store.get("loose", 30).expect("loose").data, vec![1, 2]);
    assert_eq!(store.tags().expect("tags"), vec![("best".to_string(), 20)]);

    let r = store
        .retain(&RetainPolicy {
            keep_last: Some(1),
            keep_every: None,
            keep_tagged: false,
        })
        .expect("retain");
    assert_eq!(r.kept, vec![50]);
    assert!(store.tags().expect("tags").is_empty());
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn policies_that_keep_nothing_by_rule_are_refused() {
    let (_dir, path) = temp_store();
    let mut store = small_store(&path, &[1, 2]);
    for policy in [
        RetainPolicy {
            keep_last: None,
            keep_every: None,
            keep_tagged: true,
        },
        RetainPolicy {
            keep_last: None,
            keep_every: Some(0),
            keep_tagged: true,
        },
    ] {
        assert!(matches!(
            store.retain(&policy),
            Err(StoreError::Invalid(InvalidInput::Options { .. }))
        ));
    }
    assert_eq!(store.checkpoints().expect("list"), vec![1, 2]);
    let kept = RetainPolicy::default().kept(&[1, 2, 3, 4, 5], &BTreeSet::from([1]));
    assert_eq!(kept, BTreeSet::from([1, 3, 4, 5]));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Retention deletes a batch newest first without re-basing onto versions of the batch:
    /// whatever the chain shape (policy, bound, drift that makes some blocks identical), every
    /// kept checkpoint reads back exact and verify passes. The tensor's 48 blocks are more
    /// than a batch of the parallel re-base holds on a machine of up to 2 threads.
    #[test]
    fn retention_of_any_chain_keeps_exact_data(
        steps in 2u64..30,
        max_chain in 2u8..7,
        star in proptest::bool::ANY,
        keep_last in 1usize..4,
        keep_every in proptest::option::of(2u64..6),
        same_every in 2u64..6,
    ) {
        let (_dir, path) = temp_store();
        let opts = strata_store::Options {
            max_chain,
            policy: if star { strata_store::DeltaPolicy::Star } else { strata_store::DeltaPolicy::Chain },
            block_bytes: 8192,
            cache_bytes: 0,
            ..strata_store::Options::default()
        };
        let mut store = Store::open_with(&path, opts).expect("open");
        const N: u32 = 48 * 2048; // 48 blocks of 8 KiB
        let data = |s: u64| -> Vec<u8> {
            // Every `same_every`-th step repeats its predecessor: reference blocks.
            let s = if s.is_multiple_of(same_every) { s.saturating_sub(1) } else { s };
            (0..N)
                .flat_map(|i| ((i as f32) * 0.001 + ((i as u64 * s) % 7) as f32 * 1e-4).to_le_bytes())
                .collect()
        };
        for s in 0..steps {
            let v = data(s);
            let t = TensorRef { dtype: DType::F32, shape: &[N as u64], bytes: &v };
            store.save_checkpoint(s, &[("w", t)], "").expect("save");
        }
        let policy = RetainPolicy { keep_last: Some(keep_last), keep_every, keep_tagged: true };
        let report = store.retain(&policy).expect("retain");
        for &s in &report.kept {
            proptest::prop_assert_eq!(store.get("w", s).expect("get").data, data(s), "step {}", s);
        }
        let v = store.verify().expect("verify");
        proptest::prop_assert!(v.is_ok(), "{:?}", v.issues);
    }
}

/// A retention after every save (a trainer's `max_to_keep`) deletes one checkpoint a call and
/// keeps the room it frees for the next save and retention instead of compacting the whole
/// store each time (ADR 0037): the file stops growing, and every kept checkpoint reads
/// exactly. A retention that deletes several checkpoints still compacts.
#[test]
fn a_retention_after_every_save_keeps_room_and_the_file_stops_growing() {
    let (_dir, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    let (n, mut w) = drifting_weights();
    let mut saved: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut disk = Vec::new();
    let keep = RetainPolicy {
        keep_last: Some(2),
        keep_every: None,
        keep_tagged: true,
    };
    for step in 1..=14u64 {
        let bytes = drift(&mut w, step);
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[n as u64],
            bytes: &bytes,
        };
        store.save_checkpoint(step, &[("w", t)], "").expect("save");
        saved.push((step, bytes));
        let r = store.retain(&keep).expect("retain");
        if step > 2 {
            assert_eq!(r.removed, vec![step - 2]);
            assert!(
                !r.compacted
                    && r.compaction_deferred
                        .as_deref()
                        .is_some_and(|m| m.contains("kept as room")),
                "step {step}: {:?}",
                r.compaction_deferred
            );
        }
        disk.push(store.disk_bytes().expect("disk bytes"));
        for (s, b) in saved.iter().rev().take(2) {
            assert!(store.get("w", *s).expect("get").data == *b, "step {s}");
        }
    }
    // The room is reused: after the first few rounds the file takes no more disk.
    let settled = disk[7];
    assert!(
        disk[8..].iter().all(|&d| d <= settled + settled / 8),
        "the file kept growing: {disk:?}"
    );
    // Deleting several checkpoints at once (a prune by hand) compacts.
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    for step in 15..=17u64 {
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[n as u64],
            bytes: &bytes,
        };
        store.save_checkpoint(step, &[("w", t)], "").expect("save");
    }
    let r = store
        .retain(&RetainPolicy {
            keep_last: Some(1),
            ..keep
        })
        .expect("retain");
    assert_eq!(r.removed, vec![13, 14, 15, 16]);
    assert!(r.compacted, "{:?}", r.compaction_deferred);
    assert!(store.disk_bytes().expect("disk bytes") < settled);
    assert!(store.get("w", 17).expect("get").data == bytes);
    assert!(store.verify().expect("verify").is_ok());
}

/// Three MiB of f32 weights (three blocks), and their element count.
fn drifting_weights() -> (usize, Vec<f32>) {
    let n = 3 << 18;
    let w = (0..n)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3)
        .collect();
    (n, w)
}

/// Nudges a fifth of `w` for `step` and gives its bytes.
fn drift(w: &mut [f32], step: u64) -> Vec<u8> {
    for (i, x) in w.iter_mut().enumerate() {
        if (i as u64 + step).is_multiple_of(5) {
            *x += 1e-4 * ((i % 13) as f32 - 6.0);
        }
    }
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_close_gives_back_the_room_a_retention_kept() {
    let (_dir, path) = temp_store();
    let (n, mut w) = drifting_weights();
    let keep = RetainPolicy {
        keep_last: Some(2),
        keep_every: None,
        keep_tagged: true,
    };
    let mut last = Vec::new();
    // A run of 10 saves, then a resumed run of 2: each handle saves and retains, then closes.
    for steps in [1..=10u64, 11..=12] {
        let newest = *steps.end();
        let mut store = Store::open(&path).expect("open");
        for step in steps {
            last = drift(&mut w, step);
            let t = TensorRef {
                dtype: DType::F32,
                shape: &[n as u64],
                bytes: &last,
            };
            store.save_checkpoint(step, &[("w", t)], "").expect("save");
            let r = store.retain(&keep).expect("retain");
            assert!(step < 3 || !r.compacted, "step {step}: no room kept");
        }
        drop(store);
        // No save follows the close: it gave the room back, as a compaction would.
        let closed = std::fs::metadata(&path).expect("metadata").len();
        let mut store = Store::open(&path).expect("reopen");
        store.compact().expect("compact");
        let compacted = store.file_bytes().expect("file bytes");
        assert!(
            closed <= compacted + compacted / 20,
            "{closed} bytes long after the close, {compacted} compacted"
        );
        assert!(store.get("w", newest).expect("get").data == last);
    }
}

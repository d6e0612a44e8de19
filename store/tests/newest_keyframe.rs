//! The newest version kept as a keyframe (ADR 0006): a write appending a version stores it as
//! keyframes and re-encodes the previous newest against it. Every version reads exactly through
//! writes, deletions, overwrites, retention and aging; chains stay within `max_chain` and their
//! recorded depths are the segments a read decodes.

mod common;

use common::{f32_bytes, noise, temp_store};
use strata_store::{
    AgePolicy, DType, Options, PutOptions, RetainPolicy, Store, TensorRef, VersionInfo,
};

/// Elements of the test tensor: 96 Ki f32 in blocks of 128 KiB, three blocks whose keyframes
/// are large enough to be re-encoded.
const N: usize = 96 << 10;

fn opts() -> Options {
    Options {
        block_bytes: 128 << 10,
        ..Options::default()
    }
}

fn forward() -> Options {
    Options {
        newest_keyframe: false,
        ..opts()
    }
}

/// AdamW's first moment after `step` steps of gradients of `seed`: `m = 0.9 m + 0.1 g`. Every
/// value changes at every step, so a keyframe costs about a delta.
fn moments_of(seed: u64, step: u64) -> Vec<u8> {
    let mut m = vec![0f32; N];
    for s in 1..=step {
        for (x, g) in m.iter_mut().zip(noise(N, seed * 1000 + s)) {
            *x = 0.9 * *x + 0.1 * g;
        }
    }
    f32_bytes(&m)
}

fn moments(step: u64) -> Vec<u8> {
    moments_of(1, step)
}

/// Weights nudged a little at every step (a fine-tune): a keyframe costs several deltas.
fn weights(w: &mut [f32], step: u64) -> Vec<u8> {
    for (i, x) in w.iter_mut().enumerate() {
        if (i as u64 + step).is_multiple_of(7) {
            *x += 1e-4 * ((i % 11) as f32 - 5.0);
        }
    }
    f32_bytes(w)
}

/// A matrix (aging keeps vectors exact).
const SHAPE: [u64; 2] = [(N / 256) as u64, 256];

fn save(store: &Store, step: u64, bytes: &[u8]) {
    let t = TensorRef {
        dtype: DType::F32,
        shape: &SHAPE,
        bytes,
    };
    store.save_checkpoint(step, &[("w", t)], "").expect("save");
}

/// Overwrites the newest saved version of "w" with `bytes` (a re-run of its step), and
/// `saved` with it.
fn overwrite_newest(store: &Store, saved: &mut [(u64, Vec<u8>)], bytes: Vec<u8>) {
    let newest = saved.last_mut().expect("a saved version");
    let t = TensorRef {
        dtype: DType::F32,
        shape: &SHAPE,
        bytes: &bytes,
    };
    store
        .put_with("w", newest.0, &t, &PutOptions { overwrite: true })
        .expect("overwrite");
    newest.1 = bytes;
}

/// Saves a version of "w" from `next` (which moves the weights `w`) at each of `steps`;
/// returns them as saved.
fn save_steps(
    store: &Store,
    w: &mut [f32],
    steps: std::ops::RangeInclusive<u64>,
    next: fn(&mut [f32], u64) -> Vec<u8>,
) -> Vec<(u64, Vec<u8>)> {
    steps
        .map(|step| {
            let bytes = next(w, step);
            save(store, step, &bytes);
            (step, bytes)
        })
        .collect()
}

/// Every version of "w" reads as saved; every block's chain (followed through the bases) is
/// within `max_chain`, and its recorded depth is its length: exactly where only writes made
/// the chains, at least after deletions (a re-base leaves the depths under it as an upper
/// bound).
fn check(store: &Store, saved: &[(u64, Vec<u8>)], max_chain: u8) -> Vec<VersionInfo> {
    check_depths(store, saved, max_chain, true)
}

fn check_depths(
    store: &Store,
    saved: &[(u64, Vec<u8>)],
    max_chain: u8,
    exact: bool,
) -> Vec<VersionInfo> {
    let versions = store.versions("w").expect("versions");
    assert_eq!(versions.len(), saved.len());
    for (step, bytes) in saved {
        assert!(
            store.get("w", *step).expect("get").data == *bytes,
            "step {step}"
        );
    }
    // A history reads the versions in chain order, not step order, and hands them back in
    // step order: a range inside one block, and one across the first two.
    let block = opts().block_bytes / 4;
    for elems in [block + 5..block + 900, block - 40..block + 40] {
        let history = store.history("w", elems.clone(), ..).expect("history");
        let steps: Vec<u64> = history.iter().map(|(s, _)| *s).collect();
        let mut expected: Vec<u64> = saved.iter().map(|(s, _)| *s).collect();
        expected.sort_unstable();
        assert_eq!(steps, expected, "history steps");
        for (step, slice) in &history {
            let (_, bytes) = saved.iter().find(|(s, _)| s == step).expect("saved");
            let range = elems.start as usize * 4..elems.end as usize * 4;
            assert!(slice.data == bytes[range], "history of step {step}");
        }
    }
    for v in &versions {
        for (b, e) in v.encodings.iter().enumerate() {
            let mut depth: u8 = 1;
            let mut at = e.base;
            while let Some(s) = at {
                assert!(depth < u8::MAX, "step {} block {b}: a loop", v.step);
                depth += 1;
                let base = versions.iter().find(|x| x.step == s).expect("base exists");
                at = base.encodings[b].base;
            }
            if !e.reference {
                let what = format!("step {} block {b}: recorded depth", v.step);
                match exact {
                    true => assert_eq!(e.depth, depth, "{what}"),
                    false => assert!(e.depth >= depth, "{what} {} under {depth}", e.depth),
                }
            }
            assert!(
                depth <= max_chain,
                "step {} block {b}: depth {depth}",
                v.step
            );
        }
    }
    assert!(store.verify().expect("verify").is_ok());
    versions
}

fn newest_is_keyframe(versions: &[VersionInfo]) -> bool {
    versions
        .last()
        .is_some_and(|v| v.encodings.iter().all(|e| e.base.is_none()))
}

#[test]
fn moments_keep_the_newest_a_keyframe_at_every_step() {
    let (_d, path) = temp_store();
    let store = Store::open_with(&path, opts()).expect("open");
    let mut saved = Vec::new();
    for step in 1..=14u64 {
        let bytes = moments(step);
        save(&store, step, &bytes);
        saved.push((step, bytes));
        let versions = check(&store, &saved, opts().max_chain);
        assert!(newest_is_keyframe(&versions), "step {step}: {versions:?}");
    }
}

/// Weights whose same elements move the same way at every step (a fine-tune with momentum):
/// a delta over several steps costs little more than one over a step.
fn drifting(w: &mut [f32], _step: u64) -> Vec<u8> {
    for (i, x) in w.iter_mut().enumerate() {
        if i.is_multiple_of(7) {
            *x += 1e-4 * (((i / 7) % 5) as f32 - 2.5);
        }
    }
    f32_bytes(w)
}

/// Saves `steps` versions of weights from `next` under `options`, checking every version after
/// each save; returns the store's segment bytes and, per step, whether the newest was a
/// keyframe.
fn fine_tune(
    options: &Options,
    steps: u64,
    next: fn(&mut [f32], u64) -> Vec<u8>,
) -> (u64, Vec<bool>) {
    let (_d, path) = temp_store();
    let store = Store::open_with(&path, options.clone()).expect("open");
    let mut w = noise(N, 7);
    let mut saved = Vec::new();
    let mut newest = Vec::new();
    for step in 1..=steps {
        let bytes = next(&mut w, step);
        save(&store, step, &bytes);
        saved.push((step, bytes));
        let versions = check(&store, &saved, options.max_chain);
        newest.push(newest_is_keyframe(&versions));
    }
    (store.stats().expect("stats").segment_bytes, newest)
}

#[test]
fn drifting_weights_keep_the_newest_a_keyframe_through_anchors() {
    let (bytes, newest) = fine_tune(&opts(), 20, drifting);
    let (forward_bytes, _) = fine_tune(&forward(), 20, drifting);
    // Past `max_chain` versions the chain's head becomes an anchor, re-encoded against each
    // new newest, and every version stays within `max_chain`.
    assert!(newest.iter().all(|&k| k), "{newest:?}");
    assert!(
        bytes * 100 <= forward_bytes * 103,
        "newest kept a keyframe {bytes} against forward {forward_bytes}"
    );
}

#[test]
fn weights_whose_deltas_grow_fast_keep_their_bytes() {
    // Every step moves other elements: a delta over two steps costs about two. An anchor would
    // cost more than the 3 % of bytes the newest keyframe may: the first lineage is reverse,
    // then the chain goes on forward, rooted at its newest keyframe.
    let max_chain = opts().max_chain;
    let (bytes, newest) = fine_tune(&opts(), 12, weights);
    let (forward_bytes, _) = fine_tune(&forward(), 12, weights);
    assert!(
        newest[..usize::from(max_chain)].iter().all(|&k| k),
        "{newest:?}"
    );
    assert!(
        bytes * 100 <= forward_bytes * 103,
        "newest kept a keyframe {bytes} against forward {forward_bytes}"
    );
}

/// A tree under the newest keyframe holds at most 32 versions (the store's horizon, which
/// bounds the work of its saves), or fewer once its newest anchor costs more than its budget;
/// past it the block goes on forward (a keyframe here costs far more than 3 % of the tree).
/// Every version reads exactly within `max_chain` throughout, at exact recorded depths.
#[test]
fn a_long_fine_tune_keeps_its_tree_within_the_horizon() {
    let (_, newest) = fine_tune(&opts(), 40, drifting);
    assert!(newest[..30].iter().all(|&k| k), "{newest:?}");
    assert!(newest[33..].iter().all(|&k| !k), "{newest:?}");
}

#[test]
fn a_version_written_before_the_newest_leaves_the_newest_a_keyframe() {
    let (_d, path) = temp_store();
    let store = Store::open_with(&path, opts()).expect("open");
    let mut saved = Vec::new();
    for step in [10u64, 20, 30] {
        let bytes = moments(step / 10);
        save(&store, step, &bytes);
        saved.push((step, bytes));
    }
    // A step between two saved ones (a resumed run filling a gap) is not the newest: it is
    // written against the version before it, and step 30 stays the keyframe.
    let between = moments_of(2, 3);
    save(&store, 25, &between);
    saved.insert(2, (25, between));
    let versions = check(&store, &saved, opts().max_chain);
    assert!(newest_is_keyframe(&versions), "{versions:?}");
    let at_25 = versions.iter().find(|v| v.step == 25).expect("step 25");
    assert!(
        at_25.encodings.iter().all(|e| e.base == Some(20)),
        "{at_25:?}"
    );
}

#[test]
fn deleting_or_overwriting_the_newest_leaves_every_other_version_exact() {
    let (_d, path) = temp_store();
    let store = Store::open_with(&path, opts()).expect("open");
    let mut saved = Vec::new();
    for step in 1..=5u64 {
        let bytes = moments(step);
        save(&store, step, &bytes);
        saved.push((step, bytes));
    }
    // The newest goes: the one before becomes the keyframe its chain reads from.
    store.delete_checkpoint(5).expect("delete");
    saved.pop();
    let versions = check_depths(&store, &saved, opts().max_chain, false);
    assert!(newest_is_keyframe(&versions), "{versions:?}");

    // A re-run overwrites the newest step: the versions under it read on.
    overwrite_newest(&store, &mut saved, moments_of(3, 4));
    check_depths(&store, &saved, opts().max_chain, false);

    // An older step goes: the chain over it closes up.
    store.delete_checkpoint(2).expect("delete");
    saved.remove(1);
    check_depths(&store, &saved, opts().max_chain, false);
}

#[test]
fn saves_after_a_deletion_of_the_newest_keep_chains_within_the_bound() {
    // A full lineage (a keyframe and 5 versions under it) loses its keyframe: the version
    // before becomes one, with 4 under it, and the next saves must count those, not the
    // lineage the deletion's keyframe records.
    let (_d, path) = temp_store();
    let store = Store::open_with(&path, opts()).expect("open");
    let mut saved = Vec::new();
    for step in 1..=6u64 {
        let bytes = moments(step);
        save(&store, step, &bytes);
        saved.push((step, bytes));
    }
    store.delete_checkpoint(6).expect("delete");
    saved.pop();
    for step in 6..=9u64 {
        let bytes = moments(step);
        save(&store, step, &bytes);
        saved.push((step, bytes));
        let versions = check_depths(&store, &saved, opts().max_chain, false);
        assert!(newest_is_keyframe(&versions), "step {step}");
    }
}

#[test]
fn retention_after_every_save_keeps_the_kept_exact_and_the_file_bounded() {
    let (_d, path) = temp_store();
    let mut store = Store::open_with(&path, opts()).expect("open");
    let keep = RetainPolicy {
        keep_last: Some(3),
        keep_every: None,
        keep_tagged: true,
    };
    let mut saved: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut disk = Vec::new();
    for step in 1..=16u64 {
        let bytes = moments(step);
        save(&store, step, &bytes);
        saved.push((step, bytes));
        let r = store.retain(&keep).expect("retain");
        saved.retain(|(s, _)| r.kept.contains(s));
        let versions = check_depths(&store, &saved, opts().max_chain, false);
        assert!(newest_is_keyframe(&versions), "step {step}");
        disk.push(store.disk_bytes().expect("disk bytes"));
    }
    // The pages each save frees are reused by the next: the file stops growing (redb may
    // grow it once more while the freed pages settle).
    let settled = disk[6..10].iter().max().copied().unwrap_or(0);
    assert!(
        disk[10..].iter().all(|d| *d <= settled + settled / 10),
        "{disk:?}"
    );
}

#[test]
fn aging_reads_each_version_before_it_rewrites_the_newer_ones() {
    let (_d, path) = temp_store();
    let mut store = Store::open_with(&path, opts()).expect("open");
    let mut w = noise(N, 3);
    let saved = save_steps(&store, &mut w, 1..=6, weights);
    // Steps 1-4 are deltas against the versions after them, up to the keyframe at 6.
    let before = store.versions("w").expect("versions");
    assert!(before[0].encodings.iter().all(|e| e.base == Some(2)));
    let policy = AgePolicy {
        budget: 1e-2,
        update_budget: None,
        ..AgePolicy::default()
    };
    let report = store.age(&policy).expect("age");
    assert!(report.versions_aged > 0, "{report:?}");
    // The two newest stay exact; every aged one reads, within its budget.
    for (step, bytes) in &saved {
        let got = store.get("w", *step).expect("get").data;
        if *step >= 5 {
            assert!(got == *bytes, "step {step}");
        } else {
            let (a, b) = (f32s(&got), f32s(bytes));
            let err: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(x - y).powi(2))
                .sum();
            let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
            assert!((err / norm).sqrt() <= 1.01e-2, "step {step}");
        }
    }
    assert!(store.verify().expect("verify").is_ok());
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Trees with anchors through deletions of the newest, of an anchor and of a chain member, an
/// overwrite of the newest, saves after them and a retention that keeps every other step:
/// every kept version reads exactly, within `max_chain`.
#[test]
fn anchored_trees_survive_deletions_overwrites_and_retention() {
    let (_d, path) = temp_store();
    let mut store = Store::open_with(&path, opts()).expect("open");
    let mut w = noise(N, 11);
    let mut saved = save_steps(&store, &mut w, 1..=14, drifting);
    let versions = check(&store, &saved, opts().max_chain);
    let anchors = |versions: &[VersionInfo]| {
        let newest = versions.last().map_or(0, |v| v.step);
        versions
            .iter()
            .filter(|v| v.step + 1 < newest && v.encodings[0].base == Some(newest))
            .map(|v| v.step)
            .collect::<Vec<u64>>()
    };
    let anchored = anchors(&versions);
    assert!(!anchored.is_empty(), "{versions:?}");

    // The newest goes: its anchors and its predecessor are re-based.
    store.delete_checkpoint(14).expect("delete");
    saved.pop();
    check_depths(&store, &saved, opts().max_chain, false);

    // A re-run overwrites the newest step.
    let mut other = noise(N, 12);
    overwrite_newest(&store, &mut saved, drifting(&mut other, 13));
    check_depths(&store, &saved, opts().max_chain, false);

    // An anchor goes, then a version in the middle of a chain.
    let gone = anchored[0];
    store.delete_checkpoint(gone).expect("delete anchor");
    saved.retain(|(s, _)| *s != gone);
    check_depths(&store, &saved, opts().max_chain, false);
    store.delete_checkpoint(9).expect("delete");
    saved.retain(|(s, _)| *s != 9);
    check_depths(&store, &saved, opts().max_chain, false);

    // Saves go on, each followed by a retention of every other step.
    let keep = RetainPolicy {
        keep_last: Some(2),
        keep_every: Some(2),
        keep_tagged: true,
    };
    for step in 15..=22u64 {
        let bytes = drifting(&mut w, step);
        save(&store, step, &bytes);
        saved.push((step, bytes));
        let r = store.retain(&keep).expect("retain");
        saved.retain(|(s, _)| r.kept.contains(s));
        let versions = check_depths(&store, &saved, opts().max_chain, false);
        assert!(newest_is_keyframe(&versions), "step {step}");
    }
}

/// Past three anchors the chains that fill move under the newest anchor: a save re-encodes at
/// most three anchors and one chain's head, and every version reads within `max_chain` at its
/// recorded depth.
#[test]
fn chains_past_three_anchors_move_under_the_newest() {
    let (_d, path) = temp_store();
    let store = Store::open_with(&path, opts()).expect("open");
    let mut w = noise(N, 13);
    let saved = save_steps(&store, &mut w, 1..=28, drifting);
    let versions = check(&store, &saved, opts().max_chain);
    assert!(newest_is_keyframe(&versions), "{versions:?}");
    for b in 0..versions[0].encodings.len() {
        let base_of = |s: u64| {
            versions
                .iter()
                .find(|v| v.step == s)
                .and_then(|v| v.encodings[b].base)
        };
        let anchors: Vec<u64> = versions
            .iter()
            .filter(|v| v.step + 1 < 28 && v.encodings[b].base == Some(28))
            .map(|v| v.step)
            .collect();
        assert!(
            (1..=3).contains(&anchors.len()),
            "block {b}: anchors {anchors:?}"
        );
        // A head moved under an anchor is a delta against an older version.
        let moved = versions
            .iter()
            .filter(|v| {
                v.encodings[b]
                    .base
                    .is_some_and(|a| a < v.step && anchors.contains(&a))
            })
            .count();
        assert!(moved >= 1, "block {b}: no chain moved under an anchor");
        assert!(base_of(27) == Some(28));
    }
}

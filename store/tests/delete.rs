//! Deleting versions that others depend on re-bases them; everything else still reads exactly.

mod common;

use common::{f32_bytes, noise, temp_store};
use strata_store::{DType, DeltaPolicy, NotFound, Options, Store, StoreError, TensorRef};

/// A slowly drifting tensor: version k changes a few values of version k-1.
fn history(versions: usize, n: usize) -> Vec<Vec<u8>> {
    let mut v = noise(n, 1);
    let mut out = Vec::new();
    for k in 0..versions {
        for (i, x) in v.iter_mut().enumerate() {
            if (i + k).is_multiple_of(7) {
                *x += 1e-3 * (k as f32 + 1.0);
            }
        }
        out.push(f32_bytes(&v));
    }
    out
}

fn open(path: &std::path::Path, policy: DeltaPolicy) -> Store {
    Store::open_with(
        path,
        Options {
            policy,
            max_chain: 4,
            // Several blocks per version, some blocks unchanged between versions.
            block_bytes: 16 << 10,
            ..Options::default()
        },
    )
    .expect("open")
}

fn check_all(store: &Store, name: &str, steps: &[u64], data: &[Vec<u8>]) {
    for (&s, d) in steps.iter().zip(data) {
        match store.get(name, s) {
            Ok(got) => assert!(got.data == *d, "step {s} differs"),
            Err(e) => unreachable!("step {s}: {e}"),
        }
    }
}

#[test]
fn delete_middle_versions_rebases_dependents() {
    for policy in [DeltaPolicy::Chain, DeltaPolicy::Star] {
        let (_d, path) = temp_store();
        let n = 20_000;
        let data = history(12, n);
        let store = open(&path, policy);
        let shape = [n as u64];
        for (k, d) in data.iter().enumerate() {
            store
                .put(
                    "w",
                    k as u64 * 10,
                    &TensorRef {
                        dtype: DType::F32,
                        shape: &shape,
                        bytes: d,
                    },
                )
                .expect("put");
        }
        // An unchanged version: only references.
        store
            .put(
                "w",
                1000,
                &TensorRef {
                    dtype: DType::F32,
                    shape: &shape,
                    bytes: &data[11],
                },
            )
            .expect("put same");
        let same = store.versions("w").expect("versions");
        let last = same.last().expect("last");
        assert!(
            last.encodings.iter().all(|e| e.reference),
            "{policy:?}: {last:?}"
        );
        assert!(last.stored_bytes <= 64 * last.encodings.len() as u64 + 64);

        drop(store);
        let mut steps: Vec<u64> = (0..12).map(|k| k * 10).chain([1000]).collect();
        let mut expect: Vec<Vec<u8>> = data.iter().cloned().chain([data[11].clone()]).collect();
        // Drop a middle version, the first (a keyframe others depend on), and one more.
        for victim in [50u64, 0, 110, 60] {
            // A fresh handle each time: reads must not lean on the cache of the writer.
            open(&path, policy).delete("w", victim).expect("delete");
            let i = steps.iter().position(|&s| s == victim).expect("present");
            steps.remove(i);
            expect.remove(i);
            let store = open(&path, policy);
            check_all(&store, "w", &steps, &expect);
            assert!(matches!(
                store.get("w", victim),
                Err(StoreError::NotFound(NotFound::Version { .. }))
            ));
            let report = store.verify().expect("verify");
            assert!(
                report.is_ok(),
                "{policy:?} after deleting {victim}: {:?}",
                report.issues
            );
            for v in store.versions("w").expect("versions") {
                for e in &v.encodings {
                    assert!(
                        e.depth <= 4,
                        "{policy:?}: chain {} at step {}",
                        e.depth,
                        v.step
                    );
                    if let Some(b) = e.base {
                        assert!(steps.contains(&b), "base {b} of {} was deleted", v.step);
                    }
                }
            }
        }
        let store = open(&path, policy);
        // Delete everything: no segment may be left behind.
        for s in steps.clone() {
            store.delete("w", s).expect("delete all");
        }
        let stats = store.stats().expect("stats");
        assert_eq!(
            (stats.segments, stats.segment_bytes, stats.versions),
            (0, 0, 0)
        );
        assert!(store.tensors().expect("tensors").is_empty());
    }
}

#[test]
fn delete_shrinks_the_file_after_compact() {
    let (_d, path) = temp_store();
    let n = 200_000;
    let mut store = Store::open(&path).expect("open");
    let shape = [n as u64];
    for k in 0..6u64 {
        let d = f32_bytes(&noise(n, k + 10));
        store
            .put(
                "big",
                k,
                &TensorRef {
                    dtype: DType::F32,
                    shape: &shape,
                    bytes: &d,
                },
            )
            .expect("put");
    }
    store.compact().expect("compact");
    let before = store.stats().expect("stats").file_bytes;
    for k in 0..5u64 {
        store.delete("big", k).expect("delete");
    }
    store.compact().expect("compact");
    let after = store.stats().expect("stats");
    assert!(
        after.file_bytes * 3 < before,
        "file {before} -> {} after deleting 5 of 6 versions",
        after.file_bytes
    );
    assert_eq!(
        store.get("big", 5).expect("get").data,
        f32_bytes(&noise(n, 15))
    );
}

#[test]
fn deleting_a_checkpoint_tensor_updates_the_checkpoint() {
    let (_d, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let a = f32_bytes(&[1.0, 2.0]);
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[2],
        bytes: &a,
    };
    store
        .save_checkpoint(7, &[("a", t), ("b", t)], "{}")
        .expect("checkpoint");
    store.tag("best", 7).expect("tag");
    store.delete("a", 7).expect("delete a");
    let cp = store.load_checkpoint(7).expect("load");
    assert_eq!(cp.tensors.len(), 1);
    assert_eq!(cp.tensors[0].0, "b");
    store.delete("b", 7).expect("delete b");
    assert!(store.checkpoints().expect("list").is_empty());
    assert!(store.tags().expect("tags").is_empty());
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn delete_checkpoint_removes_it_whole_and_keeps_the_others_exact() {
    let (_dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let data = |s: u64| -> Vec<u8> {
        (0..4096u32)
            .flat_map(|i| ((i as f32) * 0.01 + s as f32 * 1e-3).to_le_bytes())
            .collect()
    };
    for s in 1..=4u64 {
        let d = data(s);
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[64, 64],
            bytes: &d,
        };
        store
            .save_checkpoint(s, &[("a", t), ("b", t)], "")
            .expect("save");
    }
    store.tag("two", 2).expect("tag");
    // Step 2 is the base of step 3's deltas: they are re-based in the same transaction.
    assert_eq!(store.delete_checkpoint(2).expect("delete"), 2);
    assert_eq!(store.checkpoints().expect("list"), vec![1, 3, 4]);
    assert!(store.tags().expect("tags").is_empty());
    for s in [1u64, 3, 4] {
        for n in ["a", "b"] {
            assert_eq!(store.get(n, s).expect("get").data, data(s), "{n} {s}");
        }
    }
    assert!(matches!(
        store.delete_checkpoint(2),
        Err(StoreError::NotFound(NotFound::Checkpoint { step: 2 }))
    ));
    assert!(store.verify().expect("verify").is_ok());
}

/// Blocks whose deltas are the same bytes against different base blocks (a tensor whose every
/// sign flipped) must not share a segment: deleting the base re-encodes each from its own data
/// (a re-base reuses the work of a dependent with the same segment address). The base block's
/// hash in each delta segment keeps their addresses apart.
#[test]
fn deleting_a_base_keeps_blocks_that_share_a_delta_segment_apart() {
    for dtype in [DType::U8, DType::BF16, DType::F32] {
        let (_d, path) = temp_store();
        let v1 = f32_bytes(&noise(16_384, 3)); // 4 blocks of 16 KiB
                                               // Every element's sign bit (its last byte's top bit) flipped.
        let size = dtype.size();
        let v2: Vec<u8> = v1
            .iter()
            .enumerate()
            .map(|(i, b)| if i % size == size - 1 { b ^ 0x80 } else { *b })
            .collect();
        let data = [v1, v2];
        let store = open(&path, DeltaPolicy::Chain);
        let shape = [(data[0].len() / size) as u64];
        for (k, d) in data.iter().enumerate() {
            store
                .put(
                    "w",
                    k as u64 + 1,
                    &TensorRef {
                        dtype,
                        shape: &shape,
                        bytes: d,
                    },
                )
                .expect("put");
        }
        store.delete("w", 1).expect("delete");
        check_all(&store, "w", &[2], &data[1..]);
        drop(store);
        let store = Store::open(&path).expect("reopen");
        check_all(&store, "w", &[2], &data[1..]);
        assert!(store.verify().expect("verify").is_ok());
    }
}

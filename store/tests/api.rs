//! The tensor API on small synthetic data: partial reads, history, tags, stats.

mod common;

use common::{f32_bytes, noise, temp_store};
use strata_store::{DType, DeltaPolicy, Options, Store, TensorRef};

#[test]
fn partial_reads_decode_only_what_they_need() {
    let (_d, path) = temp_store();
    let store = Store::open_with(
        &path,
        Options {
            block_bytes: 1000, // 250 f32 per block; the last block is short
            cache_bytes: 0,
            ..Options::default()
        },
    )
    .expect("open");
    let v = noise(1234, 5);
    let bytes = f32_bytes(&v);
    let shape = [2u64, 617];
    let t = TensorRef {
        dtype: DType::F32,
        shape: &shape,
        bytes: &bytes,
    };
    store.put("w", 3, &t).expect("put");
    assert_eq!(store.versions("w").expect("versions")[0].encodings.len(), 5);
    for r in [0..0, 0..1, 249..251, 250..500, 1000..1234, 0..1234, 7..1111] {
        let s = store.get_range("w", 3, r.clone()).expect("range");
        assert_eq!(s.elems, r);
        assert_eq!(s.shape, shape.to_vec());
        assert!(
            s.data == bytes[r.start as usize * 4..r.end as usize * 4],
            "{r:?}"
        );
    }
}

#[test]
fn history_lookups() {
    let (_d, path) = temp_store();
    // The bases asserted below are forward chains' (ADR 0006): the newest kept a keyframe
    // is tested in `newest_keyframe.rs`.
    let store = Store::open_with(
        &path,
        Options {
            newest_keyframe: false,
            ..Options::default()
        },
    )
    .expect("open");
    let vals: Vec<Vec<u8>> = (0..4).map(|k| f32_bytes(&noise(100, k))).collect();
    for (k, v) in vals.iter().enumerate() {
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[100],
            bytes: v,
        };
        store.put("x", k as u64 * 100, &t).expect("put");
    }
    let bf = vec![0u8; 8];
    store
        .put(
            "y",
            5,
            &TensorRef {
                dtype: DType::BF16,
                shape: &[4],
                bytes: &bf,
            },
        )
        .expect("put y");
    assert_eq!(store.tensors().expect("tensors"), vec!["x", "y"]);
    let (s, t) = store.get_at("x", 250).expect("get_at");
    assert_eq!((s, &t.data), (200, &vals[2]));
    let (s, t) = store.latest("x").expect("latest");
    assert_eq!((s, &t.data), (300, &vals[3]));
    let versions = store.versions("x").expect("versions");
    assert_eq!(
        versions.iter().map(|v| v.step).collect::<Vec<_>>(),
        vec![0, 100, 200, 300]
    );
    assert!(versions[0].encodings[0].base.is_none());
    assert_eq!(versions[1].encodings[0].base, Some(0));
    assert_eq!(versions[1].raw_bytes, 400);
    // Out-of-order puts between existing steps: based on the version before them.
    for (step, v) in [(150u64, &vals[1]), (160, &vals[0])] {
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[100],
            bytes: v,
        };
        store.put("x", step, &t).expect("put between");
    }
    let v = store.versions("x").expect("versions");
    assert!(v[2].encodings[0].reference, "150 equals 100: {:?}", v[2]);
    assert_eq!(v[3].encodings[0].base, Some(150));
    assert_eq!(store.get("x", 150).expect("get").data, vals[1]);
    assert_eq!(store.get("x", 160).expect("get").data, vals[0]);
    assert_eq!(store.get("x", 200).expect("get").data, vals[2]);
    assert_eq!(store.get("y", 5).expect("get y").dtype, DType::BF16);
}

#[test]
fn tags_and_checkpoint_metadata() {
    let (_d, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let v = f32_bytes(&[1.0]);
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[],
        bytes: &v,
    };
    store
        .save_checkpoint(1, &[("s", t)], "{\"loss\": 2.5}")
        .expect("cp1");
    store.save_checkpoint(2, &[("s", t)], "").expect("cp2");
    store.tag("best", 1).expect("tag");
    store.tag("last", 2).expect("tag");
    store.tag("best", 2).expect("move tag");
    assert_eq!(
        store.tags().expect("tags"),
        vec![("best".to_string(), 2), ("last".to_string(), 2)]
    );
    store.untag("last").expect("untag");
    assert_eq!(store.tags().expect("tags").len(), 1);
    assert_eq!(
        store.checkpoint_metadata(1).expect("meta"),
        "{\"loss\": 2.5}"
    );
    assert_eq!(store.checkpoints().expect("list"), vec![1, 2]);
    // A scalar of a checkpoint is packed (ADR 0041), changed or not: read as an inline
    // version, it stores its share of its pack part.
    let second = &store.versions("s").expect("v")[1];
    assert!(second.encodings[0].inline && !second.encodings[0].reference);
    assert!(second.stored_bytes <= 4 + 32, "{second:?}");
}

#[test]
fn chain_and_star_bound_the_read_work() {
    for policy in [DeltaPolicy::Chain, DeltaPolicy::Star] {
        let (_d, path) = temp_store();
        let store = Store::open_with(
            &path,
            Options {
                policy,
                max_chain: 3,
                // Forward chains' bound; the newest kept a keyframe: `newest_keyframe.rs`.
                newest_keyframe: false,
                ..Options::default()
            },
        )
        .expect("open");
        let mut v = noise(5000, 9);
        for k in 0..10u64 {
            v[k as usize] += 1.0;
            let b = f32_bytes(&v);
            store
                .put(
                    "w",
                    k,
                    &TensorRef {
                        dtype: DType::F32,
                        shape: &[5000],
                        bytes: &b,
                    },
                )
                .expect("put");
        }
        let versions = store.versions("w").expect("versions");
        let keyframes: Vec<u64> = versions
            .iter()
            .filter(|v| v.encodings[0].base.is_none())
            .map(|v| v.step)
            .collect();
        for v in &versions {
            assert!(v.encodings[0].depth <= 3);
        }
        match policy {
            DeltaPolicy::Chain => {
                // A full chain anchors on the keyframe (depth 2) instead of starting anew.
                // Every other version deltas against its predecessor, or anchors when the
                // predecessor is at the depth limit.
                assert_eq!(keyframes, vec![0]);
                let mut anchors = Vec::new();
                for w in versions.windows(2) {
                    let (prev, v) = (&w[0].encodings[0], &w[1].encodings[0]);
                    if prev.depth == 3 {
                        assert_eq!((v.base, v.depth), (Some(0), 2), "step {}", w[1].step);
                        anchors.push(w[1].step);
                    } else {
                        assert_eq!(v.base, Some(w[0].step), "step {}", w[1].step);
                        assert_eq!(v.depth, prev.depth + 1, "step {}", w[1].step);
                    }
                }
                assert_eq!(anchors, vec![3, 5, 7, 9]);
            }
            DeltaPolicy::Star => {
                assert_eq!(keyframes, vec![0, 3, 6, 9]);
                for v in &versions {
                    if let Some(b) = v.encodings[0].base {
                        assert!(keyframes.contains(&b), "star base {b} is not a keyframe");
                    }
                }
            }
        }
    }
}

#[test]
fn identical_tensors_share_segments() {
    let (_d, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let v = f32_bytes(&noise(10_000, 1));
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[10_000],
        bytes: &v,
    };
    store.put("a", 1, &t).expect("a");
    store.put("b", 1, &t).expect("b");
    let s = store.stats().expect("stats");
    assert_eq!(s.segments, 1);
    assert_eq!(s.raw_bytes, 80_000);
    assert_eq!(s.tensors.len(), 2);
    store.delete("a", 1).expect("delete");
    assert_eq!(store.get("b", 1).expect("b").data, v);
    assert!(store.verify().expect("verify").is_ok());
}

/// `checkpoint_summaries` counts in one pass what the per-version calls give: each
/// checkpoint's tensors, raw and stored bytes (blocks that refer to earlier ones add no
/// segment) and the worst error of its aged versions; a version outside any checkpoint (a
/// `put`) and a checkpoint's tensor deleted since are not counted.
#[test]
fn checkpoint_summaries_sum_what_versions_say() {
    let (_d, path) = temp_store();
    let mut store = Store::open_with(
        &path,
        Options {
            block_bytes: 4000,
            ..Options::default()
        },
    )
    .expect("open");
    let shape_w = [40u64, 100];
    // A matrix, so that it keeps records of its own; the counter is packed (ADR 0041).
    let shape_b = [1u64, 100];
    for step in 1..=6u64 {
        let counter = (step as f32).to_le_bytes();
        let w = f32_bytes(&noise(4000, step));
        // The bias does not change: its later versions refer to the first one's blocks.
        let b = f32_bytes(&noise(100, 100));
        let tensors = [
            (
                "layer.weight",
                TensorRef {
                    dtype: DType::F32,
                    shape: &shape_w,
                    bytes: &w,
                },
            ),
            (
                "layer.bias",
                TensorRef {
                    dtype: DType::F32,
                    shape: &shape_b,
                    bytes: &b,
                },
            ),
            (
                "optimizer.step",
                TensorRef {
                    dtype: DType::F32,
                    shape: &[],
                    bytes: &counter,
                },
            ),
        ];
        store
            .save_checkpoint(step * 10, &tensors, "{}")
            .expect("save");
    }
    let extra = f32_bytes(&noise(100, 7));
    let t = TensorRef {
        dtype: DType::F32,
        shape: &shape_b,
        bytes: &extra,
    };
    store.put("loose", 30, &t).expect("put");
    store.delete("layer.bias", 60).expect("delete");
    let report = store
        .age(&strata_store::AgePolicy {
            budget: 1e-2,
            ..strata_store::AgePolicy::default()
        })
        .expect("age");
    assert!(!report.aged.is_empty());

    let summaries = store.checkpoint_summaries().expect("summaries");
    assert_eq!(
        summaries.iter().map(|s| s.step).collect::<Vec<_>>(),
        store.checkpoints().expect("checkpoints")
    );
    for s in &summaries {
        let info = store.checkpoint_info(s.step).expect("info");
        assert_eq!(s.tensors, info.tensors.len());
        let (mut raw, mut stored, mut aged) = (0, 0, None::<f64>);
        for name in &info.tensors {
            let Ok(v) = store.version_info(name, s.step) else {
                continue;
            };
            raw += v.raw_bytes;
            stored += v.stored_bytes;
            if let Some(e) = v.aged {
                aged = Some(aged.map_or(e, |w| w.max(e)));
            }
        }
        assert_eq!(
            (s.raw_bytes, s.stored_bytes, s.aged),
            (raw, stored, aged),
            "{s:?}"
        );
        assert_eq!(s.aged.is_some(), report.aged.contains(&s.step), "{s:?}");
    }
    let last = summaries.last().expect("a checkpoint");
    assert_eq!(last.raw_bytes, 16_004, "the deleted bias is not counted");
    assert!(summaries.iter().any(|s| {
        let info = store.version_info("layer.bias", s.step);
        info.is_ok_and(|v| v.encodings.iter().all(|e| e.reference))
    }));
}

/// A read-only handle opens with the reading defaults (a small redb page cache, ADR 0031),
/// reads what the writer wrote, and a writer keeps the write defaults.
#[test]
fn read_only_handles_keep_a_small_page_cache() {
    let (_d, path) = temp_store();
    let bytes = f32_bytes(&noise(300, 7));
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[300],
        bytes: &bytes,
    };
    let writer = Store::open(&path).expect("open");
    writer.put("w", 1, &t).expect("put");
    assert_eq!(
        writer.options().db_cache_bytes,
        Options::default().db_cache_bytes
    );
    let reader = Store::open_read_only(&path).expect("open read-only");
    assert_eq!(
        reader.options().db_cache_bytes,
        strata_store::READ_DB_CACHE_BYTES
    );
    assert!(strata_store::READ_DB_CACHE_BYTES < Options::default().db_cache_bytes);
    assert_eq!(reader.get("w", 1).expect("get").data, bytes);
}

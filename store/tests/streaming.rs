//! Streaming writes and reads: the checkpoint writer (commit, drop, errors), tensors larger
//! than the write window, the checkpoint reader, block reads, history, and imports of bad or
//! truncated files leaving nothing behind.

#![allow(clippy::unwrap_used, clippy::panic, missing_docs)]

mod common;

use common::{f32_bytes, noise, temp_store};
use strata_store::{
    DType, InvalidInput, NotFound, Options, Store, StoreError, TensorRef, TierPolicy,
};

/// A store whose windows are small, so that every path crosses window boundaries, and
/// whose redb cache is small, so that writes past 128 KiB write pages to the file before their
/// commit, with the background writeback syncing them (commits, drops and errors alike).
fn small_windows(path: &std::path::Path) -> Store {
    let opts = Options {
        block_bytes: 4096,
        window_bytes: 64 << 10,
        db_cache_bytes: 256 << 10,
        ..Options::default()
    };
    Store::open_with(path, opts).unwrap()
}

fn tensor(values: &[f32]) -> Vec<u8> {
    f32_bytes(values)
}

#[test]
fn writer_commits_whole_checkpoints_larger_than_the_window() {
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    let big = tensor(&noise(300_000, 1)); // 1.2 MB: 19 windows of 64 KiB
    let small: Vec<Vec<u8>> = (0..40).map(|i| tensor(&noise(100 + i, i as u64))).collect();
    let mut w = store.begin_checkpoint(10, "meta").unwrap();
    w.put(
        "big",
        &TensorRef {
            dtype: DType::F32,
            shape: &[300_000],
            bytes: &big,
        },
    )
    .unwrap();
    for (i, s) in small.iter().enumerate() {
        let shape = [s.len() as u64 / 4];
        w.put(
            &format!("small.{i}"),
            &TensorRef {
                dtype: DType::F32,
                shape: &shape,
                bytes: s,
            },
        )
        .unwrap();
    }
    assert_eq!(w.len(), 41);
    // Nothing is visible before the commit, from another handle's point of view.
    assert!(store.checkpoints().unwrap().is_empty());
    w.commit().unwrap();
    let cp = store.load_checkpoint(10).unwrap();
    assert_eq!(cp.metadata, "meta");
    assert_eq!(cp.tensors.len(), 41);
    assert_eq!(cp.tensors[0].0, "big");
    assert_eq!(cp.tensors[0].1.data, big);
    for (i, s) in small.iter().enumerate() {
        assert_eq!(cp.tensors[i + 1].0, format!("small.{i}"));
        assert_eq!(&cp.tensors[i + 1].1.data, s);
    }
    assert!(store.verify().unwrap().is_ok());

    // A second step: deltas against the first, still window by window.
    let mut next = noise(300_000, 1);
    for v in next.iter_mut().step_by(7) {
        *v += 1e-3;
    }
    let next = tensor(&next);
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[300_000],
        bytes: &next,
    };
    store.save_checkpoint(20, &[("big", t)], "").unwrap();
    assert_eq!(store.get("big", 20).unwrap().data, next);
    let v = store.versions("big").unwrap();
    // Blocks of 4 KiB: keyframes too small to be re-encoded against the newest (ADR 0006),
    // so forward chains.
    assert!(v[1].encodings.iter().any(|e| e.base == Some(10)));
}

#[test]
fn a_dropped_writer_leaves_nothing_and_the_store_writable() {
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    let data = tensor(&noise(50_000, 3));
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[50_000],
        bytes: &data,
    };
    {
        let mut w = store.begin_checkpoint(5, "").unwrap();
        w.put("a", &t).unwrap();
        w.put("b", &t).unwrap();
        // Dropped here without commit.
    }
    assert!(store.checkpoints().unwrap().is_empty());
    assert!(store.tensors().unwrap().is_empty());
    let stats = store.stats().unwrap();
    assert_eq!(
        stats.segments, 0,
        "no segment of the dropped write is stored"
    );
    assert!(store.verify().unwrap().is_ok());
    store.save_checkpoint(5, &[("a", t)], "").unwrap();
    assert_eq!(store.get("a", 5).unwrap().data, data);
}

#[test]
fn writer_errors_are_typed_and_poison_nothing_committed() {
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    let data = tensor(&noise(1000, 4));
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[1000],
        bytes: &data,
    };
    store.save_checkpoint(1, &[("a", t)], "").unwrap();
    assert!(matches!(
        store.begin_checkpoint(1, "").unwrap_err(),
        StoreError::Invalid(InvalidInput::CheckpointExists { step: 1 })
    ));
    let mut w = store.begin_checkpoint(2, "").unwrap();
    w.put("a", &t).unwrap();
    assert!(matches!(
        w.put("a", &t).unwrap_err(),
        StoreError::Invalid(InvalidInput::DuplicateTensor { .. })
    ));
    let short = TensorRef {
        dtype: DType::F32,
        shape: &[1001],
        bytes: &data,
    };
    assert!(matches!(
        w.put("b", &short).unwrap_err(),
        StoreError::Invalid(InvalidInput::DataLength { .. })
    ));
    // Input errors caught before anything was written leave the writer usable.
    w.put("c", &t).unwrap();
    w.commit().unwrap();
    let cp = store.checkpoint_info(2).unwrap();
    assert_eq!(cp.tensors, vec!["a".to_string(), "c".to_string()]);
    assert!(store.verify().unwrap().is_ok());
}

#[test]
fn reader_streams_what_load_returns_and_blocks_read_in_bounded_pieces() {
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    let names: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    let datas: Vec<Vec<u8>> = (0..12)
        .map(|i| tensor(&noise(1000 * (i + 1) * (i + 1), i as u64)))
        .collect();
    let shapes: Vec<[u64; 1]> = datas.iter().map(|d| [d.len() as u64 / 4]).collect();
    let refs: Vec<(&str, TensorRef<'_>)> = names
        .iter()
        .zip(&datas)
        .zip(&shapes)
        .map(|((n, d), s)| {
            (
                n.as_str(),
                TensorRef {
                    dtype: DType::F32,
                    shape: s,
                    bytes: d,
                },
            )
        })
        .collect();
    store.save_checkpoint(3, &refs, "m").unwrap();
    let mut reader = store.read_checkpoint(3).unwrap();
    assert_eq!(reader.metadata(), "m");
    assert_eq!(reader.remaining(), 12);
    let mut got = Vec::new();
    for item in &mut reader {
        got.push(item.unwrap());
    }
    assert_eq!(got.len(), 12);
    for ((n, t), (name, data)) in got.iter().zip(names.iter().zip(&datas)) {
        assert_eq!(n, name);
        assert_eq!(&t.data, data);
    }
    // Block by block: element ranges tile the tensor, bytes equal.
    let mut seen = Vec::new();
    let mut next = 0u64;
    let read = store
        .get_blocks("t11", 3, |elems, bytes| {
            assert_eq!(elems.start, next);
            next = elems.end;
            seen.extend_from_slice(bytes);
            Ok(())
        })
        .unwrap();
    assert_eq!(read.shape, vec![144_000]);
    assert!(read.fidelity.is_exact());
    assert_eq!(seen, datas[11]);
    let mut buf = vec![0u8; datas[5].len()];
    store.get_into("t5", 3, &mut buf).unwrap();
    assert_eq!(buf, datas[5]);
    let mut wrong = vec![0u8; 8];
    assert!(matches!(
        store.get_into("t5", 3, &mut wrong).unwrap_err(),
        StoreError::Invalid(InvalidInput::DataLength { .. })
    ));
    // A sink error stops the read and comes back.
    let err = store
        .get_blocks("t11", 3, |_, _| {
            Err(StoreError::Invalid(InvalidInput::Options {
                reason: "stop".into(),
            }))
        })
        .unwrap_err();
    assert!(err.to_string().contains("stop"));
    assert!(matches!(
        store.read_checkpoint(4).unwrap_err(),
        StoreError::NotFound(NotFound::Checkpoint { step: 4 })
    ));
}

#[test]
fn history_equals_reads_of_each_version() {
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    let mut values = noise(20_000, 9);
    let mut expected = Vec::new();
    // 40 versions: a history of all of them is read in runs, one per thread (16 or more
    // versions each), each run starting with a decode of the chain under its first version.
    for step in 0..40u64 {
        for v in values.iter_mut().skip(step as usize % 5).step_by(5) {
            *v *= 1.0001;
        }
        let data = tensor(&values);
        store
            .put(
                "w",
                step * 10,
                &TensorRef {
                    dtype: DType::F32,
                    shape: &[100, 200],
                    bytes: &data,
                },
            )
            .unwrap();
        expected.push((step * 10, data));
    }
    let elems = 4000..5100; // crosses a 1024-element block boundary
    let rows = store.history("w", elems.clone(), 50..=200).unwrap();
    let want: Vec<_> = expected
        .iter()
        .filter(|(s, _)| (50..=200).contains(s))
        .collect();
    assert_eq!(rows.len(), want.len());
    for ((step, slice), (s, data)) in rows.iter().zip(want) {
        assert_eq!(step, s);
        assert_eq!(slice.data, data[4000 * 4..5100 * 4]);
        assert_eq!(
            slice.data,
            store.get_range("w", *s, elems.clone()).unwrap().data
        );
    }
    let all = store.history("w", elems.clone(), ..).unwrap();
    assert_eq!(all.len(), expected.len());
    for ((step, slice), (s, data)) in all.iter().zip(&expected) {
        assert_eq!(step, s);
        assert_eq!(slice.data, data[4000 * 4..5100 * 4], "step {s}");
    }
    assert!(matches!(
        store.history("w", 0..30_000, ..).unwrap_err(),
        StoreError::Invalid(InvalidInput::Range { .. })
    ));
    assert!(matches!(
        store.history("nope", 0..1, ..).unwrap_err(),
        StoreError::NotFound(NotFound::Tensor { .. })
    ));
    assert_eq!(store.history("w", 3..3, ..).unwrap().len(), 40);
}

#[test]
fn partial_and_whole_reads_share_the_cache() {
    // Partial reads decode the first elements of a block's chain and cache them apart from
    // whole blocks: reads in any order, cold or warm, give the stored bytes.
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    let mut values = noise(5_000, 4);
    let mut expected = Vec::new();
    for step in 1..=8u64 {
        for v in values.iter_mut().step_by(3) {
            *v *= 1.001;
        }
        let data = tensor(&values);
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[5_000],
            bytes: &data,
        };
        store.put("w", step, &t).unwrap();
        expected.push(data);
    }
    // Block 1 holds elements 1024..2048: ends inside it, at its start, and at its end.
    for end in [1025u64, 1500, 2047, 2048, 5_000] {
        for (i, data) in expected.iter().enumerate().rev() {
            let step = i as u64 + 1;
            let part = store.get_range("w", step, 1000..end).unwrap();
            assert_eq!(
                part.data,
                data[4000..end as usize * 4],
                "step {step} ..{end}"
            );
            assert_eq!(store.get("w", step).unwrap().data, *data);
            let again = store.get_range("w", step, 1000..end).unwrap();
            assert_eq!(again.data, part.data);
        }
        let rows = store.history("w", 1000..end, ..).unwrap();
        assert_eq!(rows.len(), expected.len());
        for ((_, row), data) in rows.iter().zip(&expected) {
            assert_eq!(row.data, data[4000..end as usize * 4]);
        }
    }
}

#[test]
fn tiered_tensors_stream_through_the_writer() {
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    store
        .set_policy("kv.*", TierPolicy::tiered(strata_store::Tier::Hot8))
        .unwrap();
    let data = tensor(&noise(70_000, 11));
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[70_000],
        bytes: &data,
    };
    store
        .save_checkpoint(1, &[("kv.0", t), ("w", t)], "")
        .unwrap();
    let kv = store.get("kv.0", 1).unwrap();
    assert!(matches!(
        kv.fidelity,
        strata_store::Fidelity::Bounded { bits: 8, .. }
    ));
    assert_eq!(store.get("w", 1).unwrap().data, data);
    assert_eq!(store.tier_stats().blocks, 70_000 * 4 / 4096 + 1);
    assert!(store.verify().unwrap().is_ok());
}

/// A safetensors file of one f32 tensor of `n` values.
fn safetensors_file(n: usize) -> Vec<u8> {
    safetensors_of(&noise(n, 5))
}

/// A safetensors file of one f32 tensor `x` holding `values`.
fn safetensors_of(values: &[f32]) -> Vec<u8> {
    let n = values.len();
    let data = tensor(values);
    let header = format!(
        r#"{{"x":{{"dtype":"F32","shape":[{n}],"data_offsets":[0,{}]}}}}"#,
        data.len()
    );
    let mut header = header.into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(data);
    out
}

#[test]
fn imports_stream_from_files_and_bad_files_leave_nothing() {
    let (dir, path) = temp_store();
    let store = small_windows(&path);
    let file = safetensors_file(100_000);
    let good = dir.path().join("good.safetensors");
    std::fs::write(&good, &file).unwrap();
    let report = store.import_safetensors(&good, 7).unwrap();
    assert_eq!(report.tensors, 1);
    let out = dir.path().join("out.safetensors");
    store.export_safetensors(7, &out).unwrap();
    assert_eq!(
        std::fs::read(&out).unwrap(),
        file,
        "export is byte-identical"
    );

    // Truncated mid-tensor: the header says more data than the file has.
    let cut = dir.path().join("cut.safetensors");
    std::fs::write(&cut, &file[..file.len() - 1000]).unwrap();
    assert!(matches!(
        store.import_safetensors(&cut, 8).unwrap_err(),
        StoreError::Invalid(InvalidInput::SafeTensorsFile { .. })
    ));
    // A header that claims an absurd length.
    let mut huge = file.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let bad = dir.path().join("bad.safetensors");
    std::fs::write(&bad, &huge).unwrap();
    assert!(matches!(
        store.import_safetensors(&bad, 8).unwrap_err(),
        StoreError::Invalid(InvalidInput::SafeTensorsFile { .. })
    ));
    std::fs::write(&bad, b"1234").unwrap();
    assert!(store.import_safetensors(&bad, 8).is_err());
    assert_eq!(store.checkpoints().unwrap(), vec![7]);
    assert!(store.verify().unwrap().is_ok());

    // A fine-tuned successor: deltas whose bases are fetched for the next window while the
    // pool encodes the one before, from window buffers reused across windows (the last one
    // shorter), exported byte for byte.
    let mut values = noise(100_000, 5);
    for (i, v) in values.iter_mut().enumerate() {
        if i % 3 == 0 {
            *v += 1e-3 * (i % 7) as f32;
        }
    }
    let next = safetensors_of(&values);
    let successor = dir.path().join("next.safetensors");
    std::fs::write(&successor, &next).unwrap();
    store.import_safetensors(&successor, 9).unwrap();
    let versions = store.versions("x").unwrap();
    // Blocks of 4 KiB: keyframes too small to be re-encoded against the newest (ADR 0006),
    // so forward chains.
    let at_9 = versions.iter().find(|v| v.step == 9).expect("version 9");
    assert!(
        at_9.encodings.len() > 16 && at_9.encodings.iter().all(|e| e.base == Some(7)),
        "step 9 is stored as deltas against step 7, in many windows"
    );
    store.export_safetensors(9, &out).unwrap();
    assert_eq!(
        std::fs::read(&out).unwrap(),
        next,
        "delta export is byte-identical"
    );
    assert!(store.verify().unwrap().is_ok());
}

#[test]
fn put_many_writes_borrowed_tensors_in_groups_and_checks_all_before_writing() {
    let (_dir, path) = temp_store();
    let store = small_windows(&path);
    // 60 small tensors of 4 KB (several pipelined groups, several windows) around a large one.
    let steps: Vec<Vec<Vec<u8>>> = (0..2u64)
        .map(|s| {
            (0..61u64)
                .map(|i| {
                    let n = if i == 30 { 300_000 } else { 1000 };
                    let v: Vec<f32> = noise(n, i)
                        .iter()
                        .enumerate()
                        .map(|(k, x)| if k % 3 == 0 { x + s as f32 * 1e-3 } else { *x })
                        .collect();
                    tensor(&v)
                })
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..61).map(|i| format!("layer.{i:02}.w")).collect();
    let refs = |data: &[Vec<u8>]| -> Vec<Vec<u64>> {
        data.iter().map(|d| vec![(d.len() / 4) as u64]).collect()
    };
    for (s, data) in steps.iter().enumerate() {
        let shapes = refs(data);
        let tensors: Vec<(&str, TensorRef<'_>)> = names
            .iter()
            .zip(data)
            .zip(&shapes)
            .map(|((n, d), shape)| {
                (
                    n.as_str(),
                    TensorRef {
                        dtype: DType::F32,
                        shape,
                        bytes: d,
                    },
                )
            })
            .collect();
        let step = 10 * (s as u64 + 1);
        let mut w = store.begin_checkpoint(step, "").unwrap();
        // A name given twice, or a shape that does not match its bytes, is refused before
        // anything is written: the writer stays usable.
        let mut twice = tensors.clone();
        twice.push(tensors[5]);
        assert!(matches!(
            w.put_many(&twice).unwrap_err(),
            StoreError::Invalid(InvalidInput::DuplicateTensor { .. })
        ));
        let mut bad = tensors.clone();
        bad[40].1.shape = &[7];
        assert!(matches!(
            w.put_many(&bad).unwrap_err(),
            StoreError::Invalid(InvalidInput::DataLength { .. })
        ));
        w.put_many(&tensors).unwrap();
        w.commit().unwrap();
    }
    for (s, data) in steps.iter().enumerate() {
        let step = 10 * (s as u64 + 1);
        let cp = store.load_checkpoint(step).unwrap();
        let got: Vec<&String> = cp.tensors.iter().map(|(n, _)| n).collect();
        assert_eq!(got, names.iter().collect::<Vec<_>>());
        for ((_, t), d) in cp.tensors.iter().zip(data) {
            assert!(t.data == *d, "step {step}");
        }
    }
    // The small tensors are packed (ADR 0041), and one checkpoint's pack part is a delta on
    // the other's: the two store less than one's raw bytes of them.
    let v = store.versions("layer.07.w").unwrap();
    assert!(
        v.iter().all(|v| v.encodings.iter().all(|e| e.inline)),
        "{v:?}"
    );
    let packed = store.stats().unwrap().packed_bytes;
    assert!(packed > 0 && packed < 2 * 60 * 4000 * 3 / 4, "{packed}");
    assert!(store.verify().unwrap().is_ok());
}

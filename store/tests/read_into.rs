//! `CheckpointReader::read_into`: a checkpoint decoded straight into the caller's buffers
//! gives exactly what the reader's iterator and `Store::get` give (keyframes, delta chains,
//! bases found in the cache, batches of many blocks, quantized, aged and Tier 0 versions, an
//! empty checkpoint, empty tensors, random tensor sets), its input errors are typed, and
//! damaged segments are errors, never other bytes.

#![allow(clippy::unwrap_used, clippy::panic, missing_docs)]

mod common;

use common::{f32_bytes, noise, temp_store};
use strata_store::{
    AgePolicy, Budget, Clock, Corruption, DType, Fidelity, InvalidInput, Options, PendingTensor,
    Reconstruct, Source, Store, StoreError, TensorRef, Tier, TierConfig, TierOptions, TierPolicy,
};

/// Blocks of 64 KiB: a tensor of 18 MB has 275 of them, more than a batch of a read (16 MiB).
fn small_blocks(path: &std::path::Path) -> Store {
    let opts = Options {
        block_bytes: 64 << 10,
        window_bytes: 256 << 10,
        ..Options::default()
    };
    Store::open_with(path, opts).unwrap()
}

/// One tensor to save: name, dtype, shape, bytes.
type Item = (String, DType, Vec<u64>, Vec<u8>);

/// Tensors of several dtypes and sizes, changed a little with each `step`.
fn checkpoint(step: u64, big: usize) -> Vec<Item> {
    let big = big / 64 * 64;
    let drift = |mut v: Vec<f32>| {
        for x in v.iter_mut().skip(step as usize % 3).step_by(3) {
            *x += step as f32 * 1e-3;
        }
        v
    };
    let mut items: Vec<Item> = vec![(
        "big".into(),
        DType::F32,
        vec![big as u64 / 64, 64],
        f32_bytes(&drift(noise(big, 1))),
    )];
    for i in 0..20u64 {
        let n = 100 + 997 * i as usize;
        items.push((
            format!("small.{i}"),
            DType::F32,
            vec![n as u64],
            f32_bytes(&drift(noise(n, 10 + i))),
        ));
    }
    let bf16: Vec<u8> = f32_bytes(&drift(noise(6000, 3)))
        .chunks(4)
        .flat_map(|c| [c[2], c[3]])
        .collect();
    items.push(("bf16".into(), DType::BF16, vec![60, 100], bf16));
    let counter: Vec<u8> = (0..8i64)
        .flat_map(|i| (i * step as i64).to_le_bytes())
        .collect();
    items.push(("counter".into(), DType::I64, vec![8], counter));
    items.push((
        "scalar".into(),
        DType::F32,
        vec![],
        f32_bytes(&[step as f32]),
    ));
    items
}

fn save(store: &Store, step: u64, items: &[Item]) {
    let refs: Vec<(&str, TensorRef<'_>)> = items
        .iter()
        .map(|(n, dtype, shape, bytes)| {
            (
                n.as_str(),
                TensorRef {
                    dtype: *dtype,
                    shape,
                    bytes,
                },
            )
        })
        .collect();
    store.save_checkpoint(step, &refs, "meta").unwrap();
}

/// Buffers for `pending`, read into by a new reader of `step`: the bytes and fidelities.
fn read_all(store: &Store, step: u64) -> (Vec<PendingTensor>, Vec<Vec<u8>>, Vec<Fidelity>) {
    let mut reader = store.read_checkpoint(step).unwrap();
    let pending = reader.pending().unwrap();
    let mut bufs: Vec<Vec<u8>> = pending
        .iter()
        .map(|t| vec![0xA5; t.bytes as usize])
        .collect();
    let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
    let fidelity = reader.read_into(&mut outs).unwrap();
    assert_eq!(reader.remaining(), 0);
    assert!(reader.next().is_none());
    (pending, bufs, fidelity)
}

/// What the reader's iterator gives for `step`: the reference `read_into` must equal.
fn iterated(store: &Store, step: u64) -> Vec<(String, strata_store::Tensor)> {
    store
        .read_checkpoint(step)
        .unwrap()
        .collect::<strata_store::Result<Vec<_>>>()
        .unwrap()
}

fn assert_same_as_iterator(store: &Store, step: u64) {
    let (pending, bufs, fidelity) = read_all(store, step);
    let want = iterated(store, step);
    assert_eq!(pending.len(), want.len());
    for (((p, buf), f), (name, t)) in pending.iter().zip(&bufs).zip(&fidelity).zip(&want) {
        assert_eq!(&p.name, name);
        assert_eq!((p.dtype, &p.shape), (t.dtype, &t.shape), "{name}");
        assert_eq!(p.bytes, t.data.len() as u64, "{name}");
        assert!(
            *buf == t.data,
            "step {step} {name}: other bytes than the iterator's"
        );
        assert_eq!(*f, t.fidelity, "{name}");
        let got = store.get(name, step).unwrap();
        assert!(
            *buf == got.data,
            "step {step} {name}: other bytes than get's"
        );
        assert_eq!(*f, got.fidelity, "{name}");
    }
}

#[test]
fn read_into_gives_what_the_iterator_gives_across_chains_batches_and_the_cache() {
    let (_dir, path) = temp_store();
    let store = small_blocks(&path);
    // 4.5 M values, 18 MB: more than a batch of a read.
    let big = 4_500_000;
    let mut saved = Vec::new();
    for step in 0..5u64 {
        let items = checkpoint(step, big);
        save(&store, step, &items);
        saved.push(items);
    }
    // A new handle: its block cache is empty (the writer's holds what it wrote), so every
    // block is read down its chain.
    drop(store);
    let store = small_blocks(&path);
    for (step, items) in saved.iter().enumerate() {
        let step = step as u64;
        let (pending, bufs, fidelity) = read_all(&store, step);
        assert_eq!(pending.len(), items.len());
        for ((p, buf), (name, dtype, shape, bytes)) in pending.iter().zip(&bufs).zip(items) {
            assert_eq!((&p.name, p.dtype, &p.shape), (name, *dtype, shape));
            assert!(buf == bytes, "step {step} {name}: other bytes than saved");
        }
        assert!(fidelity.iter().all(Fidelity::is_exact));
        assert_same_as_iterator(&store, step);
    }
    // Bases found in the block cache: a read that fills it, then chains that end on it.
    store.get("big", 2).unwrap();
    store.get("small.7", 3).unwrap();
    for step in [3, 4] {
        assert_same_as_iterator(&store, step);
    }
}

#[test]
fn read_into_after_the_iterator_took_some_and_its_input_errors() {
    let (_dir, path) = temp_store();
    let store = small_blocks(&path);
    let items = checkpoint(1, 20_000);
    save(&store, 1, &items);
    drop(store);
    let store = small_blocks(&path);

    // Two tensors handed out one by one; the rest read into buffers.
    let mut reader = store.read_checkpoint(1).unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.1.data, items[0].3);
    let pending = reader.pending().unwrap();
    assert_eq!(pending.len(), items.len() - 1);
    assert_eq!(pending[0].name, items[1].0);
    let mut bufs: Vec<Vec<u8>> = pending.iter().map(|t| vec![0; t.bytes as usize]).collect();
    let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
    reader.read_into(&mut outs).unwrap();
    for (buf, item) in bufs.iter().zip(&items[1..]) {
        assert_eq!(*buf, item.3, "{}", item.0);
    }

    // One buffer too few: typed, and the reader is at its end.
    let mut reader = store.read_checkpoint(1).unwrap();
    let pending = reader.pending().unwrap();
    let mut bufs: Vec<Vec<u8>> = pending.iter().map(|t| vec![0; t.bytes as usize]).collect();
    let mut outs: Vec<&mut [u8]> = bufs.iter_mut().skip(1).map(Vec::as_mut_slice).collect();
    assert!(matches!(
        reader.read_into(&mut outs).unwrap_err(),
        StoreError::Invalid(InvalidInput::Options { .. })
    ));
    assert!(reader.pending().unwrap().is_empty());
    assert!(reader.next().is_none());

    // A buffer of the wrong size names its tensor.
    let mut reader = store.read_checkpoint(1).unwrap();
    let mut bufs: Vec<Vec<u8>> = pending.iter().map(|t| vec![0; t.bytes as usize]).collect();
    bufs[3].pop();
    let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
    match reader.read_into(&mut outs).unwrap_err() {
        StoreError::Invalid(InvalidInput::DataLength { tensor, .. }) => {
            assert_eq!(tensor, pending[3].name)
        }
        other => panic!("expected DataLength, got {other}"),
    }
}

#[test]
fn read_into_reads_quantized_and_aged_versions_as_the_iterator_does() {
    let (_dir, path) = temp_store();
    let store = small_blocks(&path);
    store
        .set_policy("small.1*", TierPolicy::tiered(Tier::Hot8))
        .unwrap();
    for step in 0..4u64 {
        save(&store, step, &checkpoint(step, 50_000));
    }
    drop(store);
    let mut store = small_blocks(&path);
    let (pending, _, fidelity) = read_all(&store, 3);
    let quantized = pending.iter().position(|p| p.name == "small.12").unwrap();
    assert!(matches!(
        fidelity[quantized],
        Fidelity::Bounded { bits: 8, .. }
    ));
    assert_same_as_iterator(&store, 3);

    let report = store
        .age(&AgePolicy {
            keep_exact_last: 1,
            budget: 1e-2,
            ..AgePolicy::default()
        })
        .unwrap();
    assert_eq!(report.aged, vec![0, 1, 2]);
    drop(store);
    let store = small_blocks(&path);
    for step in 0..4 {
        assert_same_as_iterator(&store, step);
    }
    let (pending, _, fidelity) = read_all(&store, 1);
    let big = pending.iter().position(|p| p.name == "big").unwrap();
    assert!(matches!(fidelity[big], Fidelity::Aged { .. }));
}

#[test]
fn damaged_segments_are_errors_never_other_bytes() {
    let (_dir, path) = temp_store();
    let items = checkpoint(0, 30_000);
    {
        let mut store = small_blocks(&path);
        save(&store, 0, &items);
        save(&store, 1, &checkpoint(1, 30_000));
        store.compact().unwrap();
    }
    let clean = std::fs::read(&path).unwrap();
    let hits: Vec<usize> = clean
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"STSG")
        .map(|(i, _)| i)
        .collect();
    assert!(!hits.is_empty(), "no segment magic in the file");
    let mut failed = 0;
    for &at in hits.iter().step_by((hits.len() / 40).max(1)) {
        let mut bad = clean.clone();
        let Some(byte) = bad.get_mut(at + 60) else {
            continue;
        };
        *byte ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        let store = Store::open(&path).unwrap();
        let mut reader = store.read_checkpoint(0).unwrap();
        // A damaged pack part (ADR 0041) is found as the packed tensors are listed.
        let read = reader.pending().and_then(|pending| {
            let mut bufs: Vec<Vec<u8>> =
                pending.iter().map(|t| vec![0; t.bytes as usize]).collect();
            let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
            reader.read_into(&mut outs).map(|_| bufs)
        });
        match read {
            Ok(bufs) => {
                for (buf, item) in bufs.iter().zip(&items) {
                    assert!(*buf == item.3, "{}: other bytes, no error", item.0);
                }
            }
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        StoreError::Corrupt(
                            Corruption::Segment { .. } | Corruption::SegmentStorage { .. }
                        )
                    ),
                    "{e}"
                );
                failed += 1;
            }
        }
    }
    std::fs::write(&path, &clean).unwrap();
    assert!(failed > 0, "no damaged segment of step 0 was reported");
}

#[test]
fn read_into_of_an_empty_checkpoint_and_of_empty_tensors() {
    let (_dir, path) = temp_store();
    let store = small_blocks(&path);
    save(&store, 1, &[]);
    let mut reader = store.read_checkpoint(1).unwrap();
    assert!(reader.pending().unwrap().is_empty());
    assert!(reader.read_into(&mut []).unwrap().is_empty());
    assert!(reader.next().is_none());
    // One buffer for a checkpoint without tensors: typed.
    let mut reader = store.read_checkpoint(1).unwrap();
    let mut one = [0u8; 4];
    assert!(matches!(
        reader.read_into(&mut [&mut one[..]]).unwrap_err(),
        StoreError::Invalid(InvalidInput::Options { .. })
    ));

    // Tensors of no elements beside one with data.
    let items: Vec<Item> = vec![
        ("none".into(), DType::F32, vec![0], Vec::new()),
        ("w".into(), DType::F32, vec![3], f32_bytes(&[1.0, 2.0, 3.0])),
        ("rows".into(), DType::BF16, vec![4, 0], Vec::new()),
    ];
    save(&store, 2, &items);
    drop(store);
    let store = small_blocks(&path);
    let (pending, bufs, fidelity) = read_all(&store, 2);
    assert_eq!(
        pending.iter().map(|p| p.bytes).collect::<Vec<_>>(),
        [0, 12, 0]
    );
    for (buf, item) in bufs.iter().zip(&items) {
        assert_eq!(*buf, item.3, "{}", item.0);
    }
    assert!(fidelity.iter().all(Fidelity::is_exact));
    assert_same_as_iterator(&store, 2);
}

#[test]
fn read_into_rebuilds_tier_zero_blocks_as_get_does() {
    const HOUR: u64 = 3_600_000;
    let (_dir, path) = temp_store();
    let (clock, _handle) = Clock::manual(0);
    let opts = Options {
        block_bytes: 64 << 10,
        tiering: TierOptions {
            config: TierConfig::default(),
            budget: Budget::UNLIMITED,
            clock,
            ..TierOptions::default()
        },
        ..Options::default()
    };
    let store = Store::open_with(&path, opts.clone()).unwrap();
    // `twice` is `base` scaled by 2 (exact in f32): at Tier 0 it is rebuilt from `base`.
    store
        .set_policy(
            "twice",
            TierPolicy::tiered(Tier::Cold3).with_reconstruct(Reconstruct::Scaled {
                source: Source::same_step("base"),
                scale: 2.0,
                permutation: None,
            }),
        )
        .unwrap();
    let values = noise(40_000, 7);
    let base = f32_bytes(&values);
    let twice = f32_bytes(&values.iter().map(|x| x * 2.0).collect::<Vec<_>>());
    let mut items = checkpoint(1, 20_000);
    items.insert(1, ("base".into(), DType::F32, vec![40_000], base));
    items.push(("twice".into(), DType::F32, vec![200, 200], twice.clone()));
    save(&store, 1, &items);
    let report = store.maintain(48 * HOUR).unwrap();
    assert!(report.absent > 0, "{report:?}");
    drop(store);
    let store = Store::open_with(&path, opts).unwrap();
    let (pending, bufs, fidelity) = read_all(&store, 1);
    let at = pending.iter().position(|p| p.name == "twice").unwrap();
    assert!(
        matches!(fidelity[at], Fidelity::Reconstructed { .. }),
        "{:?}",
        fidelity[at]
    );
    assert!(bufs[at] == twice, "the rebuilt tensor differs");
    for (buf, item) in bufs.iter().zip(&items).filter(|(_, i)| i.0 != "twice") {
        assert!(*buf == item.3, "{}", item.0);
    }
    assert_same_as_iterator(&store, 1);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]

    /// Any set of tensors (dtypes, sizes from none to many blocks, steps that delta against
    /// the one before) reads into buffers exactly as `get` reads each tensor.
    #[test]
    fn read_into_equals_get_for_random_tensor_sets(
        sizes in proptest::collection::vec((0usize..4, 0usize..40_000), 0..10),
        steps in 1u64..4,
        seed in 0u64..1000,
    ) {
        let (_dir, path) = temp_store();
        let opts = Options {
            block_bytes: 16 << 10,
            window_bytes: 64 << 10,
            ..Options::default()
        };
        let store = Store::open_with(&path, opts.clone()).unwrap();
        let dtypes = [DType::F32, DType::BF16, DType::I64, DType::U8];
        for step in 0..steps {
            let items: Vec<Item> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(d, n))| {
                    let dtype = dtypes[d];
                    let mut bytes = f32_bytes(&noise(n.div_ceil(4), seed + i as u64));
                    bytes.truncate(n / dtype.size() * dtype.size());
                    // A few bytes change each step: deltas against the step before.
                    for b in bytes.iter_mut().skip(step as usize * 7 % 13).step_by(13) {
                        *b = b.wrapping_add(step as u8);
                    }
                    let elems = (bytes.len() / dtype.size()) as u64;
                    (format!("t{i}"), dtype, vec![elems], bytes)
                })
                .collect();
            save(&store, step, &items);
        }
        drop(store);
        let store = Store::open_with(&path, opts).unwrap();
        for step in 0..steps {
            let (pending, bufs, fidelity) = read_all(&store, step);
            proptest::prop_assert_eq!(pending.len(), sizes.len());
            for ((p, buf), f) in pending.iter().zip(&bufs).zip(&fidelity) {
                let got = store.get(&p.name, step).unwrap();
                proptest::prop_assert!(*buf == got.data, "step {} {}", step, p.name);
                proptest::prop_assert_eq!(*f, got.fidelity);
                proptest::prop_assert_eq!(&p.shape, &got.shape);
            }
        }
    }
}

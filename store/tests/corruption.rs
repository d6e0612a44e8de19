//! Bytes changed inside the file: reads return an error (never wrong data) and `verify`
//! names the block.

mod common;

use common::{f32_bytes, noise, temp_store};
use strata_store::{Corruption, DType, Issue, Options, Store, StoreError, TensorRef};

fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn corrupt_segment_is_detected_and_named() {
    let (_d, path) = temp_store();
    let names = ["a", "b", "c"];
    let mut truth = Vec::new();
    {
        let mut store = Store::open_with(
            &path,
            Options {
                block_bytes: 32 << 10,
                ..Options::default()
            },
        )
        .expect("open");
        for step in 0..4u64 {
            for (i, n) in names.iter().enumerate() {
                let mut v = noise(20_000, i as u64);
                v.iter_mut().step_by(3).for_each(|x| *x += step as f32);
                let bytes = f32_bytes(&v);
                store
                    .put(
                        n,
                        step,
                        &TensorRef {
                            dtype: DType::F32,
                            shape: &[20_000],
                            bytes: &bytes,
                        },
                    )
                    .expect("put");
                truth.push((n.to_string(), step, bytes));
            }
        }
        // Compaction leaves no stale copies of old pages in use.
        store.compact().expect("compact");
    }
    let clean = std::fs::read(&path).expect("read");
    let hits = find_all(&clean, b"STSG");
    assert!(!hits.is_empty(), "no segment magic in the file");

    let mut detected = 0;
    for &at in &hits {
        // Flip a payload byte (past the 48-byte header) of this segment.
        let mut bad = clean.clone();
        let pos = at + 60;
        if pos >= bad.len() {
            continue;
        }
        bad[pos] ^= 0x40;
        std::fs::write(&path, &bad).expect("write");

        let store = Store::open(&path).expect("open corrupted store");
        let report = store.verify().expect("verify runs");
        let mut named = Vec::new();
        for issue in &report.issues {
            match issue {
                Issue::Block {
                    tensor,
                    step,
                    block,
                    error,
                } => {
                    let msg = error.to_string();
                    assert!(msg.contains(&format!("{tensor:?}")), "{msg}");
                    assert!(
                        matches!(
                            error,
                            StoreError::Corrupt(Corruption::Segment { .. })
                                | StoreError::Corrupt(Corruption::SegmentStorage { .. })
                        ),
                        "{msg}"
                    );
                    named.push((tensor.clone(), *step, *block));
                }
                other => panic!("unexpected issue {other}"),
            }
        }
        // Every read: exact, or an error for a version verify named.
        for (n, step, bytes) in &truth {
            match store.get(n, *step) {
                Ok(t) => assert!(t.data == *bytes, "{n} step {step}: wrong data, no error"),
                Err(e) => {
                    assert!(
                        named.iter().any(|(tn, s, _)| tn == n && s == step),
                        "{n} step {step} fails ({e}) but verify did not name it"
                    );
                }
            }
            // Partial reads too.
            if let Ok(s) = store.get_range(n, *step, 100..200) {
                assert!(s.data == bytes[400..800]);
            }
        }
        if !named.is_empty() {
            detected += 1;
            // The block named really fails to read.
            let (n, s, _) = &named[0];
            assert!(store.get(n, *s).is_err());
        }
    }
    std::fs::write(&path, &clean).expect("restore");
    assert!(
        detected > 0,
        "no corruption of {} segment copies was detected",
        hits.len()
    );
    let store = Store::open(&path).expect("open");
    assert!(store.verify().expect("verify").is_ok());
}

/// A byte changed inside a checkpoint record: `checkpoint_summaries` (what `strata log`
/// lists) and `checkpoint_info` report the record damaged and name its step; nothing
/// panics and no summary of the damaged record is returned.
#[test]
fn corrupt_checkpoint_record_is_reported_with_its_step() {
    let (_d, path) = temp_store();
    {
        let mut store = Store::open(&path).expect("open");
        for step in 1..=3u64 {
            // Small tensors: packed into the checkpoint record's parts (ADR 0041).
            let bytes = f32_bytes(&noise(64, step));
            let t = TensorRef {
                dtype: DType::F32,
                shape: &[64],
                bytes: &bytes,
            };
            let meta = format!("{{\"marker\": \"CKPT-MARKER-{step}\"}}");
            store
                .save_checkpoint(step, &[("a.w", t), ("b.w", t)], &meta)
                .expect("save");
        }
        store.compact().expect("compact");
    }
    let clean = std::fs::read(&path).expect("read");
    let hits = find_all(&clean, b"CKPT-MARKER-2");
    assert!(!hits.is_empty(), "no checkpoint record in the file");
    let mut bad = clean.clone();
    for at in hits {
        bad[at + 5] ^= 0x01;
    }
    std::fs::write(&path, &bad).expect("write");
    let store = Store::open(&path).expect("open");
    match store.checkpoint_summaries() {
        Err(e @ StoreError::Corrupt(Corruption::Record { .. })) => {
            assert!(e.to_string().contains("step 2"), "{e}");
        }
        other => panic!("a damaged record summed: {other:?}"),
    }
    assert!(matches!(
        store.checkpoint_info(2),
        Err(StoreError::Corrupt(_))
    ));
    assert!(store.checkpoint_info(1).is_ok());
}

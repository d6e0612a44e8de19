//! Readers read random (tensor, step) pairs while a writer adds checkpoints: every read is
//! exact, and a checkpoint is visible whole or not at all.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{f32_bytes, noise, temp_store};
use strata_store::{DType, NotFound, Options, Store, StoreError, TensorRef};

const TENSORS: usize = 6;
const STEPS: u64 = 24;

fn value(tensor: usize, step: u64) -> Vec<u8> {
    let n = 3_000 + 1_000 * tensor;
    let mut v = noise(n, tensor as u64 + 1);
    for (i, x) in v.iter_mut().enumerate() {
        if (i as u64 + step).is_multiple_of(5) {
            *x += step as f32 * 1e-3;
        }
    }
    f32_bytes(&v)
}

#[test]
fn readers_during_writes_see_exact_data() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();

    let (_d, path) = temp_store();
    let store = Arc::new(
        Store::open_with(
            &path,
            Options {
                block_bytes: 4096,
                cache_bytes: 64 << 10,
                ..Options::default()
            },
        )
        .expect("open"),
    );
    let expected: Arc<Vec<Vec<Vec<u8>>>> = Arc::new(
        (0..TENSORS)
            .map(|t| (0..STEPS).map(|s| value(t, s)).collect())
            .collect(),
    );
    let written = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let writer = {
        let (store, expected, written, done) = (
            store.clone(),
            expected.clone(),
            written.clone(),
            done.clone(),
        );
        std::thread::spawn(move || {
            for s in 0..STEPS {
                let names: Vec<String> = (0..TENSORS).map(|t| format!("t{t}")).collect();
                let shapes: Vec<[u64; 1]> = (0..TENSORS)
                    .map(|t| [(expected[t][s as usize].len() / 4) as u64])
                    .collect();
                let refs: Vec<(&str, TensorRef<'_>)> = (0..TENSORS)
                    .map(|t| {
                        (
                            names[t].as_str(),
                            TensorRef {
                                dtype: DType::F32,
                                shape: &shapes[t],
                                bytes: &expected[t][s as usize],
                            },
                        )
                    })
                    .collect();
                store.save_checkpoint(s, &refs, "").expect("save");
                written.store(s + 1, Ordering::SeqCst);
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    let readers: Vec<_> = (0..3u64)
        .map(|r| {
            let (store, expected, written, done) = (
                store.clone(),
                expected.clone(),
                written.clone(),
                done.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = 0x1234_5678u64 ^ (r + 1).wrapping_mul(0x9E37_79B9);
                let mut reads = 0u64;
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                while !done.load(Ordering::SeqCst) || reads < 200 {
                    let visible = written.load(Ordering::SeqCst);
                    let step = next() % STEPS;
                    let t = (next() % TENSORS as u64) as usize;
                    match store.get(&format!("t{t}"), step) {
                        Ok(got) => {
                            assert!(got.data == expected[t][step as usize], "t{t} step {step}");
                        }
                        Err(
                            StoreError::NotFound(NotFound::Version { .. })
                            | StoreError::NotFound(NotFound::Tensor { .. }),
                        ) => {
                            assert!(step >= visible, "t{t} step {step} missing after commit");
                        }
                        Err(e) => panic!("read t{t} step {step}: {e}"),
                    }
                    // A checkpoint is all or nothing.
                    if let Ok(cp) = store.load_checkpoint(step) {
                        assert_eq!(cp.tensors.len(), TENSORS);
                        for (i, (_, tensor)) in cp.tensors.iter().enumerate() {
                            assert!(tensor.data == expected[i][step as usize]);
                        }
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    writer.join().expect("writer");
    let total: u64 = readers.into_iter().map(|h| h.join().expect("reader")).sum();
    assert!(total >= 600);
    assert!(store.verify().expect("verify").is_ok());
}

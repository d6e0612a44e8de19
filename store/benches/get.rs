//! `get` latency of one 4 MiB tensor at each step of a 9-step series, cold block cache.
//!
//! The series mimics fine-tuning: each step nudges a third of the values by about 1e-4
//! relative (a deterministic generator, so runs are comparable). Reading step k decodes a
//! keyframe and up to k deltas per block; the decoded-block cache is off so that every
//! iteration pays the whole chain. Steps 0..=80 with the default `max_chain` (6) give every
//! depth from 1 to 6 (step 60 anchors on the keyframe: depth 2); `max_chain` 9 shows depths
//! 7 to 9, the cost a longer bound would add (ADR 0006).
//!
//! `get_packed`: small tensors packed per checkpoint (ADR 0041), 60 checkpoints of 200 biases
//! of 256 f32. `one_by_one` reads every tensor of one checkpoint by its own `get` (each its
//! own transaction, as a caller walking names does); `fresh_handle` opens the store and reads
//! one tensor, so its part's chain decodes from the file.

use criterion::{BenchmarkId, Criterion, Throughput};
use strata_store::{DType, Options, Store, TensorRef};

const ELEMS: usize = 1 << 20;
const STEPS: u64 = 9;

fn series() -> Vec<Vec<u8>> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut w: Vec<f32> = (0..ELEMS)
        .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1)
        .collect();
    let mut out = Vec::new();
    for _ in 0..STEPS {
        out.push(w.iter().flat_map(|v| v.to_le_bytes()).collect());
        for v in w.iter_mut() {
            let r = next();
            if r % 3 == 0 {
                *v *= 1.0 + ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2e-4;
            }
        }
    }
    out
}

fn bench_get(c: &mut Criterion) {
    let data = series();
    let mut group = c.benchmark_group("get_4MiB");
    group.sample_size(20);
    group.throughput(Throughput::Bytes((ELEMS * 4) as u64));
    for max_chain in [Options::default().max_chain, 9] {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("bench.strata");
        let opts = Options {
            max_chain,
            cache_bytes: 0,
            ..Options::default()
        };
        let store = Store::open_with(&path, opts).expect("open");
        for (i, bytes) in data.iter().enumerate() {
            let t = TensorRef {
                dtype: DType::F32,
                shape: &[1024, 1024],
                bytes,
            };
            store.put("w", i as u64 * 10, &t).expect("put");
        }
        let steps: &[u64] = if max_chain == 9 {
            &[60, 70, 80]
        } else {
            &[0, 10, 20, 30, 40, 50, 60]
        };
        for &step in steps {
            group.bench_with_input(
                BenchmarkId::new(format!("max_chain_{max_chain}"), step),
                &step,
                |b, s| b.iter(|| store.get("w", *s).expect("get")),
            );
        }
    }
    group.finish();
}

const PACKED_TENSORS: usize = 200;
const PACKED_VALUES: usize = 256;
const PACKED_STEPS: u64 = 60;

fn bench_packed(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("packed.strata");
    let names: Vec<String> = (0..PACKED_TENSORS)
        .map(|i| format!("layer.{i}.bias"))
        .collect();
    {
        let store = Store::open(&path).expect("open");
        let mut values: Vec<Vec<f32>> = (0..PACKED_TENSORS)
            .map(|i| (0..PACKED_VALUES).map(|j| (i * j) as f32 * 1e-3).collect())
            .collect();
        for step in 0..PACKED_STEPS {
            for (i, v) in values.iter_mut().enumerate() {
                v[(step as usize * 7 + i) % PACKED_VALUES] += 1e-4;
            }
            let bytes: Vec<Vec<u8>> = values
                .iter()
                .map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
                .collect();
            let shape = [PACKED_VALUES as u64];
            let refs: Vec<(&str, TensorRef<'_>)> = names
                .iter()
                .zip(&bytes)
                .map(|(n, b)| {
                    let t = TensorRef {
                        dtype: DType::F32,
                        shape: &shape,
                        bytes: b,
                    };
                    (n.as_str(), t)
                })
                .collect();
            store.save_checkpoint(step, &refs, "{}").expect("save");
        }
    }
    let step = PACKED_STEPS / 2;
    let mut group = c.benchmark_group("get_packed");
    group.sample_size(20);
    let store = Store::open(&path).expect("open");
    group.throughput(Throughput::Elements(PACKED_TENSORS as u64));
    group.bench_function("one_by_one", |b| {
        b.iter(|| {
            for n in &names {
                store.get(n, step).expect("get");
            }
        })
    });
    drop(store);
    group.throughput(Throughput::Elements(1));
    group.bench_function("fresh_handle", |b| {
        b.iter(|| {
            let store = Store::open(&path).expect("open");
            store.get(&names[PACKED_TENSORS / 2], step).expect("get")
        })
    });
    group.finish();
}

// What `criterion_group!` and `criterion_main!` expand to, written out so that no
// undocumented `pub fn` is generated.
fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_get(&mut c);
    bench_packed(&mut c);
    c.final_summary();
}

//! What readers beside a writer cost (ADR 0017): the store opens its file in redb's
//! `SingleWriter` mode so read-only processes can follow the writer; before, it used
//! `ExclusiveWriter`, which locks the whole file. The same small writes and reads on a real file
//! in both modes, in one run: `Store::open` (SingleWriter) against
//! `Store::open_with_backend(FileBackend)` (ExclusiveWriter, a file too).
//!
//! Writes: a 64-tensor checkpoint of 16 KiB f32 tensors (commit-bound: one fsync'd transaction
//! each). Reads: `get` of one 16 KiB tensor with the block cache off (a read transaction each).

use criterion::{BatchSize, Criterion};
use strata_store::redb::backends::FileBackend;
use strata_store::{DType, Options, Store, TensorRef};

const TENSORS: usize = 64;
const ELEMS: usize = 4096;

fn tensors(step: u64) -> Vec<(String, Vec<u8>)> {
    (0..TENSORS)
        .map(|t| {
            let bytes = (0..ELEMS)
                .flat_map(|i| (((i * 31 + t) as f32) * 1e-3 + step as f32).to_le_bytes())
                .collect();
            (format!("layer.{t}.weight"), bytes)
        })
        .collect()
}

fn save(store: &Store, step: u64, data: &[(String, Vec<u8>)]) {
    let shape = [ELEMS as u64];
    let refs: Vec<(&str, TensorRef<'_>)> = data
        .iter()
        .map(|(n, b)| {
            (
                n.as_str(),
                TensorRef {
                    dtype: DType::F32,
                    shape: &shape,
                    bytes: b,
                },
            )
        })
        .collect();
    store.save_checkpoint(step, &refs, "{}").expect("save");
}

fn open(mode: &str, path: &std::path::Path) -> Store {
    let opts = Options {
        cache_bytes: 0,
        ..Options::default()
    };
    match mode {
        "single_writer" => Store::open_with(path, opts).expect("open"),
        _ => {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .expect("file");
            Store::open_with_backend(path, FileBackend::new(file).expect("backend"), opts)
                .expect("open on a file backend")
        }
    }
}

fn bench(c: &mut Criterion) {
    let data = tensors(1);
    let mut group = c.benchmark_group("lock_mode");
    group.sample_size(20);
    for mode in ["single_writer", "exclusive_writer"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(mode, &dir.path().join("bench.strata"));
        let mut step = 0;
        group.bench_function(format!("save_checkpoint/{mode}"), |b| {
            b.iter_batched(
                || {
                    step += 1;
                    step
                },
                |s| save(&store, s, &data),
                BatchSize::SmallInput,
            )
        });
        group.bench_function(format!("get/{mode}"), |b| {
            b.iter(|| store.get("layer.7.weight", 1).expect("get"))
        });
    }
    group.finish();
}

// What `criterion_group!` and `criterion_main!` expand to, written out so that no
// undocumented `pub fn` is generated (as in get.rs).
fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}

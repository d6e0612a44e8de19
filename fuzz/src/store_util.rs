//! Shared by the store targets (`store_open`, `store_records`, `import_safetensors`) and the
//! store seed writer (`examples/make_store_seeds.rs`): scratch files, a budgeted walk of
//! every read the store offers, and a small store with every kind of record.

use std::path::{Path, PathBuf};

use strata_store::{DType, Options, Residual, RetainPolicy, Store, TensorRef, Tier, TierPolicy};

/// Versions larger than this (raw bytes, as their record declares) are listed but not read.
pub const MAX_READ_BYTES: u64 = 4 << 20;
/// At most this many versions are read per input.
pub const MAX_READS: usize = 64;

/// A scratch directory for this process: under `/dev/shm` when it exists (no disk, cheap
/// fsync), else the system's temporary directory. Created on first use; files in it are
/// overwritten by the next input.
pub fn scratch_dir() -> PathBuf {
    let root = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = root.join(format!("strata-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// A path in [`scratch_dir`], with nothing at it (a previous input's file and the redb
/// lock are gone when the previous `Store` was dropped).
pub fn scratch_path(name: &str) -> PathBuf {
    let p = scratch_dir().join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// Every read the store offers, each allowed to fail, none allowed to panic (a panic of
/// redb's that escapes a `Store` method reaches libfuzzer-sys's `catch_unwind`, which aborts:
/// a crash): `verify`, the
/// tensor list and each tensor's versions, `get` (and `get_at`, `get_range`) of versions
/// up to [`MAX_READ_BYTES`] (at most [`MAX_READS`]), checkpoints with their info and
/// `load_checkpoint` when every tensor is within budget, tags, policies, `stats`, and an
/// export of the first readable checkpoint. Returns how many reads succeeded.
pub fn exercise(store: &Store, export_to: &Path) -> usize {
    let mut ok = 0usize;
    let mut count = |r: bool| ok += usize::from(r);
    count(store.verify().is_ok_and(|r| r.is_ok()));
    count(store.stats().is_ok());
    count(store.tags().is_ok());
    let _ = store.policies().len();
    let mut reads = 0usize;
    let mut sizes = std::collections::HashMap::new();
    for name in store.tensors().unwrap_or_default() {
        let _ = store.policy_of(&name);
        let Ok(versions) = store.versions(&name) else {
            continue;
        };
        for v in versions {
            sizes.insert((name.clone(), v.step), v.raw_bytes);
            if v.raw_bytes > MAX_READ_BYTES || reads >= MAX_READS {
                continue;
            }
            reads += 1;
            count(store.get(&name, v.step).is_ok());
            count(store.get_exact(&name, v.step).is_ok());
            count(store.get_at(&name, v.step.saturating_add(1)).is_ok());
            count(store.get_range(&name, v.step, 1..3).is_ok());
        }
    }
    let mut exported = false;
    for step in store
        .checkpoints()
        .unwrap_or_default()
        .into_iter()
        .take(MAX_READS)
    {
        let Ok(info) = store.checkpoint_info(step) else {
            continue;
        };
        let total: u64 = info
            .tensors
            .iter()
            .map(|n| sizes.get(&(n.clone(), step)).copied().unwrap_or(0))
            .fold(0u64, u64::saturating_add);
        if total > MAX_READ_BYTES {
            continue;
        }
        if store.load_checkpoint(step).is_ok() {
            count(true);
            if !exported {
                exported = true;
                count(store.export_safetensors(step, export_to).is_ok());
            }
        }
    }
    ok
}

/// A small tensor of `dtype` and `shape` whose bytes depend on `seed`: weight-like for
/// floats (one unit in the last place apart from step to step, so versions are deltas).
pub fn tensor_bytes(dtype: DType, elems: usize, seed: u64) -> Vec<u8> {
    let size = dtype.size();
    let mut out = Vec::with_capacity(elems * size);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..elems {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        match dtype {
            DType::F32 => {
                let v = ((i % 97) as f32 - 48.0) * 0.01 + (seed % 4) as f32 * 1e-6;
                out.extend_from_slice(&v.to_le_bytes());
            }
            _ => {
                for b in 0..size {
                    out.push((x >> (8 * (b % 8))) as u8);
                }
            }
        }
    }
    out
}

/// Writes a small store at `path` with every kind of record: lossless versions as
/// keyframes, deltas and references (several blocks each: 1 KiB blocks), checkpoints with
/// metadata, a tensor saved outside any checkpoint, tags, a retained (deleted) checkpoint,
/// a tiered tensor (quantized blocks, exact residuals, tier rows) moved by `maintain`, a
/// pinned pattern and a frame stream.
pub fn build_store(path: &Path, variant: u64) -> strata_store::Result<()> {
    let opts = Options {
        block_bytes: 1024,
        ..Options::default()
    };
    let mut store = Store::open_with(path, opts)?;
    store.set_policy(
        "kv.*",
        TierPolicy::tiered(Tier::Hot8).with_residual(Residual::Exact),
    )?;
    store.pin("*norm*")?;
    let shapes: [(&str, DType, &[u64]); 4] = [
        ("w.f32", DType::F32, &[16, 40]),
        ("w.bf16", DType::BF16, &[700]),
        ("w.norm", DType::F32, &[8]),
        ("w.u8", DType::U8, &[3, 5]),
    ];
    for (i, step) in [10u64, 20, 30, 40].into_iter().enumerate() {
        let data: Vec<Vec<u8>> = shapes
            .iter()
            .map(|(_, d, s)| {
                let n: u64 = s.iter().product();
                // Step 30 repeats step 20's bytes: reference blocks.
                let seed = if step == 30 { 20 } else { step } + variant;
                tensor_bytes(*d, n as usize, seed ^ (i as u64 >> 8))
            })
            .collect();
        let refs: Vec<(&str, TensorRef<'_>)> = shapes
            .iter()
            .zip(&data)
            .map(|((name, dtype, shape), bytes)| {
                (
                    *name,
                    TensorRef {
                        dtype: *dtype,
                        shape,
                        bytes,
                    },
                )
            })
            .collect();
        store.save_checkpoint(step, &refs, &format!("{{\"step\": {step}}}"))?;
    }
    store.tag("best", 20)?;
    store.tag("first", 10)?;
    let lone = tensor_bytes(DType::F16, 33, 7 + variant);
    store.put(
        "lone.f16",
        5,
        &TensorRef {
            dtype: DType::F16,
            shape: &[33],
            bytes: &lone,
        },
    )?;
    for step in 1..=3u64 {
        let kv = tensor_bytes(DType::F32, 300, step + variant);
        store.put(
            "kv.0",
            step,
            &TensorRef {
                dtype: DType::F32,
                shape: &[300],
                bytes: &kv,
            },
        )?;
    }
    let _ = store.get("kv.0", 3)?;
    for now in [60_000u64, 3_600_000, 86_400_000, 10 * 86_400_000] {
        store.maintain(now)?;
    }
    let frame: Vec<f32> = (0..64).map(|i| (i as f32 * 0.1).sin()).collect();
    store.append_frame("agent.state", 1, &frame)?;
    store.append_frame("agent.state", 2, &frame)?;
    store.retain(&RetainPolicy {
        keep_last: Some(2),
        keep_every: None,
        keep_tagged: true,
    })?;
    store.compact()?;
    Ok(())
}

/// Installs (once) a panic hook that aborts the process on any panic except one raised in
/// redb's own code, which is left to unwind: every `Store` method catches those on a damaged
/// file and reports `Corruption::Engine` (`OpenError::Damaged` at the open). One that is
/// not caught reaches libfuzzer-sys's
/// `catch_unwind` around the target, which aborts: still a crash, with redb's message and
/// location printed first when `STRATA_FUZZ_VERBOSE` is set (replaying a crash); redb's
/// caught panics are not printed otherwise, which would slow fuzzing down.
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        let verbose = std::env::var_os("STRATA_FUZZ_VERBOSE").is_some();
        std::panic::set_hook(Box::new(move |info| {
            let in_redb = info.location().is_some_and(strata_store::raised_in_engine);
            if !in_redb || verbose {
                default(info);
            }
            if !in_redb {
                std::process::abort();
            }
        }));
    });
}

/// The bytes of a newly created, empty store (made once per process).
pub fn empty_store() -> &'static [u8] {
    static EMPTY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| {
        let path = scratch_path("empty.strata");
        drop(Store::open(&path).expect("create an empty store"));
        let bytes = std::fs::read(&path).expect("read the empty store");
        let _ = std::fs::remove_file(&path);
        bytes
    })
}

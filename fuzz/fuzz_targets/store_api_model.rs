//! Fuzz target: the store's API driven by a sequence of operations decoded from the input,
//! checked against an in-memory model after every step, as redb's own fuzzer does.
//!
//! The model is a map of (tensor, step) to (dtype, shape, bytes), the checkpoints (step to
//! metadata and tensor names) and the tags. Every read must equal the model; every write
//! must succeed exactly when the model says it is valid, and fail with the kind of error the
//! model predicts (`NotFound` for a missing version, checkpoint or tag, `Invalid` for a
//! version or checkpoint that exists). Tensors are small (at most 4 KiB) and blocks 256
//! bytes, so versions have several blocks, deltas, references and chains that deletes and
//! retains re-base.
//!
//! Each operation takes 4 bytes: `[op, a, b, c]`.
//!
//! | op % 12 | operation | a, b, c |
//! |---|---|---|
//! | 0, 1 | `put` | name `a % 3`, step `b % 16`, tensor kind and data seed `c` |
//! | 2 | `save_checkpoint` | step `a % 16`, tensors: bits 0-2 of `b` pick names (none: an empty checkpoint), seed `c` |
//! | 3 | `delete` | name `a % 3`, step `b % 16` |
//! | 4 | `tag` | tag `a % 3`, step `b % 16` |
//! | 5 | `untag` | tag `a % 3` |
//! | 6 | `retain` | keep_last `a % 4` (0: none), keep_every `b % 4` (0: none), keep_tagged `c & 1` |
//! | 7 | `get` | name `a % 3`, step `b % 16` |
//! | 8 | `get_at` | name `a % 3`, step `b % 16` |
//! | 9 | reopen (drop, `Store::open_with`) | |
//! | 10 | `compact` | |
//! | 11 | `load_checkpoint` | step `a % 16` |
//!
//! After the sequence: the tensor list, every version list and version, the checkpoints
//! with their metadata and tensors, the tags, and `verify` must all match the model.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use strata_store::{DType, Options, RetainPolicy, Store, StoreError, TensorRef};

const NAMES: [&str; 3] = ["w", "layer.1.b", "kv"];
const TAGS: [&str; 3] = ["best", "t1", "t2"];
/// Operations per input, at most.
const MAX_OPS: usize = 64;

type Version = (DType, Vec<u64>, Vec<u8>);

#[derive(Debug, Default)]
struct Model {
    versions: BTreeMap<(String, u64), Version>,
    checkpoints: BTreeMap<u64, (String, BTreeSet<String>)>,
    tags: BTreeMap<String, u64>,
}

/// A tensor of one of a few dtypes and shapes; `seed`'s high bits pick a small change of a
/// fixed pattern, so that versions of a tensor are deltas of each other.
fn tensor(kind: u8, step: u64) -> Version {
    let (dtype, shape): (DType, Vec<u64>) = match kind % 6 {
        0 => (DType::F32, vec![16, 8]),
        1 => (DType::BF16, vec![300]),
        2 => (DType::U8, vec![5, 7]),
        3 => (DType::I64, vec![40]),
        4 => (DType::F32, vec![1000]),
        _ => (DType::F16, vec![0]),
    };
    let n: u64 = shape.iter().product();
    let len = n as usize * dtype.size();
    let mut bytes: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(0x9E37_79B9).to_le_bytes()[3])
        .collect();
    // A few bytes change with the step and the seed.
    let change = u64::from(kind / 6) + step;
    for j in 0..(kind as usize / 6 + 1) {
        if len > 0 {
            let at = (j * 131 + change as usize * 17) % len;
            bytes[at] ^= (change as u8) | 1;
        }
    }
    (dtype, shape, bytes)
}

fn is_not_found(e: &StoreError) -> bool {
    matches!(e, StoreError::NotFound(_))
}

fn is_invalid(e: &StoreError) -> bool {
    matches!(e, StoreError::Invalid(_))
}

fn opts() -> Options {
    Options {
        block_bytes: 256,
        ..Options::default()
    }
}

fn open(path: &Path) -> Store {
    Store::open_with(path, opts()).expect("the store reopens")
}

fn refs(v: &Version) -> TensorRef<'_> {
    TensorRef {
        dtype: v.0,
        shape: &v.1,
        bytes: &v.2,
    }
}

/// Removes version (name, step) from the model as `Store::delete` does.
fn model_delete(m: &mut Model, name: &str, step: u64) {
    m.versions.remove(&(name.to_string(), step));
    if let Some((_, names)) = m.checkpoints.get_mut(&step) {
        if names.remove(name) && names.is_empty() {
            m.checkpoints.remove(&step);
            m.tags.retain(|_, s| *s != step);
        }
    }
}

/// Everything the store lists equals the model.
fn check_all(store: &Store, m: &Model) {
    let names: BTreeSet<String> = m.versions.keys().map(|(n, _)| n.clone()).collect();
    let listed: BTreeSet<String> = store.tensors().expect("tensors").into_iter().collect();
    assert_eq!(listed, names, "tensor list");
    for name in &names {
        let steps: Vec<u64> = store
            .versions(name)
            .expect("versions")
            .iter()
            .map(|v| v.step)
            .collect();
        let want: Vec<u64> = m
            .versions
            .keys()
            .filter(|(n, _)| n == name)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(steps, want, "versions of {name}");
    }
    for ((name, step), v) in &m.versions {
        let t = store.get(name, *step).expect("get a modelled version");
        assert_eq!((t.dtype, &t.shape), (v.0, &v.1), "{name}@{step}");
        assert!(t.data == v.2, "{name}@{step}: bytes differ from the model");
    }
    let cps: Vec<u64> = store.checkpoints().expect("checkpoints");
    assert_eq!(
        cps,
        m.checkpoints.keys().copied().collect::<Vec<_>>(),
        "checkpoints"
    );
    for (step, (meta, names)) in &m.checkpoints {
        let info = store.checkpoint_info(*step).expect("checkpoint info");
        assert_eq!(&info.metadata, meta, "metadata of {step}");
        let got: BTreeSet<String> = info.tensors.into_iter().collect();
        assert_eq!(&got, names, "tensors of checkpoint {step}");
    }
    let tags: BTreeMap<String, u64> = store.tags().expect("tags").into_iter().collect();
    assert_eq!(tags, m.tags, "tags");
    let report = store.verify().expect("verify runs");
    assert!(report.is_ok(), "verify: {:?}", report.issues);
}

fuzz_target!(|data: &[u8]| {
    let path = strata_codec_fuzz_scratch();
    let mut store = open(&path);
    let mut m = Model::default();
    for op in data.chunks_exact(4).take(MAX_OPS) {
        let (a, b, c) = (op[1], op[2], op[3]);
        match op[0] % 12 {
            0 | 1 => {
                let name = NAMES[usize::from(a % 3)];
                let step = u64::from(b % 16);
                let v = tensor(c, step);
                let key = (name.to_string(), step);
                let r = store.put(name, step, &refs(&v));
                if m.versions.contains_key(&key) {
                    let e = r.expect_err("put over an existing version succeeded");
                    assert!(is_invalid(&e), "put over an existing version: {e}");
                } else {
                    r.expect("put of a new version");
                    m.versions.insert(key, v);
                }
            }
            2 => {
                let step = u64::from(a % 16);
                let chosen: Vec<&str> = (0..3)
                    .filter(|i| b & (1 << i) != 0)
                    .map(|i| NAMES[i])
                    .collect();
                let vs: Vec<Version> = chosen
                    .iter()
                    .enumerate()
                    .map(|(i, _)| tensor(c.wrapping_add(i as u8 * 7), step))
                    .collect();
                let list: Vec<(&str, TensorRef<'_>)> =
                    chosen.iter().zip(&vs).map(|(n, v)| (*n, refs(v))).collect();
                let meta = format!("{{\"c\": {c}}}");
                let r = store.save_checkpoint(step, &list, &meta);
                let exists = m.checkpoints.contains_key(&step)
                    || chosen
                        .iter()
                        .any(|n| m.versions.contains_key(&(n.to_string(), step)));
                if exists {
                    let e = r.expect_err("save over an existing checkpoint or version succeeded");
                    assert!(is_invalid(&e), "save over existing: {e}");
                } else {
                    r.expect("save of a new checkpoint");
                    for (n, v) in chosen.iter().zip(vs) {
                        m.versions.insert((n.to_string(), step), v);
                    }
                    let names = chosen.iter().map(|n| n.to_string()).collect();
                    m.checkpoints.insert(step, (meta, names));
                }
            }
            3 => {
                let name = NAMES[usize::from(a % 3)];
                let step = u64::from(b % 16);
                let r = store.delete(name, step);
                if m.versions.contains_key(&(name.to_string(), step)) {
                    r.expect("delete of a version");
                    model_delete(&mut m, name, step);
                } else {
                    let e = r.expect_err("delete of a missing version succeeded");
                    assert!(is_not_found(&e), "delete of a missing version: {e}");
                }
            }
            4 => {
                let tag = TAGS[usize::from(a % 3)];
                let step = u64::from(b % 16);
                let r = store.tag(tag, step);
                if m.checkpoints.contains_key(&step) {
                    r.expect("tag of a checkpoint");
                    m.tags.insert(tag.to_string(), step);
                } else {
                    let e = r.expect_err("tag of a missing checkpoint succeeded");
                    assert!(is_not_found(&e), "tag of a missing checkpoint: {e}");
                }
            }
            5 => {
                let tag = TAGS[usize::from(a % 3)];
                let r = store.untag(tag);
                if m.tags.remove(tag).is_some() {
                    r.expect("untag");
                } else {
                    let e = r.expect_err("untag of a missing tag succeeded");
                    assert!(is_not_found(&e), "untag of a missing tag: {e}");
                }
            }
            6 => {
                let policy = RetainPolicy {
                    keep_last: (a % 4 != 0).then_some(usize::from(a % 4)),
                    keep_every: (b % 4 != 0).then_some(u64::from(b % 4)),
                    keep_tagged: c & 1 != 0,
                };
                let r = store.retain(&policy);
                if policy.keep_last.is_none() && policy.keep_every.is_none() {
                    let e = r.expect_err("retain without keep_last or keep_every succeeded");
                    assert!(is_invalid(&e), "retain without rules: {e}");
                } else {
                    let report = r.expect("retain");
                    // The rules, written out: the last n, multiples of k, tagged.
                    let steps: Vec<u64> = m.checkpoints.keys().copied().collect();
                    let tagged: BTreeSet<u64> = m.tags.values().copied().collect();
                    let mut keep: BTreeSet<u64> = BTreeSet::new();
                    if let Some(n) = policy.keep_last {
                        keep.extend(steps.iter().rev().take(n));
                    }
                    if let Some(k) = policy.keep_every {
                        keep.extend(steps.iter().filter(|s| *s % k == 0));
                    }
                    if policy.keep_tagged {
                        keep.extend(steps.iter().filter(|s| tagged.contains(s)));
                    }
                    let removed: Vec<u64> = steps
                        .iter()
                        .copied()
                        .filter(|s| !keep.contains(s))
                        .collect();
                    assert_eq!(report.removed, removed, "retain removed");
                    for step in removed {
                        let names = m.checkpoints.remove(&step).map(|c| c.1).unwrap_or_default();
                        for n in names {
                            m.versions.remove(&(n, step));
                        }
                        m.tags.retain(|_, s| *s != step);
                    }
                }
            }
            7 => {
                let name = NAMES[usize::from(a % 3)];
                let step = u64::from(b % 16);
                match (
                    store.get(name, step),
                    m.versions.get(&(name.to_string(), step)),
                ) {
                    (Ok(t), Some(v)) => {
                        assert_eq!((t.dtype, &t.shape), (v.0, &v.1));
                        assert!(t.data == v.2, "get {name}@{step}: bytes differ");
                    }
                    (Err(e), None) => assert!(is_not_found(&e), "get of a missing version: {e}"),
                    (r, v) => panic!("get {name}@{step}: store {r:?}, model {v:?}"),
                }
            }
            8 => {
                let name = NAMES[usize::from(a % 3)];
                let step = u64::from(b % 16);
                let want = m
                    .versions
                    .range((name.to_string(), 0)..=(name.to_string(), step))
                    .next_back();
                match (store.get_at(name, step), want) {
                    (Ok((s, t)), Some(((_, ws), v))) => {
                        assert_eq!(s, *ws, "get_at {name}@{step}: step");
                        assert!(t.data == v.2, "get_at {name}@{step}: bytes differ");
                    }
                    (Err(e), None) => {
                        assert!(is_not_found(&e), "get_at with no version at or before: {e}")
                    }
                    (r, w) => panic!("get_at {name}@{step}: store {r:?}, model {w:?}"),
                }
            }
            9 => {
                drop(store);
                store = open(&path);
            }
            10 => {
                store.compact().expect("compact");
            }
            _ => {
                let step = u64::from(a % 16);
                match (store.load_checkpoint(step), m.checkpoints.get(&step)) {
                    (Ok(cp), Some((meta, names))) => {
                        assert_eq!(&cp.metadata, meta);
                        let got: BTreeSet<String> =
                            cp.tensors.iter().map(|(n, _)| n.clone()).collect();
                        assert_eq!(&got, names, "load_checkpoint {step}: tensors");
                        for (n, t) in &cp.tensors {
                            let v = &m.versions[&(n.clone(), step)];
                            assert!(t.data == v.2, "load_checkpoint {step}: {n} differs");
                        }
                    }
                    (Err(e), None) => {
                        assert!(is_not_found(&e), "load of a missing checkpoint: {e}")
                    }
                    (r, w) => panic!(
                        "load_checkpoint {step}: store {:?}, model {w:?}",
                        r.map(|c| c.step)
                    ),
                }
            }
        }
    }
    check_all(&store, &m);
    drop(store);
    check_all(&open(&path), &m);
});

/// A fresh scratch path (on `/dev/shm` when it exists).
fn strata_codec_fuzz_scratch() -> std::path::PathBuf {
    let root = if Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = root.join(format!("strata-fuzz-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let p = dir.join("model.strata");
    let _ = std::fs::remove_file(&p);
    p
}

//! Small tensors packed per checkpoint (ADR 0041): every path reads a packed version as the
//! tensor written, exact; the member index survives long runs, deletions and retention; names
//! of the store's own are refused; a format 2 store reads and becomes format 3 at its first
//! packed checkpoint.

mod common;

use common::{f32_bytes, noise, temp_store, tensor_refs};
use redb::{ReadableDatabase, TableDefinition};
use strata_store::{DType, InvalidInput, RetainPolicy, Store, StoreError, TensorRef};

const META: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("strata.meta");

/// Step `step` of a small training state: a counter, a bias, a norm, and one matrix.
fn state(step: u64) -> Vec<(String, DType, Vec<u64>, Vec<u8>)> {
    vec![
        (
            "optimizer.state.0.step".into(),
            DType::F32,
            vec![],
            (step as f32).to_le_bytes().to_vec(),
        ),
        (
            "layer.bias".into(),
            DType::F32,
            vec![300],
            f32_bytes(&noise(300, step)),
        ),
        (
            "layer.norm".into(),
            DType::BF16,
            vec![64],
            (0..128).map(|i| (i as u64 ^ step) as u8).collect(),
        ),
        (
            "layer.weight".into(),
            DType::F32,
            vec![32, 32],
            f32_bytes(&noise(1024, 1000 + step)),
        ),
    ]
}

fn save(store: &Store, step: u64) {
    let tensors = state(step);
    let refs = tensor_refs(&tensors);
    store.save_checkpoint(step, &refs, "{}").expect("save");
}

/// Every tensor of every checkpoint reads back bit-exact by `get`, `get_at`, `history` and
/// `load_checkpoint`, and `verify` finds nothing.
fn check(store: &Store, what: &str) {
    for step in store.checkpoints().expect("checkpoints") {
        let cp = store.load_checkpoint(step).expect("load");
        for ((name, dtype, shape, bytes), (got_name, got)) in state(step).iter().zip(&cp.tensors) {
            assert_eq!(name, got_name, "{what}");
            assert_eq!(
                (got.dtype, &got.shape),
                (*dtype, shape),
                "{what}: {name}@{step}"
            );
            assert!(got.data == *bytes, "{what}: {name}@{step} differs");
            let t = store.get(name, step).expect("get");
            assert!(
                t.data == *bytes && t.fidelity.is_exact(),
                "{what}: {name}@{step}"
            );
        }
    }
    let steps = store.checkpoints().expect("checkpoints");
    if let (Some(&first), Some(&last)) = (steps.first(), steps.last()) {
        let history = store
            .history("layer.bias", 3..5, first..=last)
            .expect("history");
        assert_eq!(history.len(), steps.len(), "{what}");
        for (step, slice) in history {
            assert_eq!(
                slice.data,
                state(step)[1].3[12..20],
                "{what}: history at {step}"
            );
        }
        let (at, t) = store
            .get_at("optimizer.state.0.step", last + 100)
            .expect("get_at");
        assert_eq!((at, t.data), (last, (last as f32).to_le_bytes().to_vec()));
    }
    let report = store.verify().expect("verify");
    assert!(report.is_ok(), "{what}: {:?}", report.issues);
}

#[test]
fn long_runs_deletions_and_retention_keep_packed_tensors_exact() {
    let (_d, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    // Past the 128 steps one run of the member index holds: runs split.
    for step in 1..=300 {
        save(&store, step);
    }
    check(&store, "written");
    let names = store.tensors().expect("tensors");
    assert_eq!(names.len(), 4, "the pack parts are not listed: {names:?}");
    let versions = store.versions("layer.bias").expect("versions");
    assert_eq!(versions.len(), 300);
    assert!(versions
        .iter()
        .all(|v| v.encodings.iter().all(|e| e.inline)));

    // The bytes a version stores are its share of its part: they sum to the parts' bytes.
    let stats = store.stats().expect("stats");
    let counter = stats
        .tensors
        .iter()
        .find(|t| t.name == "optimizer.state.0.step")
        .expect("counter");
    assert_eq!((counter.versions, counter.raw_bytes), (300, 1200));
    assert!(stats.packed_bytes > 0, "{stats:?}");
    assert_eq!(stats.tensors.len(), 4, "the parts are no tensors");
    let summaries = store.checkpoint_summaries().expect("summaries");
    for s in summaries.iter().step_by(37) {
        let stored: u64 = state(s.step)
            .iter()
            .map(|(n, ..)| store.version_info(n, s.step).expect("info").stored_bytes)
            .sum();
        assert_eq!(s.stored_bytes, stored, "{s:?}");
    }

    // Deleting one packed version, then the rest of its checkpoint's: the parts go with the
    // last one, and the others read on.
    store.delete("layer.bias", 150).expect("delete");
    assert!(store.get("layer.bias", 150).is_err());
    assert_eq!(store.get_at("layer.bias", 150).expect("get_at").0, 149);
    for (name, ..) in state(150).iter().skip(1) {
        if name != "layer.bias" {
            store.delete(name, 150).expect("delete");
        }
    }
    store.delete("optimizer.state.0.step", 150).expect("delete");
    assert!(!store.checkpoints().expect("checkpoints").contains(&150));
    store.delete_checkpoint(10).expect("delete checkpoint");
    check(&store, "deleted");

    let report = store
        .retain(&RetainPolicy {
            keep_last: Some(20),
            keep_every: Some(50),
            keep_tagged: false,
        })
        .expect("retain");
    assert!(report.versions_removed > 0);
    check(&store, "retained");
    store.compact().expect("compact");
    drop(store);
    let store = Store::open(&path).expect("reopen");
    check(&store, "reopened");
}

#[test]
fn a_put_beside_packed_versions_and_reserved_names() {
    let (_d, path) = temp_store();
    let store = Store::open(&path).expect("open");
    save(&store, 10);
    // A tensor packed at 10, written outside any checkpoint at 20, packed again at 30: each
    // reads its own bytes, and the version at 20 is no delta on a packed one.
    let loose = f32_bytes(&noise(300, 77));
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[300],
        bytes: &loose,
    };
    store.put("layer.bias", 20, &t).expect("put");
    save(&store, 30);
    assert_eq!(store.get("layer.bias", 20).expect("get").data, loose);
    assert_eq!(
        store.get("layer.bias", 30).expect("get").data,
        state(30)[1].3
    );
    assert_eq!(store.versions("layer.bias").expect("versions").len(), 3);
    // A checkpoint of a tensor that has a version at its step is refused, and nothing of it
    // is visible.
    store.put("layer.bias", 40, &t).expect("put");
    let tensors = state(40);
    let refs = tensor_refs(&tensors);
    let err = store.save_checkpoint(40, &refs, "{}").unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Invalid(InvalidInput::StepExists { step: 40, .. })
        ),
        "{err}"
    );
    assert!(!store.checkpoints().expect("checkpoints").contains(&40));
    // Names of the store's own pack parts are refused.
    let err = store.put("\u{1}pack/f32/0", 50, &t).unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(InvalidInput::Name { .. })),
        "{err}"
    );
    assert!(store.verify().expect("verify").is_ok());
}

fn format_version(path: &std::path::Path) -> u32 {
    let db = redb::Database::open(path).expect("redb");
    let r = db.begin_read().expect("read");
    let t = r.open_table(META).expect("meta");
    let v = t.get(b"format".as_slice()).expect("get").expect("format");
    u32::from_le_bytes(v.value()[12..16].try_into().expect("u32"))
}

#[test]
fn a_format_2_store_reads_and_becomes_format_3_when_it_packs() {
    let (_d, path) = temp_store();
    {
        let store = Store::open(&path).expect("open");
        let w = f32_bytes(&noise(1024, 1));
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[32, 32],
            bytes: &w,
        };
        store
            .save_checkpoint(1, &[("layer.weight", t)], "{}")
            .expect("save");
    }
    // What a build before packing wrote: format 2, no member index.
    {
        let db = redb::Database::open(&path).expect("redb");
        let w = db.begin_write().expect("write");
        {
            let mut t = w.open_table(META).expect("meta");
            let mut record = b"strata-store".to_vec();
            record.extend_from_slice(&2u32.to_le_bytes());
            t.insert(b"format".as_slice(), record.as_slice())
                .expect("insert");
        }
        w.delete_table(TableDefinition::<&[u8], &[u8]>::new("strata.members"))
            .expect("drop the member index");
        w.commit().expect("commit");
    }
    assert_eq!(format_version(&path), 2);
    let store = Store::open_read_only(&path).expect("a reader opens format 2");
    assert_eq!(store.tensors().expect("tensors"), ["layer.weight"]);
    drop(store);
    let store = Store::open(&path).expect("open format 2");
    save(&store, 2);
    drop(store);
    assert_eq!(format_version(&path), 3);
    let store = Store::open(&path).expect("reopen");
    assert_eq!(store.get("layer.bias", 2).expect("get").data, state(2)[1].3);
    assert!(store.verify().expect("verify").is_ok());
}

//! Fuzz target: a store whose metadata records were changed, resealed so that they get
//! past the record checksum to the record decoders (`store/src/record/`) and to everything
//! that trusts what they decode.
//!
//! A random byte change to a store file almost always stops at redb's structure or at the
//! record checksum (xxh3-64 of key and value; `store_open` covers those paths). Here a
//! small valid store with every kind of record ([`build_store`]: keyframes, deltas and
//! references in 1 KiB blocks, inline versions of a 32-byte tensor, checkpoints, tags, a
//! retained checkpoint, quantized blocks with exact residuals and tier rows, a pinned
//! pattern, a frame stream) is built once;
//! each input picks one record of one table, edits it, reseals it with the store's record
//! checksum (unless asked not to), writes it back with redb directly, and then opens the
//! store with Strata: every read of [`exercise`], then (byte 2, bit 4) a few writes
//! (delete, maintain, save_checkpoint, retain) and `verify` again. Errors are fine, panics, hangs and unbounded
//! allocations are not.
//!
//! | byte | meaning |
//! |---|---|
//! | 0 | table: versions, checkpoints, segments, tiers, policies, tags, meta, members (`% 8`) |
//! | 1 | record: index among the table's records (`% count`) |
//! | 2 | bits 0-1: replace the value with the rest, XOR the rest in at offset byte 3, insert the rest at byte 3, or cut at byte 3 and append the rest; bit 2: do not reseal; bit 3: change the key (the last key byte, or the step, XOR byte 3 + 1), resealed for the new key; bit 4: after the reads, the writes |
//! | 3 | offset or length for the edit |
//! | 4.. | the rest |
//!
//! The checksum is recomputed here (xxh3-64 over the key's length as u64 LE, the key and the
//! value, appended as u64 LE); on its first input the target checks that this reproduces
//! every stored record of the base store exactly, and stops with a panic if not, so a change
//! of the store's sealing shows up here at once.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use strata_codec_fuzz::store_util::{build_store, exercise, install_panic_hook, scratch_path};
use strata_store::{DType, RetainPolicy, Store, TensorRef};

const META: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("strata.meta");
const VERSIONS: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("strata.versions");
const SEGMENTS: TableDefinition<'static, u128, &[u8]> = TableDefinition::new("strata.segments");
const CHECKPOINTS: TableDefinition<'static, u64, &[u8]> =
    TableDefinition::new("strata.checkpoints");
const TAGS: TableDefinition<'static, &[u8], u64> = TableDefinition::new("strata.tags");
const TIERS: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("strata.tiers");
const POLICIES: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("strata.policies");
const MEMBERS: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("strata.members");

const CHECKSUM_LEN: usize = 8;

fn checksum(key: &[u8], value: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = twox_hash::XxHash3_64::new();
    h.write(&(key.len() as u64).to_le_bytes());
    h.write(key);
    h.write(value);
    h.finish()
}

fn seal(key: &[u8], body: &[u8]) -> Vec<u8> {
    let mut v = body.to_vec();
    v.extend_from_slice(&checksum(key, body).to_le_bytes());
    v
}

/// The base store's bytes.
fn base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = scratch_path("records-base.strata");
        build_store(&path, 0).expect("build the base store");
        check_sealing(&path);
        let bytes = std::fs::read(&path).expect("read the base store");
        let _ = std::fs::remove_file(&path);
        bytes
    })
}

/// Every sealed record of the store at `path` must be exactly `seal(key, body)`.
fn check_sealing(path: &std::path::Path) {
    let db = redb::Database::open(path).expect("redb opens the base store");
    let r = db.begin_read().expect("read txn");
    let mut n = 0;
    let mut bytes_keyed = |def: TableDefinition<'static, &[u8], &[u8]>| {
        let t = r.open_table(def).expect("table");
        for e in t.iter().expect("iter") {
            let (k, v) = e.expect("entry");
            let (k, v) = (k.value(), v.value());
            let body = &v[..v.len() - CHECKSUM_LEN];
            assert_eq!(
                seal(k, body),
                v,
                "{def}: this target's seal differs from the store's"
            );
            n += 1;
        }
    };
    bytes_keyed(VERSIONS);
    bytes_keyed(TIERS);
    bytes_keyed(POLICIES);
    bytes_keyed(MEMBERS);
    let t = r.open_table(SEGMENTS).expect("segments");
    for e in t.iter().expect("iter") {
        let (k, v) = e.expect("entry");
        let v = v.value();
        let body = &v[..v.len() - CHECKSUM_LEN];
        assert_eq!(
            seal(&k.value().to_le_bytes(), body),
            v,
            "segments: seal differs"
        );
        n += 1;
    }
    let t = r.open_table(CHECKPOINTS).expect("checkpoints");
    for e in t.iter().expect("iter") {
        let (k, v) = e.expect("entry");
        let v = v.value();
        let body = &v[..v.len() - CHECKSUM_LEN];
        assert_eq!(
            seal(&k.value().to_be_bytes(), body),
            v,
            "checkpoints: seal differs"
        );
        n += 1;
    }
    assert!(n > 20, "the base store has only {n} sealed records");
}

/// How an input edits a record.
struct Edit<'a> {
    op: u8,
    at: u8,
    rest: &'a [u8],
}

impl Edit<'_> {
    fn reseal(&self) -> bool {
        self.op & 4 == 0
    }

    fn rekey(&self) -> bool {
        self.op & 8 != 0
    }

    /// The edited body.
    fn body(&self, old: &[u8]) -> Vec<u8> {
        let at = usize::from(self.at).min(old.len());
        match self.op & 3 {
            0 => self.rest.to_vec(),
            1 => {
                let mut v = old.to_vec();
                for (i, b) in self.rest.iter().enumerate() {
                    if let Some(x) = v.get_mut(at + i) {
                        *x ^= b;
                    }
                }
                v
            }
            2 => [&old[..at], self.rest, &old[at..]].concat(),
            _ => [&old[..at], self.rest].concat(),
        }
    }

    /// The stored value: the edited body, resealed under `key` or with the old checksum.
    fn stored(&self, key: &[u8], old_stored: &[u8], sealed: bool) -> Vec<u8> {
        if !sealed {
            return self.body(old_stored);
        }
        let split = old_stored.len().saturating_sub(CHECKSUM_LEN);
        let body = self.body(&old_stored[..split]);
        if self.reseal() {
            seal(key, &body)
        } else {
            [&body[..], &old_stored[split..]].concat()
        }
    }
}

/// Edits record `index` of a table keyed by bytes.
fn edit_bytes_keyed(
    w: &redb::WriteTransaction,
    def: TableDefinition<'static, &[u8], &[u8]>,
    index: u8,
    edit: &Edit<'_>,
    sealed: bool,
) {
    let mut t = w.open_table(def).expect("table");
    let entries: Vec<(Vec<u8>, Vec<u8>)> = t
        .iter()
        .expect("iter")
        .map(|e| {
            let (k, v) = e.expect("entry");
            (k.value().to_vec(), v.value().to_vec())
        })
        .collect();
    if entries.is_empty() {
        return;
    }
    let (key, old) = &entries[usize::from(index) % entries.len()];
    let mut new_key = key.clone();
    if edit.rekey() {
        if let Some(last) = new_key.last_mut() {
            *last ^= edit.at.wrapping_add(1);
        }
        t.remove(key.as_slice()).expect("remove");
    }
    let value = edit.stored(&new_key, old, sealed);
    t.insert(new_key.as_slice(), value.as_slice())
        .expect("insert");
}

fn edit_store(path: &std::path::Path, data: &[u8]) {
    let db = redb::Database::open(path).expect("redb opens the base store");
    let w = db.begin_write().expect("write txn");
    let edit = Edit {
        op: data[2],
        at: data[3],
        rest: &data[4..],
    };
    let index = data[1];
    match data[0] % 8 {
        0 => edit_bytes_keyed(&w, VERSIONS, index, &edit, true),
        1 => {
            let mut t = w.open_table(CHECKPOINTS).expect("checkpoints");
            let entries: Vec<(u64, Vec<u8>)> = t
                .iter()
                .expect("iter")
                .map(|e| {
                    let (k, v) = e.expect("entry");
                    (k.value(), v.value().to_vec())
                })
                .collect();
            if let Some((step, old)) = entries.get(usize::from(index) % entries.len().max(1)) {
                let mut new_step = *step;
                if edit.rekey() {
                    new_step ^= u64::from(edit.at) + 1;
                    t.remove(step).expect("remove");
                }
                let value = edit.stored(&new_step.to_be_bytes(), old, true);
                t.insert(new_step, value.as_slice()).expect("insert");
            }
        }
        2 => {
            let mut t = w.open_table(SEGMENTS).expect("segments");
            let entries: Vec<(u128, Vec<u8>)> = t
                .iter()
                .expect("iter")
                .map(|e| {
                    let (k, v) = e.expect("entry");
                    (k.value(), v.value().to_vec())
                })
                .collect();
            if let Some((addr, old)) = entries.get(usize::from(index) % entries.len().max(1)) {
                let mut new_addr = *addr;
                if edit.rekey() {
                    new_addr ^= u128::from(edit.at) + 1;
                    t.remove(addr).expect("remove");
                }
                let value = edit.stored(&new_addr.to_le_bytes(), old, true);
                t.insert(new_addr, value.as_slice()).expect("insert");
            }
        }
        3 => edit_bytes_keyed(&w, TIERS, index, &edit, true),
        4 => edit_bytes_keyed(&w, POLICIES, index, &edit, true),
        5 => {
            let mut t = w.open_table(TAGS).expect("tags");
            let entries: Vec<(Vec<u8>, u64)> = t
                .iter()
                .expect("iter")
                .map(|e| {
                    let (k, v) = e.expect("entry");
                    (k.value().to_vec(), v.value())
                })
                .collect();
            if let Some((tag, _)) = entries.get(usize::from(index) % entries.len().max(1)) {
                let mut b = [0u8; 8];
                let n = edit.rest.len().min(8);
                b[..n].copy_from_slice(&edit.rest[..n]);
                let mut new_tag = tag.clone();
                if edit.rekey() {
                    new_tag = edit.rest.get(8..).unwrap_or_default().to_vec();
                    t.remove(tag.as_slice()).expect("remove");
                }
                t.insert(new_tag.as_slice(), u64::from_le_bytes(b))
                    .expect("insert");
            }
        }
        6 => edit_bytes_keyed(&w, META, index, &edit, false),
        _ => edit_bytes_keyed(&w, MEMBERS, index, &edit, true),
    }
    w.commit().expect("commit the edit");
}

/// A few writes on the damaged store, each allowed to fail.
fn write_some(store: &mut Store) {
    if let Ok(names) = store.tensors() {
        for name in names.iter().take(4) {
            if let Ok(vs) = store.versions(name) {
                if let Some(v) = vs.first() {
                    let _ = store.delete(name, v.step);
                }
            }
        }
    }
    let _ = store.maintain(30 * 86_400_000);
    let w: Vec<u8> = (0..640u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[16, 40],
        bytes: &w,
    };
    let _ = store.save_checkpoint(1000, &[("w.f32", t)], "{}");
    let _ = store.retain(&RetainPolicy {
        keep_last: Some(1),
        keep_every: None,
        keep_tagged: true,
    });
    let _ = store.verify();
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    install_panic_hook();
    let base = base();
    let path = scratch_path("records.strata");
    std::fs::write(&path, base).expect("write the scratch store");
    edit_store(&path, data);
    if let Ok(mut store) = Store::open(&path) {
        exercise(&store, &scratch_path("records-export.safetensors"));
        if data[2] & 16 != 0 {
            write_some(&mut store);
        }
        // redb commits when the database closes; the store contains a panic there too.
        drop(store);
    }
});

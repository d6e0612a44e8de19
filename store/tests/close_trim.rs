//! Closing a writer's handle trims the room redb reserves for growth (ADR 0028): after a
//! training loop's close, the file's length (`ls -l`) is within a tenth of the bytes it takes
//! on disk, the ones the store's ratio counts. A writer takes the lowest free pages (ADR 0040),
//! so the room stays at the end of the file and a commit cuts it off without reading a page:
//! every close, a handle per save included, leaves a truthful length at no pass over the file.
//! A read in progress does not stop that cut, and the close succeeds. A handle whose deletions
//! freed pages gives them back as it closes (ADR 0038), with a compaction.

#![allow(clippy::unwrap_used, clippy::panic, missing_docs)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{f32_bytes, noise, temp_store};
use strata_store::{DType, Options, Store, TensorRef};

/// `(length, bytes on disk)` of the file, as `ls -l` and `du` see it.
fn sizes(path: &Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap();
    (m.len(), m.blocks() * 512)
}

/// Whether the file's length exceeds its bytes on disk by more than a tenth.
fn length_misleads(path: &Path) -> bool {
    let (len, disk) = sizes(path);
    len * 10 > disk * 11
}

/// A small model's training state: weights and AdamW's two moments, 12 tensors of 256 KiB to
/// 1 MiB of f32, drifting a little every step.
struct Model {
    tensors: Vec<Vec<f32>>,
    step: u64,
}

impl Model {
    fn new() -> Model {
        Model {
            tensors: (0..12)
                .map(|i| noise(65536 * (1 + i % 4), i as u64))
                .collect(),
            step: 0,
        }
    }

    /// Ten optimizer steps.
    fn train(&mut self) {
        self.step += 10;
        for (i, t) in self.tensors.iter_mut().enumerate() {
            let d = noise(t.len(), 1000 * self.step + i as u64);
            for (x, e) in t.iter_mut().zip(d) {
                *x += 1e-3 * e;
            }
        }
    }

    fn save(&self, store: &Store) {
        let mut w = store.begin_checkpoint(self.step, "").unwrap();
        for (i, t) in self.tensors.iter().enumerate() {
            let bytes = f32_bytes(t);
            let shape = [t.len() as u64];
            let t = TensorRef {
                dtype: DType::F32,
                shape: &shape,
                bytes: &bytes,
            };
            w.put(&format!("layer.{i}"), &t).unwrap();
        }
        w.commit().unwrap();
    }

    /// Checks that the store's latest checkpoint is this state, bit-exact, and that it
    /// verifies.
    fn check(&self, path: &Path) {
        let store = Store::open_read_only(path).unwrap();
        let cp = store.load_checkpoint(self.step).unwrap();
        for (i, t) in self.tensors.iter().enumerate() {
            let (name, got) = &cp.tensors[i];
            assert_eq!(name, &format!("layer.{i}"));
            assert!(got.data == f32_bytes(t), "{name} differs");
        }
        assert!(store.verify().unwrap().is_ok());
    }
}

/// Trains with one handle until the file holds room for growth worth trimming.
fn train_until_room(store: &Store, model: &mut Model, path: &Path) {
    for _ in 0..40 {
        model.train();
        model.save(store);
        if model.step >= 100 && length_misleads(path) {
            return;
        }
    }
    panic!("the file never held room for growth: {:?}", sizes(path));
}

#[test]
fn closing_a_writer_trims_the_room_for_growth() {
    let (_dir, path) = temp_store();
    let mut model = Model::new();
    let store = Store::open(&path).unwrap();
    train_until_room(&store, &mut model, &path);
    let before = sizes(&path);
    drop(store);
    let after = sizes(&path);
    assert!(
        !length_misleads(&path),
        "after close: length {} on disk {} (before close: {before:?})",
        after.0,
        after.1
    );
    assert!(after.0 < before.0);
    model.check(&path);
}

#[test]
fn a_handle_per_save_leaves_a_truthful_length_at_every_close() {
    // Opened and closed around every save, as `strata.torch.save_file` does. Before ADR 0040
    // the room redb grew the file by lay anywhere in it, and only a compaction (a pass over the
    // whole file) gave it back, so closes trimmed once per quarter of growth (ADR 0036) and the
    // length misled in between. Now the room is at the end, and every close cuts it.
    let (_dir, path) = temp_store();
    let mut model = Model::new();
    let mut misled = 0;
    for _ in 0..24 {
        model.train();
        let store = Store::open(&path).unwrap();
        model.save(&store);
        misled += usize::from(length_misleads(&path));
        drop(store);
        assert!(
            !length_misleads(&path),
            "step {}: {:?}",
            model.step,
            sizes(&path)
        );
    }
    assert!(misled > 0, "no save grew the file: the test does not test");
    model.check(&path);
}

#[test]
fn a_small_save_into_a_large_store_is_trimmed_at_its_end() {
    let (_dir, path) = temp_store();
    let mut model = Model::new();
    let store = Store::open(&path).unwrap();
    for _ in 0..6 {
        model.train();
        model.save(&store);
    }
    drop(store);
    assert!(!length_misleads(&path), "{:?}", sizes(&path));

    // Saves of 256 KiB, a handle each, until one grows the file (redb doubles it): the trim
    // cuts the room off the end, and gives back no page of the file's middle.
    let mut step = 1_000_000;
    loop {
        step += 1;
        let bytes = f32_bytes(&noise(65536, step));
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[65536],
            bytes: &bytes,
        };
        let mut store = Store::open(&path).unwrap();
        store.save_checkpoint(step, &[("extra", t)], "").unwrap();
        let grown = sizes(&path);
        if length_misleads(&path) {
            assert!(store.trim().unwrap(), "not trimmed: {grown:?}");
            let trimmed = sizes(&path);
            assert!(!length_misleads(&path), "{trimmed:?}, from {grown:?}");
            assert!(trimmed.1 <= grown.1, "{trimmed:?}, from {grown:?}");
            break;
        }
        assert!(step < 1_000_100, "no save grew the file: {grown:?}");
        drop(store);
    }
    model.check(&path);
}

#[test]
fn trim_on_close_false_leaves_the_end_to_redb_s_close() {
    // Strata's trim is off; redb's own close commit cuts the free pages at the end of the file,
    // which is where the room for growth is.
    let (_dir, path) = temp_store();
    let mut model = Model::new();
    let opts = Options {
        trim_on_close: false,
        ..Options::default()
    };
    let store = Store::open_with(&path, opts).unwrap();
    train_until_room(&store, &mut model, &path);
    drop(store);
    assert!(!length_misleads(&path), "{:?}", sizes(&path));
    model.check(&path);
}

#[test]
fn a_read_in_progress_does_not_stop_the_trim_and_the_close_succeeds() {
    let (_dir, path) = temp_store();
    let mut model = Model::new();
    let store = Store::open(&path).unwrap();
    train_until_room(&store, &mut model, &path);

    // Another handle, as another process would hold it, in the middle of a checkpoint. The
    // pages cut off the end are free: no snapshot holds them.
    let reader = Store::open_read_only(&path).unwrap();
    let mut tensors = reader.read_checkpoint(model.step).unwrap();
    let first = tensors.next().unwrap().unwrap();
    drop(store);
    assert!(!length_misleads(&path), "{:?}", sizes(&path));
    let rest: Vec<_> = tensors.collect::<Result<_, _>>().unwrap();
    assert_eq!(rest.len() + 1, model.tensors.len());
    assert!(first.1.data == f32_bytes(&model.tensors[0]));
    for ((name, got), (i, want)) in rest.iter().zip(model.tensors.iter().enumerate().skip(1)) {
        assert_eq!(name, &format!("layer.{i}"));
        assert!(got.data == f32_bytes(want), "{name} differs");
    }
    drop(reader);
    model.check(&path);
}

#[test]
fn a_close_gives_back_the_pages_deletions_freed() {
    // Ten checkpoints through one handle, trimmed at its close; then a second handle deletes
    // the newest seven (no later version depends on them: nothing is re-encoded, so the file
    // does not grow) and closes: the pages the deletions freed go back (ADR 0038), where
    // before they stayed until a compaction.
    let (_dir, path) = temp_store();
    let mut model = Model::new();
    {
        let store = Store::open(&path).unwrap();
        for _ in 0..10 {
            model.train();
            model.save(&store);
        }
    }
    let first = sizes(&path);
    {
        let store = Store::open(&path).unwrap();
        for step in (40..=100).rev().step_by(10) {
            store.delete_checkpoint(step).unwrap();
        }
    }
    let closed = sizes(&path);
    let mut store = Store::open(&path).unwrap();
    store.compact().unwrap();
    let compacted = store.file_bytes().unwrap();
    drop(store);
    assert!(
        closed.0 <= compacted + compacted / 20,
        "after the deletions' close: {closed:?}, compacted {compacted}, first close {first:?}"
    );
    let store = Store::open_read_only(&path).unwrap();
    assert_eq!(store.checkpoints().unwrap(), vec![10, 20, 30]);
    assert!(store.verify().unwrap().is_ok());
}

//! Bad input gets typed errors that name what and where; never a panic.

mod common;

use common::{f32_bytes, temp_store};
use strata_store::{
    DType, InvalidInput, NotFound, OpenError, PutOptions, Store, StoreError, TensorRef,
};

fn t<'a>(shape: &'a [u64], bytes: &'a [u8]) -> TensorRef<'a> {
    TensorRef {
        dtype: DType::F32,
        shape,
        bytes,
    }
}

#[test]
fn wrong_data_length() {
    let (_d, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let data = f32_bytes(&[1.0, 2.0, 3.0]);
    let err = store
        .put("w", 1, &t(&[2, 2], &data))
        .expect_err("3 values for a 2x2");
    match err {
        StoreError::Invalid(InvalidInput::DataLength {
            tensor,
            step,
            expected,
            actual,
        }) => {
            assert_eq!((tensor.as_str(), step, expected, actual), ("w", 1, 16, 12));
        }
        e => panic!("unexpected error {e}"),
    }
    let err = store
        .put("w", 1, &t(&[u64::MAX, 4], &data))
        .expect_err("overflowing shape");
    assert!(
        matches!(err, StoreError::Invalid(InvalidInput::Shape { .. })),
        "{err}"
    );
    let err = store.put("", 1, &t(&[3], &data)).expect_err("empty name");
    assert!(
        matches!(err, StoreError::Invalid(InvalidInput::Name { .. })),
        "{err}"
    );
    // Nothing was written by the failed puts.
    assert!(store.tensors().expect("tensors").is_empty());
}

#[test]
fn unknown_tensor_and_step() {
    let (_d, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let data = f32_bytes(&[1.0, 2.0]);
    store.put("w", 10, &t(&[2], &data)).expect("put");
    assert!(matches!(
        store.get("nope", 10),
        Err(StoreError::NotFound(NotFound::Tensor { tensor })) if tensor == "nope"
    ));
    assert!(matches!(
        store.get("w", 11),
        Err(StoreError::NotFound(NotFound::Version { tensor, step: 11 })) if tensor == "w"
    ));
    assert!(matches!(
        store.get_at("w", 9),
        Err(StoreError::NotFound(NotFound::AtOrBefore { step: 9, .. }))
    ));
    assert!(matches!(
        store.latest("nope"),
        Err(StoreError::NotFound(NotFound::Tensor { .. }))
    ));
    assert!(matches!(
        store.versions("nope"),
        Err(StoreError::NotFound(NotFound::Tensor { .. }))
    ));
    assert!(matches!(
        store.delete("w", 11),
        Err(StoreError::NotFound(NotFound::Version { step: 11, .. }))
    ));
    assert!(matches!(
        store.get_range("w", 10, 1..3),
        Err(StoreError::Invalid(InvalidInput::Range { elements: 2, .. }))
    ));
    assert!(matches!(
        store.load_checkpoint(5),
        Err(StoreError::NotFound(NotFound::Checkpoint { step: 5 }))
    ));
    assert!(matches!(
        store.tag("best", 5),
        Err(StoreError::NotFound(NotFound::Checkpoint { step: 5 }))
    ));
    assert!(matches!(
        store.untag("best"),
        Err(StoreError::NotFound(NotFound::Tag { .. }))
    ));
}

#[test]
fn step_written_twice() {
    let (_d, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let a = f32_bytes(&[1.0, 2.0]);
    let b = f32_bytes(&[3.0, 4.0]);
    store.put("w", 1, &t(&[2], &a)).expect("put");
    assert!(matches!(
        store.put("w", 1, &t(&[2], &b)),
        Err(StoreError::Invalid(InvalidInput::StepExists {
            step: 1,
            ..
        }))
    ));
    assert_eq!(store.get("w", 1).expect("get").data, a);
    store
        .put_with("w", 1, &t(&[2], &b), &PutOptions { overwrite: true })
        .expect("overwrite");
    assert_eq!(store.get("w", 1).expect("get").data, b);

    store
        .save_checkpoint(5, &[("w", t(&[2], &a))], "")
        .expect("checkpoint");
    assert!(matches!(
        store.save_checkpoint(5, &[("v", t(&[2], &a))], ""),
        Err(StoreError::Invalid(InvalidInput::CheckpointExists {
            step: 5
        }))
    ));
    assert!(matches!(
        store.save_checkpoint(6, &[("v", t(&[2], &a)), ("v", t(&[2], &b))], ""),
        Err(StoreError::Invalid(InvalidInput::DuplicateTensor {
            step: 6,
            ..
        }))
    ));
    // A checkpoint over a step a tensor already has fails whole: nothing of it is visible.
    assert!(matches!(
        store.save_checkpoint(1, &[("x", t(&[2], &a)), ("w", t(&[2], &b))], ""),
        Err(StoreError::Invalid(InvalidInput::StepExists {
            step: 1,
            ..
        }))
    ));
    assert!(matches!(
        store.get("x", 1),
        Err(StoreError::NotFound(NotFound::Tensor { .. }))
    ));
    assert_eq!(store.checkpoints().expect("list"), vec![5]);
}

#[test]
fn non_store_files() {
    let (dir, path) = temp_store();
    // Text.
    std::fs::write(&path, b"hello, this is not a database at all\n".repeat(100)).expect("write");
    let err = Store::open(&path).expect_err("text file");
    assert!(
        matches!(err, StoreError::Open(OpenError::NotAStore { .. })),
        "{err}"
    );
    // A few bytes.
    std::fs::write(&path, b"xy").expect("write");
    let err = Store::open(&path).expect_err("tiny file");
    assert!(
        matches!(err, StoreError::Open(OpenError::NotAStore { .. })),
        "{err}"
    );
    // A redb database of another application.
    let other = dir.path().join("other.redb");
    {
        create_foreign_redb(&other);
    }
    let err = Store::open(&other).expect_err("foreign redb");
    assert!(
        matches!(err, StoreError::Open(OpenError::NotAStore { .. })),
        "{err}"
    );
    // A folder.
    let err = Store::open(dir.path()).expect_err("a folder");
    assert!(
        matches!(
            err,
            StoreError::Io { .. } | StoreError::Open(OpenError::NotAStore { .. })
        ),
        "{err}"
    );
}

/// Makes a redb file with a table of its own.
fn create_foreign_redb(path: &std::path::Path) {
    let db = redb::Database::create(path).expect("create");
    let txn = db.begin_write().expect("write");
    {
        let def: redb::TableDefinition<'_, u64, u64> = redb::TableDefinition::new("things");
        let mut t = txn.open_table(def).expect("table");
        t.insert(1, 2).expect("insert");
    }
    txn.commit().expect("commit");
}

#[test]
fn truncated_store_file() {
    let (_d, path) = temp_store();
    {
        let store = Store::open(&path).expect("open");
        let data = f32_bytes(&common::noise(50_000, 3));
        store.put("w", 1, &t(&[50_000], &data)).expect("put");
    }
    let full = std::fs::read(&path).expect("read");
    for keep in [full.len() / 2, full.len() / 4, 4096, 100, 10] {
        std::fs::write(&path, &full[..keep]).expect("truncate");
        let opened = Store::open(&path);
        eprintln!(
            "truncated to {keep} of {}: {:?}",
            full.len(),
            opened.as_ref().err()
        );
        match opened {
            Err(
                StoreError::Open(OpenError::NotAStore { .. })
                | StoreError::Open(OpenError::Damaged { .. }),
            ) => {}
            Err(e) => panic!("truncated to {keep}: unexpected error {e}"),
            Ok(_) => panic!("truncated to {keep}: opened as if whole"),
        }
    }
}

#[test]
fn truncated_store_file_opened_to_read_names_the_file() {
    // A read-only open checks less than a writer's (redb compares the file's length with its
    // layout for a writer only): its first reads run past the end of the file, in the format
    // record or in the tier rows, by where the cut falls.
    let (_d, path) = temp_store();
    {
        let store = Store::open(&path).expect("open");
        for step in 1..=4u64 {
            let data = f32_bytes(&common::noise(50_000, step));
            store
                .save_checkpoint(step, &[("w", t(&[50_000], &data))], "")
                .expect("save");
        }
    }
    let full = std::fs::read(&path).expect("read");
    for keep in (1..=16).map(|k| full.len() * k / 17) {
        std::fs::write(&path, &full[..keep]).expect("truncate");
        // Cut late enough, the open reads only pages it still has: the reads after it fail,
        // and name the file too.
        let err = match Store::open_read_only(&path) {
            Ok(store) => {
                for step in 1..=4u64 {
                    if let Err(e) = store.load_checkpoint(step) {
                        let text = e.to_string();
                        assert!(text.contains(path.to_str().expect("utf-8")), "{text}");
                    }
                }
                continue;
            }
            Err(err) => err,
        };
        let text = err.to_string();
        eprintln!("truncated to {keep} of {}: {text}", full.len());
        assert!(
            matches!(err, StoreError::Open(OpenError::Damaged { path: ref p, .. }) if *p == path),
            "truncated to {keep}: {err:?}"
        );
        assert!(text.contains(path.to_str().expect("utf-8")), "{text}");
    }
}

#[test]
fn second_handle_is_refused() {
    let (_d, path) = temp_store();
    let _store = Store::open(&path).expect("open");
    let err = Store::open(&path).expect_err("second open");
    match err {
        StoreError::Open(OpenError::InUse { path: p }) => assert_eq!(p, path),
        e => panic!("unexpected error {e}"),
    }
}

#[test]
fn invalid_options() {
    let (_d, path) = temp_store();
    for opts in [
        strata_store::Options {
            block_bytes: 0,
            ..Default::default()
        },
        strata_store::Options {
            max_chain: 0,
            ..Default::default()
        },
    ] {
        assert!(matches!(
            Store::open_with(&path, opts),
            Err(StoreError::Invalid(InvalidInput::Options { .. }))
        ));
    }
}

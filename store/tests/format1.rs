//! A store written by the first version of the format (store format 1: segment format 1,
//! no tiers, no record checksums) is refused with a clear error, never misread.
//! `tests/fixtures/format1.strata` was made by `strata import` and `strata tag` at commit
//! fb59a1f from three small generated checkpoints.

#![allow(clippy::panic)]

mod common;

use std::path::PathBuf;

use strata_store::{OpenError, Store, StoreError};

#[test]
fn a_format_1_store_is_refused_with_its_version() {
    let (_dir, path) = common::temp_store();
    let fixture = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/format1.strata"
    ));
    std::fs::copy(&fixture, &path).expect("copy the fixture");
    match Store::open(&path) {
        Err(StoreError::Open(OpenError::UnsupportedFormat {
            found: 1,
            supported: 3,
            ..
        })) => {}
        other => panic!("expected UnsupportedFormat 1 vs 3, got {other:?}"),
    }
    // Refused again: nothing was rewritten in a newer format.
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::Open(OpenError::UnsupportedFormat {
            found: 1,
            ..
        }))
    ));
}

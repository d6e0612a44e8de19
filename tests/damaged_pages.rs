//! A damaged page of redb's own (issue 26, case 7): single-byte flips in the low-entropy pages
//! of a compacted store made `strata verify`, `log` and `export` panic inside redb (6 of 200).
//! Every public `Store` method now contains redb's panics as `Corruption::Engine` naming the
//! file. This flips a seeded sample of bytes (`tests/damage/mod.rs` says how and what each
//! outcome means) and requires every flip to be caught or harmless: never silent wrong data,
//! never a panic, never a hang. `STRATA_TEST_SEED` replays a run; `STRATA_FLIPS` sets the
//! number of flips (default 150); `examples/flip-bench.rs` runs more for the README. A second
//! test flips the leading bytes of every such page, one at a time.

#![allow(clippy::panic)]

mod damage;

use strata_testkit::noise::{seed, Rng};

#[test]
fn flipped_bytes_in_redb_pages_give_errors_never_panics_or_silent_data() {
    let flips: usize = std::env::var("STRATA_FLIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let dir = tempfile::tempdir().expect("temp dir");
    let base = damage::base(dir.path());
    assert!(!base.pages.is_empty(), "no low-entropy page in the store");
    let mut rng = Rng::new(seed("flipped_bytes_in_redb_pages"));
    let mut tally = damage::Tally::default();
    for i in 0..flips {
        let (bytes, what) = damage::flip(&base, &mut rng);
        let path = dir.path().join(format!("flip{i}.strata"));
        let outcome = damage::judge(&path, &bytes, &base, dir.path());
        tally.add(&format!("flip {i} ({what})"), outcome);
        let _ = std::fs::remove_file(&path);
    }
    eprintln!("{flips} flips: {tally:?}");
    assert_all_safe(&tally);
}

/// Each of the first [`LEADING`] bytes of every low-entropy page, flipped in turn (XOR 0x6b):
/// the headers, entry offsets and first keys of redb's B-tree pages. Among them are a leaf of
/// the freed-page table whose damage made a commit panic twice and abort the process, and a
/// key that named a transaction no commit reaches, on which a compaction committed forever:
/// both are errors now (`vendor/redb`, ADR 0039). Deterministic, where the seeded sample finds
/// such a byte only now and then.
#[test]
fn every_leading_byte_of_every_redb_page_flipped_gives_an_error_or_nothing() {
    const LEADING: usize = 128;
    let dir = tempfile::tempdir().expect("temp dir");
    let base = damage::base(dir.path());
    let mut tally = damage::Tally::default();
    for (n, &page) in base.pages.iter().enumerate() {
        for at in page..page + LEADING {
            let mut bytes = base.bytes.clone();
            bytes[at] ^= 0x6b;
            // A file of its own each time: a hung judge's thread may still hold the last one.
            let path = dir.path().join(format!("page{n}-{at}.strata"));
            let outcome = damage::judge(&path, &bytes, &base, dir.path());
            tally.add(&format!("byte {at} ^= 0x6b"), outcome);
            let _ = std::fs::remove_file(&path);
        }
    }
    eprintln!(
        "{} pages x {LEADING} leading bytes: {tally:?}",
        base.pages.len()
    );
    assert_all_safe(&tally);
}

/// No panic, no silent damage, no hang, and at least one flip caught (else the flips miss
/// redb's pages).
fn assert_all_safe(tally: &damage::Tally) {
    assert!(tally.panics.is_empty(), "panics: {:#?}", tally.panics);
    assert!(
        tally.silent.is_empty(),
        "silent damage: {:#?}",
        tally.silent
    );
    assert_eq!(tally.hangs, 0, "reads that did not end");
    assert!(
        tally.caught > 0,
        "no flip was caught: the test does not reach redb's pages"
    );
}

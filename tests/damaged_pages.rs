//! A damaged page of redb's own (issue 26, case 7): single-byte flips in the low-entropy pages
//! of a compacted store made `strata verify`, `log` and `export` panic inside redb (6 of 200).
//! Every public `Store` method now contains redb's panics as `Corruption::Engine` naming the
//! file. This flips a seeded sample of bytes (`tests/damage/mod.rs` says how and what each
//! outcome means) and requires every flip to be caught or harmless: never silent wrong data,
//! never a panic, never a hang. `STRATA_TEST_SEED` replays a run; `STRATA_FLIPS` sets the
//! number of flips (default 150); `examples/flip-bench.rs` runs more for the README.

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

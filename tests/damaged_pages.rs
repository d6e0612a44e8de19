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

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Each of the first 128 bytes (`STRATA_SWEEP_BYTES`, up to 4096) of every low-entropy page,
/// flipped in turn (XOR 0x6b):
/// the headers, entry offsets and first keys of redb's B-tree pages. Among them are a leaf of
/// the freed-page table whose damage made a commit panic twice and abort the process, and a
/// key that named a transaction no commit reaches, on which a compaction committed forever:
/// both are errors now (`vendor/redb`, ADR 0039). Deterministic, where the seeded sample finds
/// such a byte only now and then.
#[test]
fn every_leading_byte_of_every_redb_page_flipped_gives_an_error_or_nothing() {
    let leading: usize = std::env::var("STRATA_SWEEP_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128usize)
        .min(4096);
    let dir = tempfile::tempdir().expect("temp dir");
    let base = damage::base(dir.path());
    let mut tally = damage::Tally::default();
    for (n, &page) in base.pages.iter().enumerate() {
        for at in page..(page + leading).min(base.bytes.len()) {
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
        "{} pages x {leading} leading bytes: {tally:?}",
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

/// The largest single allocation of this test process, in bytes.
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, recording the largest allocation asked of it.
struct Largest;

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; recording a size touches no memory of the allocation.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout is passed on as given (non-zero size is its duty).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`; `new_size` is the caller's, as given.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// Every word of the low-entropy pages that reads as a pointer to a page of the file gets the
/// largest page order redb's format allows (20: 4 GiB). redb allocated and zeroed a buffer of
/// that size before it read past the end of the file (found by the `store_open` fuzz target);
/// now a page's range is checked against the file first (`vendor/redb`, ADR 0039). No read
/// may allocate more than [`MOST`].
#[test]
fn a_page_pointer_claiming_4_gib_is_refused_before_its_buffer() {
    const MOST: usize = 256 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let base = damage::base(dir.path());
    let file_pages = (base.bytes.len() / 4096) as u64;
    let mut tally = damage::Tally::default();
    let mut tried = 0;
    for &page in &base.pages {
        for at in (page..page + 4096).step_by(8) {
            let word = u64::from_le_bytes(base.bytes[at..at + 8].try_into().expect("8 bytes"));
            // redb's page pointer: page index in bits 0-19, region in 20-39, order in 59-63.
            let (index, region, rest) = (word & 0xF_FFFF, (word >> 20) & 0xF_FFFF, word >> 40);
            if index == 0 || index >= file_pages || region > 0 || rest != 0 {
                continue;
            }
            let mut bytes = base.bytes.clone();
            bytes[at + 7] |= 20 << 3;
            LARGEST.store(0, Ordering::Relaxed);
            let path = dir.path().join(format!("order-{at}.strata"));
            let outcome = damage::judge(&path, &bytes, &base, dir.path());
            let largest = LARGEST.load(Ordering::Relaxed);
            assert!(
                largest <= MOST,
                "byte {at}: an allocation of {largest} bytes ({outcome:?})"
            );
            tally.add(&format!("byte {at}: order 20"), outcome);
            let _ = std::fs::remove_file(&path);
            tried += 1;
        }
    }
    eprintln!("{tried} page pointers given order 20: {tally:?}");
    assert!(tried > 0, "no word of the pages reads as a page pointer");
    assert_all_safe(&tally);
}

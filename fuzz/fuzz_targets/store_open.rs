//! Fuzz target: a whole store file, as [`Store::open`] finds it on disk.
//!
//! The input is written to a scratch file (on `/dev/shm` when there is one) and opened;
//! if it opens, every read runs on it through [`strata_codec_fuzz::store_util::exercise`]
//! (`verify`, the tensor and version lists, budgeted `get`s, checkpoints and their loads,
//! tags, policies, `stats`, one export). Errors are fine; a panic, a hang or an unbounded
//! allocation (libFuzzer's `-timeout`, `-rss_limit_mb` and `-malloc_limit_mb`) is not. (redb
//! allocated up to 4 GiB for a damaged page pointer before it read the page; the vendored
//! redb checks the page's range first: fuzz/README.md, "Findings".)
//!
//! redb does not checksum its pages, so a mutated file gets past redb more often than one
//! would think; but Strata seals each record with a checksum of its key and value, so a
//! random byte change in a record stops at that record. `store_records` goes past that
//! check (it reseals edited records); this target covers redb's own parsing as Strata
//! drives it, `Store::open`'s format checks, and what every read does with the tables it
//! finds.
//!
//! redb trusts its own file and can panic on a damaged one, anywhere it reads a page; every
//! public `Store` method (and the store's drop, where redb commits) turns such a panic into
//! an error naming the file (`Corruption::Engine`, `OpenError::Damaged`) with
//! `catch_unwind`. libfuzzer-sys's panic hook would abort on it first, so this target
//! installs a hook that lets panics raised inside redb ([`strata_store::raised_in_engine`],
//! crates.io's redb or the vendored one) unwind to the store's
//! `catch_unwind`, and aborts on any other panic as before. A redb panic that escapes a
//! `Store` method reaches libfuzzer-sys's own `catch_unwind`, which aborts: a crash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec_fuzz::store_util::{exercise, install_panic_hook, scratch_path};
use strata_store::Store;

/// LeakSanitizer suppressions (read by the sanitizer runtime at start-up): allocations made
/// inside `Store::open_with`. When redb panics in the drop of the store `open_with` built
/// (a reported issue: redb commits as the database closes and trusts the damaged file),
/// the error `open_with` was returning is never dropped, and LeakSanitizer reports it
/// (`regressions/store_open/redb-drop-panic-leaks-open-error`). That leak is the panic's,
/// already reported; this keeps it from stopping the fuzzer.
#[no_mangle]
pub extern "C" fn __lsan_default_suppressions() -> *const std::ffi::c_char {
    c"leak:open_with\n".as_ptr()
}

fuzz_target!(|data: &[u8]| {
    install_panic_hook();
    let path = scratch_path("open.strata");
    std::fs::write(&path, data).expect("write the scratch store");
    if let Ok(store) = Store::open(&path) {
        exercise(&store, &scratch_path("open-export.safetensors"));
        // redb commits when the database closes; the store contains a panic there too.
        drop(store);
    }
});

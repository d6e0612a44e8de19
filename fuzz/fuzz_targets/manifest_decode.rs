//! Fuzz target: a checkpoint manifest as a remote serves it (`store/src/record/manifest.rs`).
//!
//! Each input is decoded as given, then resealed (its xxh3-64 appended, as the encoder
//! does) so that mutations get past the checksum to the field decoders and the consistency
//! checks. Errors are fine; panics, hangs and allocations sized by an unchecked count are
//! not. Seeds in `fuzz/corpus/manifest_decode` are real manifests (`strata push` of the
//! committed series to a `file://` remote).

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_store::decode_manifest;
use twox_hash::XxHash3_64;

fuzz_target!(|data: &[u8]| {
    let _ = decode_manifest(data);
    let body = data.get(..data.len().saturating_sub(8)).unwrap_or_default();
    let mut sealed = body.to_vec();
    sealed.extend_from_slice(&XxHash3_64::oneshot(body).to_le_bytes());
    if let Ok(n) = decode_manifest(&sealed) {
        // A manifest that decodes lists at least as many versions as the bytes can hold.
        assert!(n <= sealed.len());
    }
});

//! Fuzz target: an HPΔKV blob, as the store reads a residual back.
//!
//! Every input goes through [`HpdkvView::parse`]. For a blob that parses and whose values
//! take at most 4 MiB:
//! - the values are decoded into a buffer pre-filled with 0xAAAA and one pre-filled with
//!   0x5555 (lz4_flex's `fuzz_decomp_no_output_leak` trick): both results must be equal,
//!   and equal to the allocating [`HpdkvBlob::decode`];
//! - a decoded blob must encode again, and decode from that to the same blob; a raw
//!   (uncompressed) blob must re-encode to exactly the input bytes, since the format leaves
//!   a raw blob no freedom (zero padding, increasing indices, no trailing bytes);
//! - for at most 2^20 elements, the residual is applied to a zero tensor, which must fail
//!   only for a non-finite value.
//!
//! Errors are fine, panics are not.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::hpdkv::{HpdkvBlob, HpdkvView};
use strata_codec::residual::{self, ResidualError};

/// Blobs whose values take more bytes than this are parsed but not decoded.
const MAX_VALUES_BYTES: usize = 4 << 20;
/// Largest tensor the residual is applied to.
const MAX_APPLY: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(view) = HpdkvView::parse(data) else {
        return;
    };
    let count = view.value_count();
    if count * 2 > MAX_VALUES_BYTES as u64 {
        return;
    }
    let n = count as usize;
    let mut a = vec![0xAAAAu16; n];
    let mut b = vec![0x5555u16; n];
    let ra = view.values_into(&mut a);
    let rb = view.values_into(&mut b);
    assert_eq!(ra, rb, "result depends on the output buffer's contents");
    let rc = HpdkvBlob::decode(data, MAX_VALUES_BYTES);
    match (&ra, &rc) {
        (Ok(()), Ok(blob)) => {
            assert_eq!(a, b, "values depend on the output buffer's contents");
            assert_eq!(a, blob.values, "decode and values_into disagree");
            assert_eq!(blob.shape, view.shape());
            assert_eq!(blob.indices.is_some(), view.is_sparse());
            let again = blob
                .encode(view.is_compressed())
                .expect("a decoded blob encodes");
            let back =
                HpdkvBlob::decode(&again, MAX_VALUES_BYTES).expect("re-encoded blob decodes");
            assert_eq!(&back, blob, "decode(encode(blob)) differs");
            if !view.is_compressed() {
                assert_eq!(again, data, "a raw blob re-encodes to other bytes");
            }
        }
        (Err(ea), Err(ec)) => assert_eq!(ea, ec, "decode and values_into fail differently"),
        _ => panic!(
            "decode and values_into disagree: {ra:?} vs {:?}",
            rc.map(|_| ())
        ),
    }

    if ra.is_ok() && view.elements() <= MAX_APPLY {
        let mut t = vec![0.0f32; view.elements() as usize];
        match residual::apply_residual(&view, &mut t) {
            Ok(()) => assert!(t.iter().all(|x| x.is_finite())),
            Err(ResidualError::NonFiniteResidual { .. }) => {
                assert!(a.iter().any(|&w| !view.dtype().to_f32(w).is_finite()));
            }
            Err(e) => panic!("applying a decodable blob failed: {e}"),
        }
    }
});

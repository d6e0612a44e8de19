//! Fuzz target: an aged blob (`strata_codec::aged`, ADR 0020), as the store reads an aged
//! block back.
//!
//! Every input goes through [`AgedView::parse`] exactly as given. Mutated bytes almost never
//! pass the trailing xxh3 checksum, nor, for a blob with a base, the base hash a read checks,
//! so each input is then *resealed*: the checksum the parser computed is written where its
//! error says the checksum is, and a blob with a base gets the hash of the fixed base
//! [`base_pattern`] of its length (taken from the decoder's `BaseMismatch` error, so this
//! target does not hash anything itself). Where the base hash sits is not copied from the
//! format either: [`BASE_HASH_AT`] finds it once in a blob the codec encodes. The resealed
//! blob runs through the same checks, which lets mutations reach the payload decoder and the
//! reconstruction through the public API.
//!
//! For a blob that parses and holds at most [`MAX_ELEMENTS`] elements, `decode_into`:
//! - (a) with no base, and (b) with the base `base_pattern(len)` of the right length. Each
//!   runs into an output pre-filled with 0xAA and one pre-filled with 0x55 (lz4_flex's
//!   `fuzz_decomp_no_output_leak` trick): both must give the same result and, when they
//!   succeed, the same bytes. A read whose base does not match the blob's flag (none given
//!   for a blob with a base, or one given for a blob without) must fail.
//! - (c) into outputs of the wrong length (one element more, one fewer, one byte more) and
//!   of the other dtype of the same width (f16 for bf16 and back): each must fail.
//!
//! Errors are fine, panics are not. Seeds in `fuzz/corpus/aged_decode/seed-*` are real
//! blobs of every dtype, with and without a base, with 2- and 4-byte words
//! (`examples/make_seeds.rs`), made against [`base_pattern`] so they decode fully as given.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use strata_codec::aged::{self, AgedError, AgedView, HEADER_LEN};
use strata_codec::lossless::LosslessOptions;
use strata_codec::DType;
use strata_codec_fuzz::base_pattern;

/// Blobs of more elements than this are parsed but not decoded (at most 256 KiB of f32).
const MAX_ELEMENTS: u64 = 1 << 16;

/// Offset in the header of the u64 LE base hash [`reseal`] rewrites. Found once, by encoding
/// a blob against a base with the codec, reading the stored hash back from the error of a
/// decode over another base (`BaseMismatch { expected }`) and looking for it among the
/// first [`HEADER_LEN`] bytes. If a format change broke that (the field moved out of the
/// header, or stored in another form), every run fails here at once instead of resealing
/// the wrong bytes.
static BASE_HASH_AT: LazyLock<usize> = LazyLock::new(|| {
    let base = base_pattern(2048);
    let mut data = base.clone();
    data.iter_mut().step_by(2).for_each(|b| *b ^= 0x15);
    let blob = aged::encode(
        DType::BF16,
        &data,
        Some(&base),
        1e-3,
        &LosslessOptions::default(),
    )
    .expect("the codec encodes an aged blob")
    .expect("a budget of 1e-3 is met");
    let view = AgedView::parse(&blob.bytes).expect("a fresh blob parses");
    let mut out = vec![0u8; data.len()];
    let expected = match view.decode_into(DType::BF16, Some(&data), &mut out) {
        Err(AgedError::BaseMismatch { expected, .. }) => expected,
        other => panic!("a decode over another base gave {other:?}"),
    };
    let found: Vec<usize> = blob.bytes[..HEADER_LEN]
        .windows(8)
        .enumerate()
        .filter(|(_, w)| *w == expected.to_le_bytes())
        .map(|(i, _)| i)
        .collect();
    assert!(
        found.len() == 1,
        "{expected:#x} at header offsets {found:?}"
    );
    found[0]
});

fuzz_target!(|data: &[u8]| {
    exercise(data);
    if let Some(sealed) = reseal(data) {
        exercise(&sealed);
    }
});

/// Parses `bytes` and, if that succeeds, decodes it every way the API allows.
fn exercise(bytes: &[u8]) {
    let Ok(view) = AgedView::parse(bytes) else {
        return;
    };
    // `parse` checks both errors are finite and not negative.
    assert!(view.rel_error().is_finite() && view.rel_error() >= 0.0);
    assert!(view.max_abs_error().is_finite() && view.max_abs_error() >= 0.0);
    if view.elements() > MAX_ELEMENTS {
        return;
    }
    let dtype = view.dtype();
    let size = dtype.size();
    let len = view.elements() as usize * size;

    // (a) no base: must fail for a blob with one.
    let r = check_decode(&view, dtype, None, len);
    assert!(
        !(view.has_base() && r.is_ok()),
        "a blob with a base decoded without one"
    );
    // (b) a base of the right length: must fail for a blob without one.
    let base = base_pattern(len);
    let r = check_decode(&view, dtype, Some(&base), len);
    assert!(
        view.has_base() || r.is_err(),
        "a blob without a base decoded over one"
    );

    // (c) the wrong output length or dtype: always an error.
    let b = view.has_base().then_some(&base[..]);
    let mut wrong = vec![len + size, len + 1];
    if len >= size {
        wrong.push(len - size);
    }
    for n in wrong {
        let longer;
        let b = match b {
            // A base as long as the output, so only the output's length is wrong.
            Some(_) => {
                longer = base_pattern(n);
                Some(&longer[..])
            }
            None => None,
        };
        let mut out = vec![0xAAu8; n];
        let r = view.decode_into(dtype, b, &mut out);
        assert!(r.is_err(), "{n} bytes accepted for {len} bytes of {dtype}");
    }
    let other = match dtype {
        DType::BF16 => DType::F16,
        DType::F16 => DType::BF16,
        _ => DType::I32,
    };
    let mut out = vec![0x55u8; len];
    assert!(
        view.decode_into(other, b, &mut out).is_err(),
        "a {dtype} blob decoded as {other}"
    );
}

/// Decodes into a 0xAA-filled and a 0x55-filled output of `len` bytes; both results and,
/// on success, both outputs must agree. Returns the result.
fn check_decode(
    view: &AgedView<'_>,
    dtype: DType,
    base: Option<&[u8]>,
    len: usize,
) -> Result<(), String> {
    let mut a = vec![0xAAu8; len];
    let mut b = vec![0x55u8; len];
    let ra = view
        .decode_into(dtype, base, &mut a)
        .map_err(|e| e.to_string());
    let rb = view
        .decode_into(dtype, base, &mut b)
        .map_err(|e| e.to_string());
    assert!(
        ra == rb,
        "decode result depends on the output buffer's contents: {ra:?} vs {rb:?}"
    );
    if ra.is_ok() {
        assert!(
            a == b,
            "decoded bytes depend on the output buffer's contents"
        );
    }
    ra
}

/// A copy of `data` with a valid checksum and, for a blob with a base, the hash of
/// [`base_pattern`] recorded as its base's; `None` when the header itself is invalid or
/// nothing needed changing.
fn reseal(data: &[u8]) -> Option<Vec<u8>> {
    let mut v = data.to_vec();
    let mut changed = false;
    // At most three fixes: checksum, base hash, checksum again.
    for _ in 0..3 {
        match AgedView::parse(&v) {
            Err(AgedError::Checksum {
                offset, computed, ..
            }) => {
                v.get_mut(offset..offset + 8)?
                    .copy_from_slice(&computed.to_le_bytes());
            }
            Err(_) => return None,
            Ok(view) => {
                if !view.has_base() || view.elements() > MAX_ELEMENTS {
                    break;
                }
                let len = view.elements() as usize * view.dtype().size();
                // The base hash is checked before the payload is decoded.
                let mut out = vec![0u8; len];
                match view.decode_into(view.dtype(), Some(&base_pattern(len)), &mut out) {
                    Err(AgedError::BaseMismatch { actual, .. }) => {
                        let at = *BASE_HASH_AT;
                        v[at..at + 8].copy_from_slice(&actual.to_le_bytes());
                    }
                    _ => break,
                }
            }
        }
        changed = true;
    }
    changed.then_some(v)
}

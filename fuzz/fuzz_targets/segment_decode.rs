//! Fuzz target: a whole segment, as a reader gets it from disk.
//!
//! Every input first goes through [`Segment::parse`] exactly as given. Random bytes and
//! mutated seeds almost never pass the checksum, so each input is then *resealed*: the
//! checksum the parser computed is written into the header, and a delta's base hash is
//! set to the hash of the fixed base [`base_pattern`] of the right length (both values
//! are taken from the parser's own errors, so this target does not duplicate the format's
//! hashing). Where those two fields sit in the header is not copied from the format
//! either: [`HeaderFields`] finds them once in a delta the codec encodes (the codec keeps
//! its field offsets private). The resealed segment runs through the same checks, which
//! lets mutations reach the payload decoders through the public API.
//!
//! For a segment that parses and decodes to at most 4 MiB:
//! - lossless: decode without a base and with the base [`base_pattern`] of the right
//!   length (pseudo-random rather than zeros, so that a delta coded with base-exponent
//!   contexts uses many contexts); then prefixes of both (`decode_lossless_prefix_into`),
//!   which must equal the start of a whole decode that succeeds;
//! - quantized: dequantize;
//! - quantized frames ([`FrameSegment`]): every frame on its own, which must match
//!   [`FrameSegment::decode_all`]; and [`FrameStreamEncoder::resume`] followed by
//!   `snapshot` must give back the segment's exact bytes.
//!
//! Errors are fine, panics are not. Like lz4_flex's `fuzz_decomp_no_output_leak`, every
//! decode runs into a buffer pre-filled with 0xAA and one pre-filled with 0x55: both must
//! give the same result, so a decoder that leaves part of its output unwritten, or reads
//! from it, is caught. The allocating API must agree with both.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use strata_codec::frames::{FrameSegment, FrameStreamEncoder, MAX_FRAMES};
use strata_codec::lossless::LosslessOptions;
use strata_codec::segment::{self, Encoding, Segment, SegmentError, HEADER_LEN};
use strata_codec::DType;
use strata_codec_fuzz::base_pattern;

/// Blocks decoding to more bytes than this are parsed but not decoded.
const MAX_DECODED: usize = 4 << 20;

/// Offsets in the segment header of the two fields [`reseal`] rewrites, for the format
/// this build of the codec writes ([`segment::FORMAT_VERSION`]).
struct HeaderFields {
    /// The u64 LE [`SegmentHeader::base_hash`](segment::SegmentHeader::base_hash).
    base_hash: usize,
    /// The u64 LE [`SegmentHeader::checksum`](segment::SegmentHeader::checksum).
    checksum: usize,
}

/// Found once, by encoding a delta with the codec and looking for the parsed header's
/// `base_hash` and `checksum` among its first [`HEADER_LEN`] bytes. Both are xxh3-64
/// values, each found at exactly one offset for this input; if a format change broke that
/// (a field moved out of the header, or stored in another form), every run fails here
/// at once instead of resealing the wrong bytes.
static FIELDS: LazyLock<HeaderFields> = LazyLock::new(|| {
    let base = base_pattern(4096);
    let mut data = base.clone();
    data.iter_mut().step_by(7).for_each(|b| *b ^= 0x21);
    let seg = segment::encode_delta(DType::BF16, &data, &base, &LosslessOptions::default())
        .expect("the codec encodes a delta");
    let header = *Segment::parse(&seg).expect("a fresh delta parses").header();
    let at = |value: u64| {
        let found: Vec<usize> = seg[..HEADER_LEN]
            .windows(8)
            .enumerate()
            .filter(|(_, w)| *w == value.to_le_bytes())
            .map(|(i, _)| i)
            .collect();
        assert!(found.len() == 1, "{value:#x} at header offsets {found:?}");
        found[0]
    };
    HeaderFields {
        base_hash: at(header.base_hash),
        checksum: at(header.checksum),
    }
});

fuzz_target!(|data: &[u8]| {
    exercise(data);
    if let Some(sealed) = reseal(data) {
        exercise(&sealed);
    }
});

/// Parses `bytes` and, if that succeeds, decodes it every way the API allows.
fn exercise(bytes: &[u8]) {
    // A store parses without the checksum (its content address proves the bytes): that
    // parse must refuse everything `parse` refuses but a checksum mismatch, and agree with
    // it on the rest.
    let unchecked = Segment::parse_without_checksum(bytes);
    let seg = match Segment::parse(bytes) {
        Ok(seg) => seg,
        Err(SegmentError::ChecksumMismatch { .. }) => {
            assert!(unchecked.is_ok(), "only the checksum failed: {unchecked:?}");
            return;
        }
        Err(e) => {
            assert_eq!(unchecked.err(), Some(e), "the parses disagree");
            return;
        }
    };
    let unchecked = unchecked.expect("a segment that parses parses without its checksum");
    assert!(unchecked.header() == seg.header() && unchecked.payload() == seg.payload());
    let header = *seg.header();
    // `parse` has already checked that the decoded length fits in `usize`.
    let Ok(len) = header.decoded_len() else {
        return;
    };
    if len > MAX_DECODED {
        return;
    }
    if header.encoding.is_lossless() {
        check_lossless(&seg, None, len);
        check_lossless(&seg, Some(&base_pattern(len)), len);
    } else if let Encoding::QuantizedFrames(_) = header.encoding {
        check_frames(&seg, bytes);
    } else {
        check_quantized(&seg, len / 4);
    }
}

fn check_lossless(seg: &Segment<'_>, base: Option<&[u8]>, len: usize) {
    let mut a = vec![0xAAu8; len];
    let mut b = vec![0x55u8; len];
    let ra = seg.decode_lossless_into(base, &mut a);
    let rb = seg.decode_lossless_into(base, &mut b);
    assert_same(
        &ra,
        &rb,
        "decode result depends on the output buffer's contents",
    );
    let rc = seg.decode_lossless(base, MAX_DECODED);
    match rc {
        Ok(c) => {
            assert!(ra.is_ok(), "decode_lossless succeeded where _into failed");
            assert!(
                a == b,
                "decoded bytes depend on the output buffer's contents"
            );
            assert!(a == c, "decode_lossless and decode_lossless_into disagree");
        }
        Err(e) => assert_same(&ra, &Err(e), "decode_lossless and _into fail differently"),
    }
    check_prefixes(seg, base, len, ra.is_ok().then_some(&a[..]));
}

/// Prefix decodes of one element, of about half and of all but one: never a panic, never
/// dependent on the output buffer, and when the whole block decodes (`whole`), a prefix
/// decodes to exactly its first bytes.
fn check_prefixes(seg: &Segment<'_>, base: Option<&[u8]>, len: usize, whole: Option<&[u8]>) {
    let size = seg.header().dtype.size();
    let n = len / size;
    for m in [1, n / 2, n.saturating_sub(1)] {
        let p = m.min(n) * size;
        let base = base.map(|b| &b[..p]);
        let mut a = vec![0xAAu8; p];
        let mut b = vec![0x55u8; p];
        let ra = seg.decode_lossless_prefix_into(base, &mut a);
        let rb = seg.decode_lossless_prefix_into(base, &mut b);
        assert_same(&ra, &rb, "prefix result depends on the output buffer");
        if ra.is_ok() {
            assert!(a == b, "prefix bytes depend on the output buffer");
        }
        if let Some(whole) = whole {
            assert!(
                ra.is_ok(),
                "a prefix failed where the whole block decodes: {ra:?}"
            );
            assert!(a == whole[..p], "a prefix differs from the whole decode");
        }
    }
}

fn check_quantized(seg: &Segment<'_>, n: usize) {
    let mut a = vec![f32::from_bits(0xAAAA_AAAA); n];
    let mut b = vec![f32::from_bits(0x5555_5555); n];
    let ra = seg.dequantize_into(&mut a);
    let rb = seg.dequantize_into(&mut b);
    assert_same(
        &ra,
        &rb,
        "dequantize result depends on the output buffer's contents",
    );
    let rc = seg.dequantize(MAX_DECODED);
    match rc {
        Ok(c) => {
            assert!(ra.is_ok(), "dequantize succeeded where _into failed");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(&a) == bits(&b),
                "dequantized values depend on the output buffer's contents"
            );
            assert!(
                bits(&a) == bits(&c),
                "dequantize and dequantize_into disagree"
            );
        }
        Err(e) => assert_same(&ra, &Err(e), "dequantize and _into fail differently"),
    }
}

fn check_frames(seg: &Segment<'_>, bytes: &[u8]) {
    let Ok(frames) = FrameSegment::from_segment(seg) else {
        return;
    };
    let n = frames.frame_len();
    let total = u64::from(frames.frame_count()) * n as u64 * 4;
    if total > MAX_DECODED as u64 {
        return;
    }
    let all = frames.decode_all(MAX_DECODED);
    let mut all_ok = true;
    for i in 0..frames.frame_count() {
        let mut a = vec![f32::from_bits(0xAAAA_AAAA); n];
        let mut b = vec![f32::from_bits(0x5555_5555); n];
        let ra = frames.decode_frame_into(i, &mut a);
        let rb = frames.decode_frame_into(i, &mut b);
        let (da, db) = (format!("{ra:?}"), format!("{rb:?}"));
        assert!(
            da == db,
            "frame result depends on the output buffer: {da} vs {db}"
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        match ra {
            Ok(()) => {
                assert!(
                    bits(&a) == bits(&b),
                    "frame values depend on the output buffer"
                );
                if let Ok(all) = &all {
                    let at = i as usize * n;
                    assert!(
                        bits(&all[at..at + n]) == bits(&a),
                        "frame {i} differs in decode_all"
                    );
                }
                assert!(
                    a.iter().all(|x| x.is_finite()),
                    "a frame decoded to a non-finite value"
                );
            }
            Err(_) => all_ok = false,
        }
    }
    assert!(all.is_ok() == all_ok, "decode_all and the frames disagree");
    let resumed =
        FrameStreamEncoder::resume(bytes, MAX_FRAMES).expect("a parsed frame segment resumes");
    assert!(
        resumed.snapshot().as_deref() == Some(bytes),
        "resume + snapshot changed the segment"
    );
}

/// Asserts two results are the same. Compared by their `Debug` form: errors may hold a
/// NaN scale, which `PartialEq` never finds equal to itself.
fn assert_same(a: &Result<(), SegmentError>, b: &Result<(), SegmentError>, what: &str) {
    let (a, b) = (format!("{a:?}"), format!("{b:?}"));
    assert!(a == b, "{what}: {a} vs {b}");
}

/// A copy of `data` with a valid checksum and, for a delta, [`base_pattern`] recorded as
/// its base; `None` when the header itself is invalid or nothing needed changing.
fn reseal(data: &[u8]) -> Option<Vec<u8>> {
    let fields = &*FIELDS;
    let mut v = data.to_vec();
    let mut changed = false;
    // At most three fixes: checksum, base hash, checksum again.
    for _ in 0..3 {
        match Segment::parse(&v) {
            Err(SegmentError::ChecksumMismatch { computed, .. }) => {
                let at = fields.checksum;
                v[at..at + 8].copy_from_slice(&computed.to_le_bytes());
            }
            Err(_) => return None,
            Ok(seg) => {
                let header = *seg.header();
                if header.encoding != Encoding::Delta {
                    break;
                }
                let len = header.decoded_len().ok()?;
                if len > MAX_DECODED {
                    break;
                }
                // The base hash is checked before the output length, so an empty output
                // buffer learns the hash without decoding anything.
                match seg.decode_lossless_into(Some(&base_pattern(len)), &mut []) {
                    Err(SegmentError::BaseMismatch { actual, .. }) => {
                        let at = fields.base_hash;
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

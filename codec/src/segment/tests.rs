use super::*;
use crate::quant::{QuantBits, QuantParams};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn sample(n: usize, phase: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32) * 0.37 + phase).sin() * 0.05)
        .collect()
}

#[test]
fn keyframe_and_delta_round_trip() {
    let opts = LosslessOptions::default();
    let a = f32_bytes(&sample(1000, 0.0));
    let b = f32_bytes(&sample(1000, 0.001));
    let key = encode_keyframe(DType::F32, &a, &opts).unwrap();
    let seg = Segment::parse(&key).unwrap();
    assert_eq!(seg.header().encoding, Encoding::Keyframe);
    assert_eq!(seg.header().elements, 1000);
    assert_eq!(seg.decode_lossless(None, usize::MAX).unwrap(), a);

    let delta = encode_delta(DType::F32, &b, &a, &opts).unwrap();
    let seg = Segment::parse(&delta).unwrap();
    assert_eq!(seg.header().encoding, Encoding::Delta);
    assert_eq!(seg.decode_lossless(Some(&a), usize::MAX).unwrap(), b);
    // Wrong base, no base, a base on a keyframe.
    assert!(matches!(
        seg.decode_lossless(Some(&b), usize::MAX),
        Err(SegmentError::BaseMismatch { .. })
    ));
    assert!(matches!(
        seg.decode_lossless(None, usize::MAX),
        Err(SegmentError::BaseArgument { needed: true, .. })
    ));
    let key_seg = Segment::parse(&key).unwrap();
    assert!(matches!(
        key_seg.decode_lossless(Some(&a), usize::MAX),
        Err(SegmentError::BaseArgument { needed: false, .. })
    ));
    assert!(matches!(
        key_seg.decode_lossless(None, 10),
        Err(SegmentError::OverLimit {
            len: 4000,
            limit: 10
        })
    ));
    assert!(matches!(
        key_seg.dequantize(usize::MAX),
        Err(SegmentError::WrongKind { .. })
    ));
}

#[test]
fn quantized_round_trip_and_kind() {
    let v = sample(640, 0.3);
    for bits in QuantBits::ALL {
        let bytes = encode_quantized(DType::BF16, &v, &QuantParams::new(bits)).unwrap();
        let seg = Segment::parse(&bytes).unwrap();
        assert_eq!(seg.header().encoding.quant_bits(), Some(bits));
        assert_eq!(seg.header().dtype, DType::BF16);
        let back = seg.dequantize(usize::MAX).unwrap();
        let bound = 0.05 * bits.relative_error_bound() * 1.0001;
        assert!(v
            .iter()
            .zip(&back)
            .all(|(a, b)| (a - b).abs() as f64 <= bound));
        assert!(matches!(
            seg.decode_lossless(None, usize::MAX),
            Err(SegmentError::WrongKind { .. })
        ));
    }
    assert!(matches!(
        encode_quantized(DType::I32, &v, &QuantParams::new(QuantBits::B8)),
        Err(SegmentError::NotFloat { dtype: DType::I32 })
    ));
}

#[test]
fn two_level_encoding_is_marked() {
    let mut v = vec![0.001f32; 128];
    v[5] = 3.0;
    let bytes = encode_quantized(DType::F32, &v, &QuantParams::new(QuantBits::B3)).unwrap();
    let seg = Segment::parse(&bytes).unwrap();
    assert_eq!(seg.header().encoding, Encoding::TwoLevel3);
    assert_eq!(seg.payload().len(), 40 + 28);
    assert_eq!(seg.dequantize(usize::MAX).unwrap()[5], 3.0);
}

/// A segment parser: [`Segment::parse`] or [`Segment::parse_without_checksum`].
type Parse = for<'a> fn(&'a [u8]) -> Result<Segment<'a>, SegmentError>;

#[test]
fn header_errors_are_specific() {
    let seg = encode_keyframe(
        DType::F32,
        &f32_bytes(&sample(64, 0.0)),
        &LosslessOptions::default(),
    )
    .unwrap();
    // Both parses check the header and the payload length; only `parse` the checksum.
    let parses: [Parse; 2] = [
        |b| Segment::parse(b),
        |b| Segment::parse_without_checksum(b),
    ];
    for parse in parses {
        assert_eq!(
            parse(&seg[..10]).unwrap_err(),
            SegmentError::TooShort { len: 10 }
        );
        let mut bad = seg.clone();
        bad[0] = b'X';
        assert!(matches!(parse(&bad), Err(SegmentError::BadMagic { .. })));
        let mut bad = seg.clone();
        bad[4] = FORMAT_VERSION + 1;
        assert_eq!(
            parse(&bad).unwrap_err(),
            SegmentError::UnsupportedVersion {
                version: FORMAT_VERSION + 1
            }
        );
        let mut bad = seg.clone();
        bad[5] = 9;
        assert_eq!(
            parse(&bad).unwrap_err(),
            SegmentError::UnknownEncoding { code: 9 }
        );
        let mut bad = seg.clone();
        bad[6] = 99;
        assert_eq!(
            parse(&bad).unwrap_err(),
            SegmentError::UnknownDType { code: 99 }
        );
        let mut bad = seg.clone();
        bad.push(0);
        assert!(matches!(
            parse(&bad),
            Err(SegmentError::PayloadLength { .. })
        ));
        let mut bad = seg.clone();
        bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(&bad).is_err());
    }
    let mut bad = seg;
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        Segment::parse(&bad),
        Err(SegmentError::ChecksumMismatch { .. })
    ));
    assert!(Segment::parse_without_checksum(&bad).is_ok());
}

#[test]
fn parsing_without_the_checksum_leaves_only_the_checksum_to_the_caller() {
    let data = f32_bytes(&sample(256, 0.5));
    let seg = encode_keyframe(DType::F32, &data, &LosslessOptions::default()).unwrap();
    let checked = Segment::parse(&seg).unwrap();
    let unchecked = Segment::parse_without_checksum(&seg).unwrap();
    assert_eq!(unchecked.header(), checked.header());
    assert_eq!(unchecked.payload(), checked.payload());
    let mut out = vec![0u8; data.len()];
    unchecked.decode_lossless_into(None, &mut out).unwrap();
    assert_eq!(out, data);

    // A changed checksum field fails `parse` only (the header errors of both parses:
    // `header_errors_are_specific`).
    let mut resummed = seg;
    resummed[CHECKSUM_OFS] ^= 1;
    assert!(matches!(
        Segment::parse(&resummed),
        Err(SegmentError::ChecksumMismatch { .. })
    ));
    assert!(Segment::parse_without_checksum(&resummed).is_ok());
}

/// Checksums and base hashes are XXH3-64 (stores hold them): known answers, from the
/// reference implementation, for the empty input and for 5000 bytes (whole stripe blocks
/// and a partial one), whole and in two writes as the checksum is taken.
#[test]
fn hashes_are_xxh3_64() {
    use std::hash::Hasher;
    let d: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    assert_eq!(XxHash3_64::oneshot(&[]), 0x2d06_8005_38d3_94c2);
    assert_eq!(XxHash3_64::oneshot(&d), 0xe096_9ae2_b59a_afcc);
    let mut h = XxHash3_64::new();
    h.write(&d[..40]);
    h.write(&d[40..]);
    assert_eq!(h.finish(), 0xe096_9ae2_b59a_afcc);
}

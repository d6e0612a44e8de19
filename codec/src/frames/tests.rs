use super::*;
use proptest::prelude::*;

fn base(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + seed as f32) * 0.61).sin() * 0.03 * (1.0 + (i % 5) as f32))
        .collect()
}

fn scaled(v: &[f32], f: f32) -> Vec<f32> {
    v.iter().map(|x| x * f).collect()
}

fn new_epoch(p: &FramePush) -> bool {
    matches!(p, FramePush::NewEpoch { .. })
}

/// Every element of `frame` is within `(1 + d) / (2 qmax) * scale_max` of `decoded`, up to
/// f32 rounding of the scale and of the product.
fn check_bound(seg: &FrameSegment<'_>, frame: &[f32], decoded: &[f32]) -> Result<(), String> {
    let p = FrameParams::new(seg.bits()).with_drift(seg.drift());
    let rel = p.relative_error_bound();
    let gs = seg.header().group_size as usize;
    for (i, (&x, &y)) in frame.iter().zip(decoded).enumerate() {
        let g = i / gs;
        let sm = f64::from(seg.scale_max()[g]);
        let allowed = rel * sm * (1.0 + 1e-6) + f64::from(y.abs()) * f64::from(f32::EPSILON);
        let err = (f64::from(x) - f64::from(y)).abs();
        if err > allowed {
            return Err(format!("element {i}: error {err} above {allowed}"));
        }
        let gb = f64::from(seg.group_error_bound(g).ok_or("no group bound")?);
        if err > gb * (1.0 + 1e-6) + f64::from(y.abs()) * f64::from(f32::EPSILON) {
            return Err(format!(
                "element {i}: error {err} above the group bound {gb}"
            ));
        }
    }
    Ok(())
}

#[test]
fn frames_within_the_band_share_scales() {
    let v = base(300, 1);
    let mut enc = FrameStreamEncoder::new(
        DType::F32,
        300,
        FrameParams::new(QuantBits::B8).with_group_size(32),
    )
    .unwrap();
    assert_eq!(
        enc.push(&v).unwrap(),
        FramePush::NewEpoch {
            reason: EpochReason::First,
            sealed: None
        }
    );
    let factors = [1.0f32, 1.09, 0.92, 1.0 / 1.09, 1.05];
    for (i, &f) in factors.iter().enumerate() {
        assert_eq!(
            enc.push(&scaled(&v, f)).unwrap(),
            FramePush::Reused {
                frame: i as u32 + 1
            }
        );
    }
    assert_eq!(enc.frames(), 6);
    let bytes = enc.finish().unwrap();
    let seg = FrameSegment::parse(&bytes).unwrap();
    assert_eq!(seg.frame_count(), 6);
    assert_eq!(seg.frame_len(), 300);
    assert_eq!(seg.drift(), DEFAULT_DRIFT);
    assert_eq!(seg.scale_max().len(), 300usize.div_ceil(32));
    // Layout: header, count, drift, scales, then frames at a fixed stride.
    assert_eq!(bytes.len(), HEADER_LEN + 8 + 4 * 10 + 6 * 300);
    for (i, f) in std::iter::once(1.0).chain(factors).enumerate() {
        let frame = scaled(&v, f);
        let got = seg.decode_frame(i as u32, usize::MAX).unwrap();
        check_bound(&seg, &frame, &got).unwrap();
    }
}

#[test]
fn growth_beyond_the_band_starts_an_epoch() {
    let v = base(128, 2);
    let mut enc =
        FrameStreamEncoder::new(DType::BF16, 128, FrameParams::new(QuantBits::B5)).unwrap();
    enc.push(&v).unwrap();
    let mut grown = v.clone();
    // Group 1 (values 64..128) grows by 11 % > 10 %.
    let m = grown[64..].iter().fold(0.0f32, |m, x| m.max(x.abs()));
    grown[100] = m * 1.11;
    match enc.push(&grown).unwrap() {
        FramePush::NewEpoch {
            reason:
                EpochReason::Grew {
                    group,
                    max_abs,
                    scale_max,
                },
            sealed: Some(sealed),
        } => {
            assert_eq!(group, 1);
            assert_eq!(max_abs, m * 1.11);
            assert_eq!(scale_max, m);
            let old = FrameSegment::parse(&sealed).unwrap();
            assert_eq!(old.frame_count(), 1);
            assert_eq!(old.header().dtype, DType::BF16);
        }
        other => panic!("expected a new epoch for growth, got {other:?}"),
    }
    assert_eq!(enc.frames(), 1);
}

#[test]
fn shrinking_beyond_the_band_starts_an_epoch() {
    let v = base(128, 3);
    let mut enc =
        FrameStreamEncoder::new(DType::F32, 128, FrameParams::new(QuantBits::B7)).unwrap();
    enc.push(&v).unwrap();
    // Every value shrinks by a factor just beyond 1 / (1 + d).
    match enc.push(&scaled(&v, 1.0 / 1.11)).unwrap() {
        FramePush::NewEpoch {
            reason: EpochReason::Shrank { group: 0, .. },
            sealed: Some(_),
        } => {}
        other => panic!("expected a new epoch for shrinking, got {other:?}"),
    }
    // Exactly at the band's edges the scales are reused.
    let mut enc = FrameStreamEncoder::new(
        DType::F32,
        2,
        FrameParams::new(QuantBits::B8).with_drift(0.5),
    )
    .unwrap();
    enc.push(&[2.0, 1.0]).unwrap();
    assert!(!new_epoch(&enc.push(&[3.0, 1.0]).unwrap()));
    assert!(!new_epoch(&enc.push(&[2.0 / 1.5, 1.0]).unwrap()));
    assert!(new_epoch(&enc.push(&[1.3, 1.0]).unwrap()));
}

#[test]
fn zero_drift_and_zero_groups() {
    let mut enc = FrameStreamEncoder::new(
        DType::F32,
        4,
        FrameParams::new(QuantBits::B3)
            .with_drift(0.0)
            .with_group_size(2),
    )
    .unwrap();
    enc.push(&[0.0, 0.0, 1.0, -0.5]).unwrap();
    // Same maxima: reused, even at d = 0.
    assert!(!new_epoch(&enc.push(&[0.0, -0.0, 0.5, -1.0]).unwrap()));
    // A zero group that becomes non-zero grows without bound.
    assert!(matches!(
        enc.push(&[1e-30, 0.0, 1.0, 0.0]).unwrap(),
        FramePush::NewEpoch {
            reason: EpochReason::Grew { group: 0, .. },
            ..
        }
    ));
    // And back to zero shrinks.
    assert!(matches!(
        enc.push(&[0.0, 0.0, 1.0, 0.0]).unwrap(),
        FramePush::NewEpoch {
            reason: EpochReason::Shrank { group: 0, .. },
            ..
        }
    ));
    let seg_bytes = enc.finish().unwrap();
    let seg = FrameSegment::parse(&seg_bytes).unwrap();
    assert_eq!(seg.decode_frame(0, 64).unwrap(), [0.0, 0.0, 1.0, 0.0]);
    assert_eq!(seg.group_error_bound(0), Some(0.0));
    assert_eq!(seg.group_error_bound(2), None);
}

#[test]
fn full_segment_starts_an_epoch() {
    let v = base(10, 4);
    let mut enc = FrameStreamEncoder::new(
        DType::F16,
        10,
        FrameParams::new(QuantBits::B8).with_max_frames(3),
    )
    .unwrap();
    for _ in 0..3 {
        enc.push(&v).unwrap();
    }
    match enc.push(&v).unwrap() {
        FramePush::NewEpoch {
            reason: EpochReason::Full,
            sealed: Some(s),
        } => assert_eq!(FrameSegment::parse(&s).unwrap().frame_count(), 3),
        other => panic!("expected a full segment, got {other:?}"),
    }
    assert_eq!(enc.frames(), 1);
}

#[test]
fn non_finite_frames_are_refused_and_change_nothing() {
    let mut enc = FrameStreamEncoder::new(DType::F32, 3, FrameParams::new(QuantBits::B8)).unwrap();
    enc.push(&[1.0, 2.0, 3.0]).unwrap();
    let before = enc.snapshot();
    for (bad, index) in [
        ([1.0, f32::NAN, 3.0], 1),
        ([f32::NEG_INFINITY, 1.0, 1.0], 0),
    ] {
        assert!(matches!(
            enc.push(&bad),
            Err(FrameError::Quant(QuantError::NonFinite { index: i, .. })) if i == index
        ));
    }
    assert!(matches!(
        enc.push(&[1.0]),
        Err(FrameError::FrameLength {
            expected: 3,
            actual: 1
        })
    ));
    assert_eq!(enc.snapshot(), before);
}

#[test]
fn parameters_are_checked() {
    let p = FrameParams::new(QuantBits::B8);
    let new = |dtype, n, p| FrameStreamEncoder::new(dtype, n, p).map(|_| ());
    assert!(matches!(
        new(DType::I32, 4, p),
        Err(FrameError::NotFloat { .. })
    ));
    assert!(matches!(new(DType::F32, 0, p), Err(FrameError::EmptyFrame)));
    for d in [-0.1, 1.5, f32::NAN, -0.0] {
        assert!(matches!(
            new(DType::F32, 4, p.with_drift(d)),
            Err(FrameError::InvalidDrift { .. })
        ));
    }
    for m in [0, MAX_FRAMES + 1] {
        assert!(matches!(
            new(DType::F32, 4, p.with_max_frames(m)),
            Err(FrameError::InvalidMaxFrames { .. })
        ));
    }
    assert!(matches!(
        new(DType::F32, 4, p.with_group_size(0)),
        Err(FrameError::Quant(QuantError::InvalidGroupSize { .. }))
    ));
    assert!((p.relative_error_bound() - 1.1 / 254.0).abs() < 1e-9);
}

#[test]
fn other_segments_are_not_frames_and_frames_are_not_blocks() {
    let q = segment::encode_quantized(
        DType::F32,
        &[1.0, 2.0],
        &crate::quant::QuantParams::new(QuantBits::B8),
    )
    .unwrap();
    assert!(matches!(
        FrameSegment::parse(&q),
        Err(FrameError::NotFrames {
            encoding: Encoding::Quantized(QuantBits::B8)
        })
    ));
    let mut enc = FrameStreamEncoder::new(DType::F32, 2, FrameParams::new(QuantBits::B8)).unwrap();
    enc.push(&[1.0, 2.0]).unwrap();
    let f = enc.finish().unwrap();
    let seg = Segment::parse(&f).unwrap();
    assert_eq!(
        seg.header().encoding,
        Encoding::QuantizedFrames(QuantBits::B8)
    );
    assert_eq!(seg.header().decoded_len().unwrap(), 8);
    assert!(matches!(
        seg.dequantize(usize::MAX),
        Err(SegmentError::WrongKind { .. })
    ));
    let fs = FrameSegment::from_segment(&seg).unwrap();
    assert!(matches!(
        fs.decode_frame(1, 64),
        Err(FrameError::FrameIndex { index: 1, count: 1 })
    ));
    assert!(matches!(
        fs.decode_frame(0, 7),
        Err(FrameError::OverLimit { len: 8, limit: 7 })
    ));
    assert!(matches!(
        fs.decode_frame_into(0, &mut [0.0; 3]),
        Err(FrameError::OutputLength { .. })
    ));
    assert!(matches!(
        fs.decode_all(7),
        Err(FrameError::OverLimit { .. })
    ));
}

#[test]
fn one_frame_decodes_without_the_others() {
    // 7 values at 5 bits: 35 bits, so each frame's last byte has 5 unused bits.
    let v = base(7, 5);
    let mut enc = FrameStreamEncoder::new(DType::F32, 7, FrameParams::new(QuantBits::B5)).unwrap();
    for f in [1.0, 1.02, 0.98, 1.01] {
        enc.push(&scaled(&v, f)).unwrap();
    }
    let bytes = enc.finish().unwrap();
    let all = FrameSegment::parse(&bytes)
        .unwrap()
        .decode_all(1 << 20)
        .unwrap();
    assert_eq!(all.len(), 28);
    // Wreck frames 0, 1 and 3 (all-ones codes are invalid), reseal, decode frame 2.
    let seg = FrameSegment::parse(&bytes).unwrap();
    let codes_at = bytes.len() - 4 * seg.stride;
    let mut bad = bytes.clone();
    for frame in [0usize, 1, 3] {
        let at = codes_at + frame * seg.stride;
        bad[at..at + seg.stride].fill(0xFF);
    }
    segment::seal(&mut bad);
    let seg = FrameSegment::parse(&bad).unwrap();
    assert_eq!(seg.decode_frame(2, 1 << 20).unwrap(), all[14..21]);
    for frame in [0, 1, 3] {
        assert!(seg.decode_frame(frame, 1 << 20).is_err());
    }
    // Unused bits set in frame 2 alone are refused.
    let mut pad = bytes.clone();
    pad[codes_at + 3 * seg.stride - 1] |= 0x80;
    segment::seal(&mut pad);
    let seg = FrameSegment::parse(&pad).unwrap();
    assert!(matches!(
        seg.decode_frame(2, 1 << 20),
        Err(FrameError::PaddingBits { frame: 2, .. })
    ));
    assert!(seg.decode_frame(1, 1 << 20).is_ok());
}

#[test]
fn stored_fields_are_checked() {
    let mut enc = FrameStreamEncoder::new(
        DType::F32,
        4,
        FrameParams::new(QuantBits::B8).with_group_size(2),
    )
    .unwrap();
    enc.push(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    let good = enc.finish().unwrap();
    let edit = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[HEADER_LEN + at..HEADER_LEN + at + bytes.len()].copy_from_slice(bytes);
        segment::seal(&mut b);
        FrameSegment::parse(&b).map(|_| ())
    };
    assert!(matches!(
        edit(0, &0u32.to_le_bytes()),
        Err(FrameError::NoFrames)
    ));
    assert!(matches!(
        edit(0, &2u32.to_le_bytes()),
        Err(FrameError::PayloadLength {
            expected: 24,
            actual: 20
        })
    ));
    assert!(matches!(
        edit(4, &2.0f32.to_le_bytes()),
        Err(FrameError::StoredDrift { .. })
    ));
    assert!(matches!(
        edit(8, &(-1.0f32).to_le_bytes()),
        Err(FrameError::InvalidScaleMax { group: 0, .. })
    ));
    assert!(matches!(
        edit(12, &f32::INFINITY.to_le_bytes()),
        Err(FrameError::InvalidScaleMax { group: 1, .. })
    ));
    // An all-ones 8-bit code decodes to -128: out of range.
    let mut b = good.clone();
    let last = b.len() - 1;
    b[last] = 0xFF;
    segment::seal(&mut b);
    assert!(matches!(
        FrameSegment::parse(&b).unwrap().decode_frame(0, 64),
        Err(FrameError::Quant(QuantError::CodeOutOfRange {
            index: 3,
            ..
        }))
    ));
}

#[test]
fn huge_and_tiny_magnitudes_keep_the_bound() {
    for v in [
        vec![f32::MAX, -f32::MAX, 1.0, 0.0],
        vec![1e-40, -2e-40, 1e-45, 0.0],
        vec![1e30, -3e29, 1e29, 5e29],
    ] {
        let mut enc = FrameStreamEncoder::new(
            DType::F32,
            4,
            FrameParams::new(QuantBits::B8).with_drift(1.0),
        )
        .unwrap();
        enc.push(&v).unwrap();
        let bytes = enc.finish().unwrap();
        let seg = FrameSegment::parse(&bytes).unwrap();
        let got = seg.decode_frame(0, 64).unwrap();
        assert!(got.iter().all(|x| x.is_finite()), "{got:?}");
        let bound = f64::from(seg.error_bound());
        for (x, y) in v.iter().zip(&got) {
            let err = (f64::from(*x) - f64::from(*y)).abs();
            assert!(
                err <= bound * (1.0 + 1e-6) + f64::from(y.abs()) * 1.2e-7,
                "{x} -> {y}"
            );
        }
    }
}

#[test]
fn resume_continues_the_same_epoch() {
    let v = base(50, 6);
    let frames: Vec<Vec<f32>> = [1.0, 1.03, 0.97, 1.05, 1.2, 1.21]
        .iter()
        .map(|&f| scaled(&v, f))
        .collect();
    let params = FrameParams::new(QuantBits::B7).with_group_size(16);
    let mut straight = FrameStreamEncoder::new(DType::F32, 50, params).unwrap();
    let mut sealed_straight = Vec::new();
    for f in &frames {
        if let FramePush::NewEpoch {
            sealed: Some(s), ..
        } = straight.push(f).unwrap()
        {
            sealed_straight.push(s);
        }
    }
    sealed_straight.extend(straight.finish());

    let mut first = FrameStreamEncoder::new(DType::F32, 50, params).unwrap();
    first.push(&frames[0]).unwrap();
    first.push(&frames[1]).unwrap();
    let snap = first.snapshot().unwrap();
    let mut resumed = FrameStreamEncoder::resume(&snap, params.max_frames).unwrap();
    assert_eq!(resumed.frames(), 2);
    assert_eq!(resumed.params(), &params);
    assert_eq!(resumed.frame_len(), 50);
    let mut sealed_resumed = Vec::new();
    for f in &frames[2..] {
        if let FramePush::NewEpoch {
            sealed: Some(s), ..
        } = resumed.push(f).unwrap()
        {
            sealed_resumed.push(s);
        }
    }
    sealed_resumed.extend(resumed.finish());
    assert_eq!(sealed_resumed, sealed_straight);
    assert_eq!(sealed_straight.len(), 2, "1.2 is beyond 10 % of 1.0");
}

proptest! {
    #[test]
    fn round_trip_within_the_drift_bound(
        n in 1usize..300,
        seed in 0u32..1000,
        gs in prop::sample::select(vec![1u32, 7, 64, 100]),
        bits in prop::sample::select(QuantBits::ALL.to_vec()),
        drift in prop::sample::select(vec![0.0f32, 0.05, 0.1, 0.2, 1.0]),
        factors in prop::collection::vec(0.7f32..1.4, 1..12),
        max_frames in 1u32..6,
    ) {
        let v = base(n, seed);
        let params = FrameParams::new(bits).with_group_size(gs).with_drift(drift).with_max_frames(max_frames);
        let mut enc = FrameStreamEncoder::new(DType::F32, n, params).unwrap();
        let mut segments: Vec<Vec<u8>> = Vec::new();
        // (segment number, frame index in it, values) of every frame.
        let mut placed: Vec<(usize, u32, Vec<f32>)> = Vec::new();
        let mut epochs = 0usize;
        for (t, &f) in factors.iter().enumerate() {
            let frame: Vec<f32> = v.iter().enumerate()
                .map(|(i, x)| x * f + ((i + t) as f32 * 0.01).cos() * 1e-3)
                .collect();
            match enc.push(&frame).unwrap() {
                FramePush::Reused { frame: idx } => placed.push((epochs - 1, idx, frame)),
                FramePush::NewEpoch { sealed, .. } => {
                    segments.extend(sealed);
                    epochs += 1;
                    prop_assert_eq!(segments.len(), epochs - 1);
                    placed.push((epochs - 1, 0, frame));
                }
            }
        }
        segments.extend(enc.finish());
        prop_assert_eq!(segments.len(), epochs);
        for (s, idx, frame) in &placed {
            let seg = FrameSegment::parse(&segments[*s]).unwrap();
            prop_assert!(seg.frame_count() <= max_frames);
            let got = seg.decode_frame(*idx, usize::MAX).unwrap();
            if let Err(e) = check_bound(&seg, frame, &got) {
                return Err(TestCaseError::fail(e));
            }
            // Every frame of an epoch is within the band of its scale_max.
            let gs = gs as usize;
            for (g, chunk) in frame.chunks(gs).enumerate() {
                let m = f64::from(chunk.iter().fold(0.0f32, |m, x| m.max(x.abs())));
                let sm = f64::from(seg.scale_max()[g]);
                let d = 1.0 + f64::from(drift);
                prop_assert!(m <= sm * d && m * d >= sm);
            }
            let all = seg.decode_all(usize::MAX).unwrap();
            let at = *idx as usize * n;
            prop_assert_eq!(&all[at..at + n], &got[..]);
        }
    }
}

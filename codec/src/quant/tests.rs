use super::*;
use proptest::prelude::*;

fn round_trip(values: &[f32], params: &QuantParams) -> (Vec<f32>, Vec<u8>, QuantStats) {
    let mut payload = Vec::new();
    let stats = quantize(values, params, &mut payload).expect("quantize");
    assert_eq!(stats.payload_bytes, payload.len());
    let shape = QuantShape {
        bits: params.bits,
        group_size: params.group_size,
        two_level: stats.two_level_groups > 0,
    };
    let mut out = vec![f32::NAN; values.len()];
    let back = dequantize(&payload, shape, &mut out).expect("dequantize");
    assert_eq!(back, stats);
    (out, payload, stats)
}

/// Checks `|x - x̂| <= max_abs(group) / (2 qmax)` (plus f32 rounding) in every group.
fn assert_within_bound(values: &[f32], back: &[f32], params: &QuantParams) {
    let gs = params.group_size as usize;
    let rel = params.bits.relative_error_bound();
    for (g, (x, y)) in values.chunks(gs).zip(back.chunks(gs)).enumerate() {
        let m = f64::from(max_abs(x));
        // scale/2 plus f32 rounding of the division and product, and one subnormal step.
        let bound = m * rel * (1.0 + 1e-5) + 1.5e-45;
        for (i, (&a, &b)) in x.iter().zip(y).enumerate() {
            let err = (f64::from(a) - f64::from(b)).abs();
            assert!(
                err <= bound,
                "group {g} elem {i}: {a} -> {b}, err {err} > bound {bound}"
            );
        }
    }
}

#[test]
fn adr019_storage_sizes() {
    let v: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 7.0).collect();
    for (bits, size) in [
        (QuantBits::B8, 68),
        (QuantBits::B7, 60),
        (QuantBits::B5, 44),
        (QuantBits::B3, 28),
    ] {
        assert_eq!(group_storage_size(bits, 64, false), size);
        let (_, payload, stats) = round_trip(&v, &QuantParams::new(bits));
        assert_eq!(stats.two_level_groups, 0);
        assert_eq!(payload.len(), size, "{bits:?}");
    }
    assert_eq!(group_storage_size(QuantBits::B3, 64, true), 40);
    // A heavy-tailed group goes two-level and costs 40 bytes.
    let mut heavy = vec![0.01f32; 64];
    heavy[3] = 10.0;
    heavy[40] = -8.0;
    let (_, payload, stats) = round_trip(&heavy, &QuantParams::new(QuantBits::B3));
    assert_eq!(stats.two_level_groups, 1);
    assert_eq!(payload.len(), 40);
}

#[test]
fn two_level_keeps_bulk_values_precise() {
    let mut v: Vec<f32> = (0..64).map(|i| ((i % 7) as f32 - 3.0) * 0.01).collect();
    v[10] = 5.0;
    let params = QuantParams::new(QuantBits::B3);
    let (two, _, stats) = round_trip(&v, &params);
    assert_eq!(stats.two_level_groups, 1);
    let (one, _, _) = round_trip(
        &v,
        &QuantParams {
            two_level: None,
            ..params
        },
    );
    let err = |b: &[f32]| {
        v.iter()
            .zip(b)
            .filter(|(x, _)| x.abs() < 1.0)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    assert!(
        err(&two) < err(&one) / 10.0,
        "two-level {} vs standard {}",
        err(&two),
        err(&one)
    );
    assert_eq!(two[10], 5.0);
}

#[test]
fn non_finite_is_refused() {
    let mut out = Vec::new();
    for bad in [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7FC0_0001),
    ] {
        let v = [1.0, 2.0, bad, 3.0];
        let err = quantize(&v, &QuantParams::new(QuantBits::B8), &mut out).unwrap_err();
        assert_eq!(
            err,
            QuantError::NonFinite {
                index: 2,
                bits: bad.to_bits()
            }
        );
        assert!(out.is_empty());
    }
}

#[test]
fn zeros_tiny_and_huge() {
    let params = QuantParams::new(QuantBits::B8);
    let (back, _, _) = round_trip(&[0.0, -0.0, 0.0], &params);
    assert_eq!(back, vec![0.0; 3]);
    for m in [
        1e-30f32,
        1e30,
        f32::MAX,
        1e-40,
        f32::from_bits(1),
        f32::MIN_POSITIVE,
    ] {
        let v: Vec<f32> = (0..64).map(|i| m * (((i as f32) - 32.0) / 32.0)).collect();
        for bits in QuantBits::ALL {
            let p = QuantParams::new(bits);
            let (back, _, _) = round_trip(&v, &p);
            assert_within_bound(&v, &back, &p);
            assert!(back.iter().all(|x| x.is_finite()));
        }
    }
}

#[test]
fn group_sizes_that_do_not_align() {
    let v: Vec<f32> = (0..1000)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.3)
        .collect();
    for gs in [1, 3, 10, 63, 64, 65, 999, 1000, 4096] {
        for bits in QuantBits::ALL {
            let p = QuantParams::new(bits).with_group_size(gs);
            let (back, payload, stats) = round_trip(&v, &p);
            assert_within_bound(&v, &back, &p);
            assert_eq!(
                payload.len(),
                payload_size(
                    bits,
                    v.len(),
                    gs,
                    stats.two_level_groups,
                    two_values(&v, gs, &payload)
                )
            );
        }
    }
}

/// Values held by two-level groups, read back from the scales' sign bits.
fn two_values(v: &[f32], gs: u32, payload: &[u8]) -> usize {
    let gs = gs as usize;
    payload
        .chunks_exact(4)
        .take(v.len().div_ceil(gs))
        .enumerate()
        .filter(|(_, b)| b[3] & 0x80 != 0)
        .map(|(g, _)| gs.min(v.len() - g * gs))
        .sum()
}

#[test]
fn bad_parameters() {
    let mut out = Vec::new();
    let p = QuantParams::new(QuantBits::B5).with_group_size(0);
    assert_eq!(
        quantize(&[1.0], &p, &mut out),
        Err(QuantError::InvalidGroupSize { group_size: 0 })
    );
    let p = QuantParams {
        two_level: Some(TwoLevel {
            threshold: f32::NAN,
            outlier_fraction: 0.05,
        }),
        ..QuantParams::new(QuantBits::B3)
    };
    assert!(matches!(
        quantize(&[1.0], &p, &mut out),
        Err(QuantError::InvalidTwoLevel { .. })
    ));
}

#[test]
fn decoder_rejects_bad_payloads() {
    let v: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let p = QuantParams::new(QuantBits::B7);
    let mut payload = Vec::new();
    quantize(&v, &p, &mut payload).unwrap();
    let shape = QuantShape {
        bits: QuantBits::B7,
        group_size: 64,
        two_level: false,
    };
    let mut out = vec![0.0; 64];
    // Truncated and extended payloads.
    assert!(matches!(
        dequantize(&payload[..59], shape, &mut out),
        Err(QuantError::PayloadLength {
            expected: 60,
            actual: 59
        })
    ));
    let mut long = payload.clone();
    long.push(0);
    assert!(matches!(
        dequantize(&long, shape, &mut out),
        Err(QuantError::PayloadLength { .. })
    ));
    // A NaN scale, and a two-level mark in a plain payload.
    let mut bad = payload.clone();
    bad[..4].copy_from_slice(&f32::NAN.to_le_bytes());
    assert!(matches!(
        dequantize(&bad, shape, &mut out),
        Err(QuantError::InvalidScale { group: 0, .. })
    ));
    // A finite scale whose product with qmax overflows would decode to infinity.
    let mut bad = payload.clone();
    bad[..4].copy_from_slice(&f32::MAX.to_le_bytes());
    assert!(matches!(
        dequantize(&bad, shape, &mut out),
        Err(QuantError::InvalidScale { group: 0, .. })
    ));
    let mut bad = payload.clone();
    bad[3] |= 0x80;
    assert!(matches!(
        dequantize(&bad, shape, &mut out),
        Err(QuantError::InvalidScale { group: 0, .. })
    ));
    // An all-ones 7-bit code (127 biased = qmax + 1).
    let mut bad = payload.clone();
    bad[4] = 0x7F;
    assert!(matches!(
        dequantize(&bad, shape, &mut out),
        Err(QuantError::CodeOutOfRange {
            index: 0,
            code: 64,
            qmax: 63
        })
    ));
    // Bad group size from a header.
    assert!(matches!(
        dequantize(
            &payload,
            QuantShape {
                group_size: 0,
                ..shape
            },
            &mut out
        ),
        Err(QuantError::InvalidGroupSize { group_size: 0 })
    ));
}

fn finite_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        -1.0f32..1.0,
        -1e30f32..1e30,
        any::<f32>().prop_filter("finite", |x| x.is_finite()),
        Just(0.0f32),
        Just(-0.0f32),
    ]
}

proptest! {
    #[test]
    fn error_bound_every_tier(
        v in prop::collection::vec(finite_f32(), 0..400),
        bits in prop::sample::select(QuantBits::ALL.to_vec()),
        gs in prop::sample::select(vec![1u32, 7, 8, 32, 64, 100]),
    ) {
        let p = QuantParams::new(bits).with_group_size(gs);
        let (back, payload, stats) = round_trip(&v, &p);
        assert_within_bound(&v, &back, &p);
        prop_assert_eq!(payload.len(), payload_size(bits, v.len(), gs, stats.two_level_groups, two_values(&v, gs, &payload)));
    }

    #[test]
    fn heavy_tails_stay_within_bound(
        bulk in prop::collection::vec(-0.01f32..0.01, 64),
        spikes in prop::collection::vec((0usize..64, -100.0f32..100.0), 1..4),
    ) {
        let mut v = bulk;
        for (i, s) in spikes { v[i] = s; }
        let p = QuantParams::new(QuantBits::B3);
        let (back, _, _) = round_trip(&v, &p);
        assert_within_bound(&v, &back, &p);
    }
}

/// Every field the quantizer loop fills (floats as bits).
#[derive(Debug, PartialEq)]
struct KernelOutput {
    scales: Vec<u32>,
    codes: Vec<i8>,
    secondary: Vec<u32>,
    flags: Vec<u8>,
    flag_count: usize,
}

/// What the quantizer loop gives with one kernel.
fn kernel_output(simd: Simd, v: &[f32], p: &QuantParams) -> Result<KernelOutput, QuantError> {
    let mut scales = Vec::new();
    let mut codes = vec![0i8; v.len()];
    let mut two = TwoLevelParts::default();
    quantize_kernel_with(simd, v, p, &mut scales, &mut codes, &mut two)?;
    Ok(KernelOutput {
        scales: scales.iter().map(|s| s.to_bits()).collect(),
        codes,
        secondary: two.secondary.iter().map(|s| s.to_bits()).collect(),
        flags: two.flags,
        flag_count: two.flag_count,
    })
}

proptest! {
    /// The AVX2 kernel (where the CPU has it) gives what the portable reference gives.
    #[test]
    fn kernels_agree(
        mut v in prop::collection::vec(finite_f32(), 0..400),
        bits in prop::sample::select(QuantBits::ALL.to_vec()),
        gs in prop::sample::select(vec![1u32, 7, 64, 100]),
        bad in prop::option::of((0usize..400, prop::sample::select(vec![f32::NAN, f32::INFINITY]))),
    ) {
        if let Some((i, x)) = bad {
            if let Some(slot) = v.get_mut(i) {
                *slot = x;
            }
        }
        let p = QuantParams::new(bits).with_group_size(gs);
        prop_assert_eq!(
            kernel_output(Simd::Scalar, &v, &p),
            kernel_output(Simd::detect(), &v, &p)
        );
    }
}

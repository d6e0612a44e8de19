use proptest::prelude::*;

use super::*;
use crate::convert::{from_f32, to_f32};
use crate::testing::SplitMix64;

fn opts() -> LosslessOptions {
    LosslessOptions::default()
}

/// Weights at the scale of a trained layer and a fine-tuning step away from them.
fn weights(n: usize, seed: u64, dtype: DType) -> (Vec<u8>, Vec<u8>) {
    let mut rng = SplitMix64::new(seed);
    let w: Vec<f32> = (0..n).map(|_| 0.02 * rng.normal() as f32).collect();
    let next: Vec<f32> = w.iter().map(|&x| x + 2e-4 * rng.normal() as f32).collect();
    (
        from_f32(dtype, &w).expect("convert from f32"),
        from_f32(dtype, &next).expect("convert from f32"),
    )
}

fn rel_error(dtype: DType, got: &[u8], want: &[u8]) -> f64 {
    let convert = |b| to_f32(dtype, b).expect("convert to f32");
    strata_testkit::noise::rel_error(&convert(got), &convert(want))
}

fn round_trip(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    budget: f64,
) -> Option<(AgedBlock, Vec<u8>)> {
    let block = encode(dtype, data, base, budget, &opts()).expect("encode")?;
    let view = AgedView::parse(&block.bytes).expect("parse the blob");
    let mut out = vec![0u8; data.len()];
    view.decode_into(dtype, base, &mut out).expect("decode");
    Some((block, out))
}

#[test]
fn meets_the_budget_and_reports_the_error_it_measured() {
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let (base, next) = weights(20_000, 1, dtype);
        for budget in [1e-3, 1e-2, 1e-1] {
            let (block, out) = round_trip(dtype, &next, Some(&base), budget).expect("round trip");
            let measured = rel_error(dtype, &out, &next);
            assert!(measured <= budget, "{dtype} {budget}: {measured}");
            assert!((measured - f64::from(block.rel_error)).abs() <= 1e-6 + 1e-3 * measured);
            let view = AgedView::parse(&block.bytes).expect("parse the blob");
            assert_eq!(view.rel_error(), block.rel_error);
            assert!(view.has_base());
        }
    }
}

#[test]
fn a_looser_budget_costs_fewer_bytes() {
    let (base, next) = weights(1 << 16, 2, DType::BF16);
    let sizes: Vec<usize> = [1e-3, 3e-3, 1e-2]
        .iter()
        .map(|&b| {
            round_trip(DType::BF16, &next, Some(&base), b)
                .expect("round trip")
                .0
                .bytes
                .len()
        })
        .collect();
    assert!(sizes[0] > sizes[1] && sizes[1] > sizes[2], "{sizes:?}");
    // At 1 % the delta of a fine-tuning step is mostly zeros: far below the 2 bytes a value.
    assert!(sizes[2] * 16 < next.len(), "{sizes:?}");
}

#[test]
fn a_delta_under_the_budget_is_the_base_itself() {
    let (base, next) = weights(4096, 3, DType::BF16);
    let (block, out) = round_trip(DType::BF16, &next, Some(&base), 0.5).expect("round trip");
    assert!(block.all_zero);
    assert_eq!(out, base);
}

#[test]
fn keyframes_without_base() {
    let (_, next) = weights(4096, 4, DType::F32);
    let (block, out) = round_trip(DType::F32, &next, None, 1e-2).expect("round trip");
    assert!(rel_error(DType::F32, &out, &next) <= 1e-2);
    assert!(!AgedView::parse(&block.bytes)
        .expect("parse the blob")
        .has_base());
}

#[test]
fn budgets_no_step_meets_give_none() {
    let zeros = vec![0u8; 64];
    assert!(encode(DType::F32, &zeros, None, 1e-3, &opts())
        .expect("encode")
        .is_none());
    let nan = from_f32(DType::F32, &[1.0, f32::NAN, 2.0]).expect("convert from f32");
    assert!(encode(DType::F32, &nan, None, 1e-3, &opts())
        .expect("convert from f32")
        .is_none());
    // f32 data cannot be held to 1e-12 by any f32 step.
    let (base, next) = weights(4096, 5, DType::F32);
    assert!(encode(DType::F32, &next, Some(&base), 1e-12, &opts())
        .expect("encode")
        .is_none());
}

#[test]
fn bad_arguments_are_refused() {
    let (base, next) = weights(64, 6, DType::BF16);
    assert!(matches!(
        encode(DType::I32, &next, None, 1e-2, &opts()),
        Err(AgedError::Dtype { .. })
    ));
    assert!(matches!(
        encode(DType::BF16, &next[1..], None, 1e-2, &opts()),
        Err(AgedError::Mismatch { .. })
    ));
    assert!(matches!(
        encode(DType::BF16, &next, Some(&base[2..]), 1e-2, &opts()),
        Err(AgedError::Mismatch { .. })
    ));
    for budget in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            encode(DType::BF16, &next, None, budget, &opts()),
            Err(AgedError::Mismatch { .. })
        ));
    }
}

#[test]
fn a_read_over_another_base_or_shape_is_an_error() {
    let (base, next) = weights(4096, 7, DType::BF16);
    let block = encode(DType::BF16, &next, Some(&base), 1e-2, &opts())
        .expect("encode")
        .expect("encode");
    let view = AgedView::parse(&block.bytes).expect("parse the blob");
    let mut out = vec![0u8; next.len()];
    let mut other = base.clone();
    other[10] ^= 1;
    assert!(matches!(
        view.decode_into(DType::BF16, Some(&other), &mut out),
        Err(AgedError::BaseMismatch { .. })
    ));
    assert!(matches!(
        view.decode_into(DType::BF16, None, &mut out),
        Err(AgedError::Mismatch { .. })
    ));
    assert!(matches!(
        view.decode_into(DType::F16, Some(&base), &mut out),
        Err(AgedError::Mismatch { .. })
    ));
    let mut short = vec![0u8; next.len() - 2];
    assert!(matches!(
        view.decode_into(DType::BF16, Some(&base[2..]), &mut short),
        Err(AgedError::Mismatch { .. })
    ));
}

#[test]
fn every_damaged_byte_and_every_truncation_is_refused() {
    let (base, next) = weights(512, 8, DType::BF16);
    let blob = encode(DType::BF16, &next, Some(&base), 1e-2, &opts())
        .expect("encode")
        .expect("encode")
        .bytes;
    for i in 0..blob.len() {
        let mut bad = blob.clone();
        bad[i] ^= 0x40;
        assert!(AgedView::parse(&bad).is_err(), "flip at {i}");
    }
    for len in 0..blob.len() {
        assert!(AgedView::parse(&blob[..len]).is_err(), "cut at {len}");
    }
    let mut long = blob.clone();
    long.push(0);
    assert!(AgedView::parse(&long).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn round_trips_within_budget(
        seed in any::<u64>(),
        n in 1usize..3000,
        budget_exp in -4.0f64..-0.5,
        dtype in prop_oneof![Just(DType::BF16), Just(DType::F16), Just(DType::F32)],
        with_base in any::<bool>(),
    ) {
        let (base, next) = weights(n, seed, dtype);
        let budget = 10f64.powf(budget_exp);
        let base = with_base.then_some(base.as_slice());
        if let Some((block, out)) = round_trip(dtype, &next, base, budget) {
            let measured = rel_error(dtype, &out, &next);
            prop_assert!(measured <= budget * (1.0 + 1e-9));
            prop_assert!((measured - f64::from(block.rel_error)).abs() <= 1e-6 + 1e-3 * measured);
            // Decoding is deterministic: the same blob over the same base, the same bytes.
            let again = round_trip(dtype, &next, base, budget).expect("round trip");
            prop_assert_eq!(again.1, out);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(view) = AgedView::parse(&bytes) {
            let mut out = vec![0u8; (view.elements().min(4096) as usize) * view.dtype().size()];
            let _ = view.decode_into(view.dtype(), None, &mut out);
        }
    }
}

#[test]
fn a_bound_on_the_distance_from_the_base_keeps_a_block_from_becoming_its_base() {
    let (base, next) = weights(1 << 14, 9, DType::BF16);
    // 10 % of the norm alone lets the block turn into its base (every q 0).
    let loose = encode(DType::BF16, &next, Some(&base), 0.1, &opts())
        .expect("encode")
        .expect("met");
    assert!(loose.all_zero);
    let budget = Budget {
        of_norm: 0.1,
        of_delta: Some(0.5),
    };
    let block = encode_within(DType::BF16, &next, Some(&base), &budget, &opts())
        .expect("encode")
        .expect("met");
    assert!(!block.all_zero);
    let view = AgedView::parse(&block.bytes).expect("parse the blob");
    let mut out = vec![0u8; next.len()];
    view.decode_into(DType::BF16, Some(&base), &mut out)
        .expect("decode");
    let (o, t, b) = (
        to_f32(DType::BF16, &out).expect("convert to f32"),
        to_f32(DType::BF16, &next).expect("convert to f32"),
        to_f32(DType::BF16, &base).expect("convert to f32"),
    );
    let err: f64 = o
        .iter()
        .zip(&t)
        .map(|(&x, &y)| f64::from(x - y).powi(2))
        .sum();
    let dist: f64 = t
        .iter()
        .zip(&b)
        .map(|(&x, &y)| f64::from(x - y).powi(2))
        .sum();
    assert!(
        err.sqrt() <= 0.5 * dist.sqrt(),
        "{} > 0.5 * {}",
        err.sqrt(),
        dist.sqrt()
    );
    let bad = Budget {
        of_norm: 0.1,
        of_delta: Some(0.0),
    };
    assert!(matches!(
        encode_within(DType::BF16, &next, Some(&base), &bad, &opts()),
        Err(AgedError::Mismatch { .. })
    ));
}

/// Second moments of Adam at the scale a training run holds them: squares of gradients,
/// spanning orders of magnitude, a few exact zeros, and the same moments some steps later.
fn second_moments(n: usize, seed: u64, dtype: DType) -> (Vec<u8>, Vec<u8>) {
    let mut rng = SplitMix64::new(seed);
    let v: Vec<f32> = (0..n)
        .map(|i| {
            if i % 97 == 0 {
                0.0
            } else {
                let g = 1e-3 * rng.normal() as f32 * (1.0 + 10.0 * (i % 7) as f32);
                g * g
            }
        })
        .collect();
    let later: Vec<f32> = v
        .iter()
        .map(|&x| {
            let g = 1e-3 * rng.normal() as f32;
            if x == 0.0 && rng.next_u64().is_multiple_of(2) {
                0.0
            } else {
                0.975 * x + 0.025 * g * g * (1.0 + 3.0 * rng.next_u64() as f32 / u64::MAX as f32)
            }
        })
        .collect();
    (
        from_f32(dtype, &v).expect("convert from f32"),
        from_f32(dtype, &later).expect("convert from f32"),
    )
}

#[test]
fn a_block_of_non_negative_values_reads_back_non_negative_in_the_linear_mode() {
    // A base below zero (the newer version of a tensor that was not a moment) pulls the
    // rounding under zero; the codes are lifted.
    let data: Vec<f32> = (0..4096).map(|i| (i % 5) as f32 * 1e-6).collect();
    let base: Vec<f32> = data.iter().map(|&x| x - 3e-6).collect();
    let (data, base) = (
        from_f32(DType::F32, &data).unwrap(),
        from_f32(DType::F32, &base).unwrap(),
    );
    for budget in [1e-1, 5e-1, 0.9] {
        let (_, out) = round_trip(DType::F32, &data, Some(&base), budget).expect("a step meets it");
        assert!(
            to_f32(DType::F32, &out).unwrap().iter().all(|&x| x >= 0.0),
            "budget {budget}"
        );
    }
}

#[test]
fn the_log_mode_keeps_every_element_within_its_relative_budget() {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let (base, next) = second_moments(20_000, 27, dtype);
        for budget in [0.01, 0.05, 0.2] {
            let block = encode_log(dtype, &next, Some(&base), budget, &opts())
                .expect("encode")
                .expect("a step meets the budget");
            let view = AgedView::parse(&block.bytes).expect("parse");
            assert!(view.is_log());
            let mut out = vec![0u8; next.len()];
            view.decode_into(dtype, Some(&base), &mut out)
                .expect("decode");
            let (got, want) = (to_f32(dtype, &out).unwrap(), to_f32(dtype, &next).unwrap());
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(g >= 0.0 && g.is_finite(), "{dtype} element {i}: {g}");
                if w == 0.0 {
                    assert_eq!(g, 0.0, "{dtype}: a zero stays zero");
                } else {
                    let rel = f64::from((g - w).abs() / w);
                    assert!(rel <= budget, "{dtype} budget {budget} element {i}: {rel}");
                }
            }
            assert!((rel_error(dtype, &out, &next) - f64::from(block.rel_error)).abs() < 1e-6);
        }
    }
}

#[test]
fn the_log_mode_costs_a_fraction_of_a_bit_where_moments_change_slowly() {
    let (base, next) = second_moments(1 << 16, 28, DType::F32);
    let block = encode_log(DType::F32, &next, Some(&base), 0.1, &opts())
        .expect("encode")
        .expect("meets");
    let bits = 8.0 * block.bytes.len() as f64 / f64::from(1u32 << 16);
    assert!(bits < 3.0, "{bits} bits per value");
    // Without a base every value is coded on its own: more bits, still in the domain.
    let alone = encode_log(DType::F32, &next, None, 0.1, &opts())
        .expect("encode")
        .expect("meets");
    assert!(alone.bytes.len() > block.bytes.len());
}

#[test]
fn the_log_mode_refuses_what_is_not_non_negative_and_damaged_blobs() {
    let neg = from_f32(DType::F32, &[1.0, -1.0]).unwrap();
    assert!(encode_log(DType::F32, &neg, None, 0.1, &opts())
        .unwrap()
        .is_none());
    let nan = from_f32(DType::F32, &[1.0, f32::NAN]).unwrap();
    assert!(encode_log(DType::F32, &nan, None, 0.1, &opts())
        .unwrap()
        .is_none());
    let zeros = from_f32(DType::F32, &[0.0; 8]).unwrap();
    assert!(encode_log(DType::F32, &zeros, None, 0.1, &opts())
        .unwrap()
        .is_none());
    assert!(encode_log(DType::F32, &zeros, None, -1.0, &opts()).is_err());
    let (base, next) = second_moments(700, 29, DType::BF16);
    let blob = encode_log(DType::BF16, &next, Some(&base), 0.05, &opts())
        .unwrap()
        .unwrap()
        .bytes;
    for i in 0..blob.len() {
        let mut bad = blob.clone();
        bad[i] ^= 0x10;
        assert!(AgedView::parse(&bad).is_err(), "flip at {i}");
    }
    // Over another base: an error, not other values.
    let view = AgedView::parse(&blob).unwrap();
    let mut out = vec![0u8; next.len()];
    assert!(view
        .decode_into(DType::BF16, Some(&next), &mut out)
        .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Any non-negative block over any base (zeros, negatives, infinities included) reads back
    /// non-negative, finite where the data is, zero where it is zero, within its budget, and
    /// the same bytes every time.
    #[test]
    fn the_log_mode_stays_in_the_domain(
        vals in proptest::collection::vec(prop_oneof![Just(0.0f32), 0.0f32..1e-20, 0.0f32..1.0, 0.0f32..1e30], 1..1500),
        base in proptest::collection::vec(prop_oneof![Just(0.0f32), -1.0f32..1.0, 0.0f32..1e30, Just(f32::INFINITY)], 1500),
        budget in 0.002f64..0.5,
        dtype in prop_oneof![Just(DType::BF16), Just(DType::F16), Just(DType::F32)],
        with_base in any::<bool>(),
    ) {
        let data = from_f32(dtype, &vals).unwrap();
        let t = to_f32(dtype, &data).unwrap();
        let base = from_f32(dtype, &base[..vals.len()]).unwrap();
        let base = with_base.then_some(base.as_slice());
        let Some(block) = encode_log(dtype, &data, base, budget, &opts()).unwrap() else {
            // Only a block of zeros, non-finite (f16 overflow) values, or a budget finer than
            // the dtype and the finest step hold is refused.
            prop_assert!(t.iter().all(|&x| x == 0.0) || t.iter().any(|x| !x.is_finite()) || budget < 0.01);
            return Ok(());
        };
        let view = AgedView::parse(&block.bytes).unwrap();
        let mut out = vec![0u8; data.len()];
        view.decode_into(dtype, base, &mut out).unwrap();
        let got = to_f32(dtype, &out).unwrap();
        for (&g, &w) in got.iter().zip(&t) {
            prop_assert!(g >= 0.0 && g.is_finite());
            if w == 0.0 { prop_assert_eq!(g, 0.0); } else { prop_assert!(f64::from((g - w).abs() / w) <= budget); }
        }
        let mut again = vec![0u8; data.len()];
        view.decode_into(dtype, base, &mut again).unwrap();
        prop_assert_eq!(again, out);
    }
}

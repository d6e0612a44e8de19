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

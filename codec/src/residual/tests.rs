use super::*;
use crate::quant::{QuantBits, QuantParams};
use proptest::prelude::*;

fn tier(values: &[f32], bits: QuantBits) -> Vec<f32> {
    let seg = segment::encode_quantized(DType::F32, values, &QuantParams::new(bits)).unwrap();
    Segment::parse(&seg)
        .unwrap()
        .dequantize(usize::MAX)
        .unwrap()
}

fn sample(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + seed as f32) * 0.37).sin() * 0.05 * (1.0 + (i % 7) as f32))
        .collect()
}

fn read_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn cast_to_each_float_dtype() {
    let v = [1.0f32, -0.5, 1.0 + 1.0 / 256.0, 70000.0];
    assert_eq!(read_f32(&cast_to(DType::F32, &v).unwrap()), v);
    let bf = cast_to(DType::BF16, &v).unwrap();
    assert_eq!(bf[..6], [0x80, 0x3F, 0x00, 0xBF, 0x80, 0x3F]);
    let h = cast_to(DType::F16, &v).unwrap();
    // 70000 is beyond f16: infinity, as a cast gives.
    assert_eq!(h[6..8], 0x7C00u16.to_le_bytes());
    assert_eq!(cast_to(DType::F64, &v).unwrap().len(), 32);
    assert!(matches!(
        cast_to(DType::I32, &v),
        Err(ResidualError::NotFloat { dtype: DType::I32 })
    ));
}

#[test]
fn exact_residual_needs_its_own_approximation() {
    let v = sample(500, 1);
    let a = tier(&v, QuantBits::B3);
    let (ob, ab) = (
        cast_to(DType::BF16, &v).unwrap(),
        cast_to(DType::BF16, &a).unwrap(),
    );
    let r = exact_residual(DType::BF16, &ob, &ab, &LosslessOptions::default()).unwrap();
    assert_eq!(apply_exact_residual(&r, &ab, usize::MAX).unwrap(), ob);
    // Another approximation (the 5-bit tier) is refused, not silently misapplied.
    let other = cast_to(DType::BF16, &tier(&v, QuantBits::B5)).unwrap();
    assert!(matches!(
        apply_exact_residual(&r, &other, usize::MAX),
        Err(ResidualError::Segment(SegmentError::BaseMismatch { .. }))
    ));
    assert!(matches!(
        exact_residual(DType::BF16, &ob, &ab[2..], &LosslessOptions::default()),
        Err(ResidualError::Length { .. })
    ));
    assert!(matches!(
        exact_residual(DType::U16, &ob, &ab, &LosslessOptions::default()),
        Err(ResidualError::NotFloat { .. })
    ));
    let key = segment::encode_keyframe(DType::BF16, &ob, &LosslessOptions::default()).unwrap();
    assert!(matches!(
        apply_exact_residual(&key, &ab, usize::MAX),
        Err(ResidualError::NotDelta {
            encoding: Encoding::Keyframe
        })
    ));
}

#[test]
fn topk_keeps_the_largest_differences() {
    let original = [0.0f32, 1.0, -3.0, 0.5, 2.0, 0.0];
    let approx = [0.0f32, 0.9, -2.0, 0.5, 2.5, 0.25];
    // |diff| = 0, 0.1, 1.0, 0, 0.5, 0.25: the top 3 are indices 2, 4, 5.
    let blob = topk_residual(&original, &approx, &[2, 3], 3, HalfDType::F16).unwrap();
    assert_eq!(blob.indices, Some(vec![2, 4, 5]));
    let vals: Vec<f32> = blob
        .values
        .iter()
        .map(|&w| HalfDType::F16.to_f32(w))
        .collect();
    assert_eq!(vals, [-1.0, -0.5, -0.25]);
    // k above the number of non-zero differences: zeros are never stored.
    let all = topk_residual(&original, &approx, &[6], 100, HalfDType::BF16).unwrap();
    assert_eq!(all.indices, Some(vec![1, 2, 4, 5]));
    let none = topk_residual(&original, &approx, &[6], 0, HalfDType::BF16).unwrap();
    assert_eq!(none.indices, Some(vec![]));

    let bytes = blob.encode(true).unwrap();
    let mut fixed = approx;
    apply_residual(&HpdkvView::parse(&bytes).unwrap(), &mut fixed).unwrap();
    assert_eq!(fixed, [0.0, 0.9, -3.0, 0.5, 2.0, 0.0]);
}

#[test]
fn topk_ties_go_to_the_lower_index() {
    let original = [1.0f32; 6];
    let approx = [0.0f32; 6];
    let blob = topk_residual(&original, &approx, &[6], 2, HalfDType::F16).unwrap();
    assert_eq!(blob.indices, Some(vec![0, 1]));
}

#[test]
fn topk_saturates_beyond_fp16() {
    let blob = topk_residual(&[1e6, -1e6], &[0.0, 0.0], &[2], 2, HalfDType::F16).unwrap();
    assert_eq!(blob.values, [0x7BFF, 0xFBFF]);
    let bf = topk_residual(&[1e6], &[0.0], &[1], 1, HalfDType::BF16).unwrap();
    assert_eq!(HalfDType::BF16.to_f32(bf.values[0]), 999424.0);
}

#[test]
fn topk_refuses_bad_inputs() {
    assert!(matches!(
        topk_residual(&[1.0, f32::NAN], &[0.0, 0.0], &[2], 1, HalfDType::F16),
        Err(ResidualError::NonFinite {
            what: "original",
            index: 1,
            ..
        })
    ));
    assert!(matches!(
        topk_residual(&[1.0, 2.0], &[0.0, f32::INFINITY], &[2], 1, HalfDType::F16),
        Err(ResidualError::NonFinite {
            what: "approximation",
            ..
        })
    ));
    assert!(matches!(
        topk_residual(&[1.0, 2.0], &[0.0], &[2], 1, HalfDType::F16),
        Err(ResidualError::Length { .. })
    ));
    assert!(matches!(
        topk_residual(&[1.0, 2.0], &[0.0, 0.0], &[3], 1, HalfDType::F16),
        Err(ResidualError::Length { .. })
    ));
    assert!(matches!(
        topk_residual(&[], &[], &[1 << 16, 1 << 16, 2], 1, HalfDType::F16),
        Err(ResidualError::Hpdkv(HpdkvError::TooManyElements { .. }))
    ));
}

#[test]
fn apply_refuses_bad_blobs() {
    let blob = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![4],
        indices: Some(vec![1, 3]),
        values: vec![0x3C00, 0x7C00],
    }
    .encode(false)
    .unwrap();
    let view = HpdkvView::parse(&blob).unwrap();
    let mut a = [0.0f32; 4];
    assert!(matches!(
        apply_residual(&view, &mut a),
        Err(ResidualError::NonFiniteResidual {
            position: 1,
            index: 3
        })
    ));
    assert_eq!(a, [0.0; 4], "nothing applied");
    assert!(matches!(
        apply_residual(&view, &mut [0.0; 3]),
        Err(ResidualError::Length { .. })
    ));
    // A dense blob applies everywhere.
    let dense = HpdkvBlob {
        dtype: HalfDType::BF16,
        shape: vec![2],
        indices: None,
        values: vec![0x3F80, 0xBF80],
    }
    .encode(true)
    .unwrap();
    let mut a = [1.0f32, 1.0];
    apply_residual(&HpdkvView::parse(&dense).unwrap(), &mut a).unwrap();
    assert_eq!(a, [2.0, 0.0]);
}

fn float_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![DType::F32, DType::F16, DType::BF16, DType::F64])
}

proptest! {
    #[test]
    fn exact_residual_rebuilds_bit_for_bit(
        v in prop::collection::vec(-10.0f32..10.0, 0..300),
        dtype in float_dtype(),
        bits in prop::sample::select(QuantBits::ALL.to_vec()),
    ) {
        let a = tier(&v, bits);
        let ob = cast_to(dtype, &v).unwrap();
        let ab = cast_to(dtype, &a).unwrap();
        let r = exact_residual(dtype, &ob, &ab, &LosslessOptions::default()).unwrap();
        prop_assert_eq!(apply_exact_residual(&r, &ab, usize::MAX).unwrap(), ob);
    }

    #[test]
    fn topk_never_makes_an_element_worse(
        v in prop::collection::vec(-1.0f32..1.0, 1..400),
        k in 0usize..64,
        dtype in prop::sample::select(HalfDType::ALL.to_vec()),
        bits in prop::sample::select(QuantBits::ALL.to_vec()),
    ) {
        let a = tier(&v, bits);
        let blob = topk_residual(&v, &a, &[v.len() as u32], k, dtype).unwrap();
        let ix = blob.indices.clone().unwrap();
        prop_assert!(ix.len() <= k);
        // Every kept entry is at least as far off as every entry left out (except entries
        // dropped because their difference rounds to zero).
        let err = |i: usize| (f64::from(v[i]) - f64::from(a[i])).abs();
        let kept_min = ix.iter().map(|&i| err(i as usize)).fold(f64::INFINITY, f64::min);
        if ix.len() == k {
            for i in (0..v.len()).filter(|i| !ix.contains(&(*i as u32))) {
                prop_assert!(err(i) <= kept_min, "left out {} with error {} > {}", i, err(i), kept_min);
            }
        }
        let bytes = blob.encode(true).unwrap();
        let mut fixed = a.clone();
        apply_residual(&HpdkvView::parse(&bytes).unwrap(), &mut fixed).unwrap();
        for i in 0..v.len() {
            let after = (f64::from(v[i]) - f64::from(fixed[i])).abs();
            prop_assert!(after <= err(i), "element {} went from {} to {}", i, err(i), after);
            if ix.contains(&(i as u32)) {
                // At most the rounding of the difference to fp16/bf16 plus one f32 rounding.
                let rel = match dtype { HalfDType::F16 => 1.0 / 2048.0, HalfDType::BF16 => 1.0 / 256.0 };
                prop_assert!(after <= err(i) * rel + f64::from(f32::EPSILON) * f64::from(v[i].abs()) + 1e-7,
                    "element {}: {} left of {}", i, after, err(i));
            }
        }
    }
}

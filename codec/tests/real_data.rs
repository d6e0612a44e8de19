//! Integration tests on real training checkpoints (the committed series `testdata/series`,
//! and the shared one `../shared/data/series` too when present; see `common`): lossless
//! round trips, delta gains, quantization error bounds, and the lossless ratio on bf16
//! weights.

// A test reports an unusable input by panicking with a message.
#![allow(clippy::panic)]

mod common;

use common::{all_series, Series};
use safetensors::{Dtype, SafeTensors};
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams, DEFAULT_GROUP_SIZE};
use strata_codec::segment::{self, Segment};
use strata_codec::DType;

/// Decode limit: the largest tensor here is well under this.
const LIMIT: usize = 1 << 28;

/// A tensor of a checkpoint: name, codec dtype, little-endian bytes.
struct Tensor {
    name: String,
    dtype: DType,
    data: Vec<u8>,
}

impl Tensor {
    /// The values as f32 (exact for every float dtype here).
    fn to_f32(&self) -> Vec<f32> {
        common::to_f32(self.dtype, &self.data)
    }
}

fn codec_dtype(name: &str, d: Dtype) -> DType {
    DType::from_safetensors_name(&format!("{d:?}"))
        .unwrap_or_else(|| panic!("{name}: safetensors dtype {d:?} has no codec dtype"))
}

/// Every tensor of a checkpoint of `src`, by name.
fn load(src: &Series, rel: &str) -> Vec<Tensor> {
    let bytes = src.read(rel);
    let st = SafeTensors::deserialize(&bytes).expect("valid safetensors file");
    let mut out: Vec<Tensor> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| Tensor {
            dtype: codec_dtype(&name, view.dtype()),
            data: view.data().to_vec(),
            name,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!out.is_empty(), "{rel} holds no tensors");
    out
}

/// Keyframe and delta (against `base_rel`) of every tensor of `rel` round-trip bit-exact,
/// and the deltas are smaller in total than the keyframes.
fn lossless_round_trips(src: &Series, rel: &str, base_rel: &str, want: DType) {
    eprintln!("{} series: {rel} against {base_rel}", src.label);
    let opts = LosslessOptions::default();
    let tensors = load(src, rel);
    let bases = load(src, base_rel);
    assert_eq!(tensors.len(), bases.len(), "{rel} and {base_rel} differ");
    let (mut key_total, mut delta_total) = (0usize, 0usize);
    for (t, b) in tensors.iter().zip(&bases) {
        assert_eq!(t.dtype, want, "{rel}: {}", t.name);
        assert_eq!(
            (&t.name, t.dtype),
            (&b.name, b.dtype),
            "{rel} vs {base_rel}"
        );

        let key = segment::encode_keyframe(t.dtype, &t.data, &opts).expect("encode keyframe");
        let back = Segment::parse(&key)
            .and_then(|s| s.decode_lossless(None, LIMIT))
            .expect("decode keyframe");
        assert!(
            back == t.data,
            "{rel}: keyframe of {} not bit-exact",
            t.name
        );

        let delta = segment::encode_delta(t.dtype, &t.data, &b.data, &opts).expect("encode delta");
        let back = Segment::parse(&delta)
            .and_then(|s| s.decode_lossless(Some(&b.data), LIMIT))
            .expect("decode delta");
        assert!(back == t.data, "{rel}: delta of {} not bit-exact", t.name);

        key_total += key.len();
        delta_total += delta.len();
    }
    assert!(
        delta_total < key_total,
        "{rel}: deltas against {base_rel} take {delta_total} bytes, keyframes {key_total}"
    );
}

#[test]
fn f32_keyframe_and_delta_round_trip() {
    for src in all_series() {
        lossless_round_trips(
            &src,
            "dev_ft/step_000430.safetensors",
            "dev_ft/step_000420.safetensors",
            DType::F32,
        );
    }
}

#[test]
fn bf16_keyframe_and_delta_round_trip() {
    for src in all_series() {
        lossless_round_trips(
            &src,
            "dev_ft/bf16/step_000430.safetensors",
            "dev_ft/bf16/step_000420.safetensors",
            DType::BF16,
        );
    }
}

/// Every element of every group of 64 is within `max_abs(group) / (2 * qmax)` (plus
/// 1e-5 relative for f32 rounding) of its original, at every width.
///
/// The slack is needed: rounding the scale and `code * scale` to f32 puts many elements
/// past the exact bound, by up to 7.6e-6 relative on this data (worst case in theory about
/// `2 * qmax * 2^-24`, 1.5e-5 at 8 bits).
#[test]
fn quantization_error_bounds_on_real_weights() {
    let group = DEFAULT_GROUP_SIZE as usize;
    for (src, rel) in all_series().iter().flat_map(|s| {
        [
            (s.clone(), "dev_ft/step_000430.safetensors"),
            (s.clone(), "dev_ft/bf16/step_000430.safetensors"),
        ]
    }) {
        for t in load(&src, rel) {
            let x = t.to_f32();
            for bits in QuantBits::ALL {
                let params = QuantParams::new(bits);
                assert_eq!(params.group_size, DEFAULT_GROUP_SIZE);
                let seg = segment::encode_quantized(t.dtype, &x, &params).expect("quantize");
                let xq = Segment::parse(&seg)
                    .and_then(|s| s.dequantize(LIMIT))
                    .expect("dequantize");
                assert_eq!(xq.len(), x.len());
                let qmax = f64::from(bits.qmax());
                for (g, (orig, back)) in x.chunks(group).zip(xq.chunks(group)).enumerate() {
                    let m = orig.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
                    let bound = m / (2.0 * qmax) * (1.0 + 1e-5);
                    for (i, (&a, &b)) in orig.iter().zip(back).enumerate() {
                        let err = (f64::from(a) - f64::from(b)).abs();
                        assert!(
                            err <= bound,
                            "{} {rel}: {} at {} bits, element {}: |{a} - {b}| = {err:e} > \
                             {bound:e} (group max_abs {m:e})",
                            src.label,
                            t.name,
                            bits.bits(),
                            g * group + i,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bf16_keyframe_ratio() {
    let opts = LosslessOptions::default();
    for src in all_series() {
        let (mut raw, mut stored) = (0usize, 0usize);
        for t in load(&src, "dev_ft/bf16/step_000430.safetensors") {
            let key = segment::encode_keyframe(t.dtype, &t.data, &opts).expect("encode keyframe");
            raw += t.data.len();
            stored += key.len();
        }
        let ratio = raw as f64 / stored as f64;
        eprintln!("{}: bf16 keyframes ratio {ratio:.4}", src.label);
        assert!(
            ratio > 1.2,
            "{}: bf16 keyframes: {raw} raw bytes stored in {stored}, ratio {ratio:.3} <= 1.2",
            src.label
        );
    }
}

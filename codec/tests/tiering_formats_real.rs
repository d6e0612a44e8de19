//! Residuals and frame streams on real training checkpoints (the committed series
//! `testdata/series`, and the shared one `../shared/data/series` too when present; see
//! `common`): exact residuals rebuild every block bit for bit, top-k residuals make
//! the approximation better and never worse, and a fine-tuning series replayed as frame
//! streams keeps every element within `(1 + d) / (2 qmax) * scale_max`.

// A test reports an unusable input by panicking with a message.
#![allow(clippy::panic)]

mod common;

use std::path::PathBuf;

use common::{all_series, to_f32, Series};
use safetensors::SafeTensors;
use strata_codec::frames::{FrameParams, FramePush, FrameSegment, FrameStreamEncoder};
use strata_codec::hpdkv::{HalfDType, HpdkvView};
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams};
use strata_codec::residual;
use strata_codec::segment::{self, Segment};
use strata_codec::DType;

const LIMIT: usize = 1 << 28;

/// `(name, dtype, raw bytes)` of every float tensor of a checkpoint of `src`, by name.
fn load(src: &Series, rel: &str) -> Vec<(String, DType, Vec<u8>)> {
    let bytes = src.read(rel);
    let st = SafeTensors::deserialize(&bytes).expect("valid safetensors file");
    let mut out: Vec<(String, DType, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .filter_map(|(name, view)| {
            let dtype = DType::from_safetensors_name(&format!("{:?}", view.dtype()))?;
            dtype
                .is_float()
                .then(|| (name, dtype, view.data().to_vec()))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "{rel}: no float tensors");
    out
}

fn dequantized(dtype: DType, values: &[f32], bits: QuantBits) -> Vec<f32> {
    let seg = segment::encode_quantized(dtype, values, &QuantParams::new(bits)).expect("quantize");
    Segment::parse(&seg)
        .expect("parse")
        .dequantize(LIMIT)
        .expect("dequantize")
}

#[test]
fn exact_residuals_rebuild_real_blocks() {
    for (src, rel) in all_series().iter().flat_map(|s| {
        [
            (s.clone(), "dev_ft/bf16/step_000430.safetensors"),
            (s.clone(), "dev_ft/step_000430.safetensors"),
        ]
    }) {
        for (name, dtype, raw) in load(&src, rel) {
            let values = to_f32(dtype, &raw);
            for bits in [QuantBits::B8, QuantBits::B3] {
                let approx =
                    residual::cast_to(dtype, &dequantized(dtype, &values, bits)).expect("cast");
                let r = residual::exact_residual(dtype, &raw, &approx, &LosslessOptions::default())
                    .expect("residual");
                let back = residual::apply_exact_residual(&r, &approx, LIMIT).expect("apply");
                assert!(
                    back == raw,
                    "{} {rel} {name} at {} bits",
                    src.label,
                    bits.bits()
                );
            }
        }
    }
}

#[test]
fn topk_residuals_improve_real_tiers() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        topk_residuals_improve(&src);
    }
}

fn topk_residuals_improve(src: &Series) {
    for (name, dtype, raw) in load(src, "dev_ft/bf16/step_000430.safetensors") {
        let values = to_f32(dtype, &raw);
        let n = values.len();
        for bits in [QuantBits::B8, QuantBits::B5, QuantBits::B3] {
            let approx = dequantized(dtype, &values, bits);
            let k = n.div_ceil(100);
            for rd in HalfDType::ALL {
                let blob = residual::topk_residual(&values, &approx, &[n as u32], k, rd)
                    .expect("top-k")
                    .encode(true)
                    .expect("encode");
                let mut fixed = approx.clone();
                residual::apply_residual(&HpdkvView::parse(&blob).expect("parse"), &mut fixed)
                    .expect("apply");
                let (mut sq_before, mut sq_after) = (0f64, 0f64);
                let (mut max_before, mut max_after) = (0f64, 0f64);
                for ((&x, &a), &f) in values.iter().zip(&approx).zip(&fixed) {
                    let eb = (f64::from(x) - f64::from(a)).abs();
                    let ea = (f64::from(x) - f64::from(f)).abs();
                    assert!(ea <= eb, "{name}: an element got worse ({eb} -> {ea})");
                    sq_before += eb * eb;
                    sq_after += ea * ea;
                    max_before = max_before.max(eb);
                    max_after = max_after.max(ea);
                }
                // The max may stay where more than k elements share it (a layer norm's
                // near-constant weights); the sum of squares always drops.
                assert!(max_after <= max_before, "{name} {rd:?}: max error grew");
                if max_before > 0.0 {
                    assert!(
                        sq_after < sq_before,
                        "{name} {rd:?}: squared error not reduced"
                    );
                }
            }
        }
    }
}

#[test]
fn fine_tuning_series_as_frame_streams() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        // dev_ft: steps 350, 360, ..., 430 in the shared series; 350, 400, 410, 420, 430
        // in the committed one.
        fine_tuning_frames(&src, if src.is_shared() { 9 } else { 5 });
    }
}

fn fine_tuning_frames(src: &Series, checkpoints: usize) {
    let dir = src.root.join("dev_ft");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("series dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        checkpoints,
        "dev_ft has {checkpoints} checkpoints"
    );
    let steps: Vec<Vec<(String, DType, Vec<u8>)>> = files
        .iter()
        .map(|f| {
            load(
                src,
                &format!(
                    "dev_ft/{}",
                    f.file_name().and_then(|n| n.to_str()).unwrap_or("")
                ),
            )
        })
        .collect();
    for bits in [QuantBits::B8, QuantBits::B3] {
        let params = FrameParams::new(bits);
        let rel = params.relative_error_bound();
        for t in 0..steps[0].len() {
            let name = &steps[0][t].0;
            let frames: Vec<Vec<f32>> = steps.iter().map(|s| to_f32(s[t].1, &s[t].2)).collect();
            let mut enc =
                FrameStreamEncoder::new(DType::F32, frames[0].len(), params).expect("encoder");
            for (i, f) in frames.iter().enumerate() {
                let push = enc.push(f).expect("push");
                // Fine-tuning at lr 2e-5 moves no group's max by 10 %: one epoch.
                if i > 0 {
                    assert_eq!(
                        push,
                        FramePush::Reused { frame: i as u32 },
                        "{name} step {i}"
                    );
                }
            }
            let bytes = enc.finish().expect("frames");
            let seg = FrameSegment::parse(&bytes).expect("parse");
            assert_eq!(seg.frame_count() as usize, checkpoints);
            for (i, f) in frames.iter().enumerate() {
                let got = seg.decode_frame(i as u32, LIMIT).expect("decode");
                for (g, (gx, gy)) in f.chunks(64).zip(got.chunks(64)).enumerate() {
                    let sm = f64::from(seg.scale_max()[g]);
                    for (&x, &y) in gx.iter().zip(gy) {
                        let err = (f64::from(x) - f64::from(y)).abs();
                        let allowed = rel * sm * (1.0 + 1e-6) + f64::from(y.abs()) * 1.2e-7;
                        assert!(
                            err <= allowed,
                            "{name} frame {i}: error {err} above {allowed} at {} bits",
                            bits.bits()
                        );
                    }
                }
            }
        }
    }
}

//! Segments written before the marked exponent planes (method 5, ADR 0019) still decode
//! bit-exact, and the encoder of today codes the same deltas no larger.
//!
//! `data/segments-before-marked.bin` holds segments that the encoder of commit dfc380a
//! (methods 0 to 4 only) wrote for tensors of the committed series (`testdata/series` of
//! the workspace): XOR deltas of dev_ft/bf16 step 430 against 420 (every tensor), of two
//! dev_pre/bf16 tensors (350 against 300) and of three dev_ft f32 tensors (430 against
//! 420), and keyframes of the small ones. Records: `u32` LE length and the text
//! `SERIES BASE_STEP STEP TENSOR KIND`, then `u32` LE length and the segment.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use strata_codec::lossless::LosslessOptions;
use strata_codec::segment::{self, Segment};

fn series() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/series")
}

fn tensor(dir: &str, step: &str, name: &str) -> Vec<u8> {
    let bytes = std::fs::read(
        series()
            .join(dir)
            .join(format!("step_{:0>6}.safetensors", step)),
    )
    .unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensor(name).unwrap().data().to_vec()
}

#[test]
fn segments_written_before_marked_planes_decode_bit_exact() {
    let file = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/segments-before-marked.bin"),
    )
    .unwrap();
    let mut rest = &file[..];
    let take = |rest: &mut &[u8]| -> Vec<u8> {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        let v = rest[4..4 + len].to_vec();
        *rest = &rest[4 + len..];
        v
    };
    let (mut records, mut deltas, mut old_bytes, mut new_bytes) = (0, 0, 0, 0);
    while !rest.is_empty() {
        let line = String::from_utf8(take(&mut rest)).unwrap();
        let seg = take(&mut rest);
        let f: Vec<&str> = line.split(' ').collect();
        let [dir, base_step, step, name, kind] = f[..] else {
            panic!("bad record {line}")
        };
        let data = tensor(dir, step, name);
        let parsed = Segment::parse(&seg).unwrap();
        let dtype = parsed.header().dtype;
        let mut out = vec![0xA5u8; data.len()];
        if kind == "delta" {
            let base = tensor(dir, base_step, name);
            parsed.decode_lossless_into(Some(&base), &mut out).unwrap();
            let now =
                segment::encode_delta(dtype, &data, &base, &LosslessOptions::default()).unwrap();
            assert!(
                now.len() <= seg.len(),
                "{line}: {} > {}",
                now.len(),
                seg.len()
            );
            (old_bytes, new_bytes, deltas) =
                (old_bytes + seg.len(), new_bytes + now.len(), deltas + 1);
        } else {
            parsed.decode_lossless_into(None, &mut out).unwrap();
        }
        assert!(out == data, "{line}: decodes differently");
        records += 1;
    }
    assert!(
        records == 18 && deltas == 10,
        "{records} records, {deltas} deltas"
    );
    assert!(new_bytes < old_bytes, "{new_bytes} vs {old_bytes}");
}

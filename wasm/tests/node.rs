//! The JavaScript API under Node, through wasm-bindgen-test:
//!
//! ```text
//! CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
//!     cargo test -p strata-wasm --target wasm32-unknown-unknown
//! ```
//!
//! Round trips of every codec call, and errors that arrive as `Error` objects with the
//! message (the module keeps working after them). Natively this file is empty: the
//! bindings call into a JavaScript host.
#![cfg(target_arch = "wasm32")]
// clippy.toml allows unwrap in #[test] functions; #[wasm_bindgen_test] ones are tests too.
#![allow(clippy::unwrap_used)]

use strata_wasm::bindings::*;
use wasm_bindgen::{JsError, JsValue};
use wasm_bindgen_test::wasm_bindgen_test;

/// The message of a thrown error.
fn message(e: JsError) -> String {
    let v = JsValue::from(e);
    js_sys::Error::from(v).message().into()
}

fn sample(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i as f32) * 0.731).sin() * 0.02).collect()
}

#[wasm_bindgen_test]
fn lossless_f32_keyframe_and_delta() {
    let a = sample(5000);
    let b: Vec<f32> = a.iter().map(|x| x * 1.001).collect();
    let key = encode_f32(&a, None, None).unwrap();
    assert_eq!(decode_f32(&key, None).unwrap(), a);
    let delta = encode_f32(&b, Some(a.clone()), Some("max-ratio".into())).unwrap();
    assert_eq!(decode_f32(&delta, Some(a.clone())).unwrap(), b);
    let info = segment_info(&delta).unwrap();
    assert_eq!(info.encoding(), "delta");
    assert_eq!(info.dtype(), "f32");
    assert_eq!(info.elements(), 5000.0);
    assert_eq!(info.segment_bytes(), delta.len() as f64);
    let m = message(decode_f32(&delta, None).unwrap_err());
    assert!(m.contains("base required"), "{m}");
}

#[wasm_bindgen_test]
fn lossless_u16_and_bytes() {
    let words = f32_to_bf16(&sample(3000));
    let key = encode_bf16(&words, None, None).unwrap();
    assert_eq!(segment_info(&key).unwrap().dtype(), "bf16");
    assert_eq!(decode_u16(&key, None).unwrap(), words);
    let f16: Vec<u16> = (0..3000u16).map(|i| i.wrapping_mul(7)).collect();
    let key = encode_f16(&f16, None, Some("fast".into())).unwrap();
    assert_eq!(decode_u16(&key, None).unwrap(), f16);
    let bytes: Vec<u8> = (0..999u32).map(|i| (i % 13) as u8).collect();
    let key = encode_bytes("u8", &bytes, None, None).unwrap();
    assert_eq!(decode_bytes(&key, None).unwrap(), bytes);
    let m = message(decode_u16(&key, None).unwrap_err());
    assert!(m.contains("not a 2-byte dtype"), "{m}");
    let m = message(encode_bytes("f32", &bytes, None, None).unwrap_err());
    assert!(m.contains("not a whole number of f32"), "{m}");
    let m = message(encode_bytes("q4", &bytes, None, None).unwrap_err());
    assert!(m.contains("unknown dtype"), "{m}");
    let m = message(encode_f32(&[1.0], None, Some("turbo".into())).unwrap_err());
    assert!(m.contains("invalid mode"), "{m}");
}

#[wasm_bindgen_test]
fn quantize_every_tier() {
    let v = sample(4096);
    for bits in [8, 7, 5, 3] {
        let seg = quantize(&v, f64::from(bits), Some("bf16".into()), None).unwrap();
        let info = segment_info(&seg).unwrap();
        assert_eq!(info.bits(), bits);
        assert_eq!(info.dtype(), "bf16");
        let back = dequantize(&seg).unwrap();
        let bound = 0.02 / (2.0 * ((1u32 << (bits - 1)) - 1) as f32) * 1.001;
        assert!(
            v.iter().zip(&back).all(|(a, b)| (a - b).abs() <= bound),
            "{bits}"
        );
    }
    let m = message(quantize(&v, 4.0, None, None).unwrap_err());
    assert!(m.contains("8, 7, 5 or 3"), "{m}");
    let m = message(quantize(&[f32::NAN], 8.0, None, None).unwrap_err());
    assert!(m.contains("not finite"), "{m}");
    let m = message(quantize(&v, 8.0, None, Some(0.0)).unwrap_err());
    assert!(m.contains("group size"), "{m}");
    let m = message(dequantize(&encode_f32(&v, None, None).unwrap()).unwrap_err());
    assert!(m.contains("use decode"), "{m}");
}

#[wasm_bindgen_test]
fn pack_unpack_and_xor() {
    for bits in 1..=8u32 {
        let q = ((1i32 << (bits - 1)) - 1) as i8;
        let codes: Vec<i8> = (0..1001)
            .map(|i| ((i % (2 * q as i32 + 1)) - q as i32) as i8)
            .collect();
        let packed = pack(&codes, f64::from(bits)).unwrap();
        assert_eq!(packed.len(), (1001 * bits as usize).div_ceil(8));
        assert_eq!(unpack(&packed, f64::from(bits), 1001.0).unwrap(), codes);
    }
    assert!(message(pack(&[5], 3.0).unwrap_err()).contains("outside"));
    assert!(message(pack(&[0], 9.0).unwrap_err()).contains("invalid bit width"));
    assert!(message(unpack(&[0; 3], 8.0, 4.0).unwrap_err()).contains("too small"));
    assert!(message(pack(&[0], 3.5).unwrap_err()).contains("invalid bits"));
    assert!(message(unpack(&[0; 3], 8.0, -1.0).unwrap_err()).contains("invalid count"));
    // 2^32 + 3 codes: more than a 32-bit address space holds, refused before any allocation.
    assert!(message(unpack(&[0; 3], 8.0, 4294967299.0).unwrap_err())
        .contains("more codes than memory holds"));
    let a = [1u8, 2, 3];
    let x = xor_bytes(&a, &[3, 2, 1]).unwrap();
    assert_eq!(xor_bytes(&x, &[3, 2, 1]).unwrap(), a);
    assert!(message(xor_bytes(&a, &[1]).unwrap_err()).contains("lengths differ"));
}

#[wasm_bindgen_test]
fn corrupt_segments_are_errors_not_traps() {
    let key = encode_f32(&sample(2000), None, None).unwrap();
    for i in [0, 5, 9, 30, 47, 48, key.len() - 1] {
        let mut bad = key.clone();
        bad[i] ^= 0x41;
        assert!(decode_bytes(&bad, None).is_err(), "byte {i}");
    }
    assert!(message(decode_bytes(&key[..47], None).unwrap_err()).contains("shorter"));
    // The module still works.
    assert_eq!(decode_f32(&key, None).unwrap(), sample(2000));
}

#[wasm_bindgen_test]
fn analysis_json() {
    let words = f32_to_bf16(&sample(2048));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let a = analyze_tensor("bf16", &bytes).unwrap();
    let json = a.to_json();
    assert!(
        json.starts_with("{\"dtype\":\"bf16\",\"elements\":2048,\"raw_bytes\":4096"),
        "{json}"
    );
    let mut total = JsAnalysis::new();
    total.merge(&a);
    total.merge(&a);
    assert!(total.to_json().contains("\"elements\":4096"));
    assert!(
        message(analyze_tensor("bf16", &bytes[..3]).unwrap_err()).contains("not a whole number")
    );
}

#[wasm_bindgen_test]
fn tiered_store() {
    let v = sample(8192);
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut st = TieredStore::new(1e6, Some(1024.0), None).unwrap();
    st.put("w", 10.0, "f32", &bytes, "exact", 0.0).unwrap();
    st.put("w", 20.0, "f32", &bytes, "exact", 0.0).unwrap();
    st.put("t", 10.0, "f32", &bytes, "hot8", 0.0).unwrap();
    assert_eq!(st.get("w", 20.0, 1000.0).unwrap(), bytes);
    assert_eq!(st.get_f32("w", 10.0, 1000.0).unwrap(), v);
    assert_eq!(st.version_tiers("t", 10.0).unwrap(), vec![0, 0, 0, 0, 8, 0]);
    assert_eq!(st.steps("w"), vec![10.0, 20.0]);
    assert_eq!(st.names(), vec!["t".to_owned(), "w".to_owned()]);
    // Never read: hot -> warm after an hour.
    let r = st.maintain(3_600_000.0, None, None).unwrap();
    assert_eq!(r.demoted, 8);
    assert_eq!(st.version_tiers("t", 10.0).unwrap()[3], 8);
    assert_eq!(
        st.warm_bytes(),
        st.bytes_by_tier()[2] + st.bytes_by_tier()[3]
    );
    assert_eq!(tier_names()[3], "warm7");
    let m = message(st.put("w", 10.0, "f32", &bytes, "exact", 0.0).unwrap_err());
    assert!(m.contains("already has a version at step 10"), "{m}");
    let m = message(st.get("w", 1.5, 0.0).unwrap_err());
    assert!(m.contains("invalid step"), "{m}");
    let m = message(st.get("nope", 1.0, 0.0).unwrap_err());
    assert!(m.contains("no tensor named"), "{m}");
    let m = message(st.put("i", 1.0, "i32", &bytes, "hot8", 0.0).unwrap_err());
    assert!(m.contains("float dtype"), "{m}");
    let m = message(
        st.put("i", 1.0, "f32", &bytes, "lukewarm", 0.0)
            .unwrap_err(),
    );
    assert!(m.contains("invalid policy"), "{m}");
    assert!(TieredStore::new(-1.0, None, None).is_err());
    st.set_warm_byte_cap(0.0).unwrap();
    st.maintain(3_700_000.0, None, None).unwrap();
    assert_eq!(st.warm_bytes(), 0.0);
    assert_eq!(st.warm_byte_cap(), 0.0);
}

//! safetensors import and export: every dtype round-trips bit-exact, metadata maps both ways,
//! and bad files are typed errors naming the file or the tensor.

mod common;

use std::collections::HashMap;

use common::temp_store;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use strata_store::{
    check_safetensors, dtype_from_safetensors, dtype_to_safetensors, DType, InvalidInput,
    SafeTensorsProblem, SafeTensorsSummary, Store, StoreError, METADATA_KEY,
};

/// Bytes of `n` elements of `size` bytes, deterministic per seed.
fn bytes(n: usize, size: usize, seed: u8) -> Vec<u8> {
    (0..n * size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn file_with(
    tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)],
    meta: Option<&[(&str, &str)]>,
) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.to_string(),
                TensorView::new(*d, s.clone(), b).expect("view"),
            )
        })
        .collect();
    let meta: Option<HashMap<String, String>> = meta.map(|m| {
        m.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    });
    safetensors::serialize(views, meta).expect("serialize")
}

#[test]
fn every_dtype_round_trips_bit_exact() {
    let dtypes = [
        Dtype::F32,
        Dtype::F16,
        Dtype::BF16,
        Dtype::F64,
        Dtype::I8,
        Dtype::U8,
        Dtype::I16,
        Dtype::U16,
        Dtype::I32,
        Dtype::U32,
        Dtype::I64,
        Dtype::U64,
        Dtype::BOOL,
    ];
    let mut tensors = Vec::new();
    for (i, d) in dtypes.iter().enumerate() {
        let shape = vec![3, i + 1];
        let mut data = bytes(3 * (i + 1), d.bitsize() / 8, i as u8);
        if *d == Dtype::BOOL {
            data.iter_mut().for_each(|b| *b &= 1);
        }
        tensors.push((format!("t.{i}.{d:?}"), *d, shape, data));
        assert_eq!(
            dtype_from_safetensors(*d).and_then(dtype_to_safetensors),
            Some(*d)
        );
    }
    // A scalar and an empty tensor too.
    tensors.push((
        "scalar".into(),
        Dtype::F32,
        vec![],
        1.5f32.to_le_bytes().to_vec(),
    ));
    tensors.push(("empty".into(), Dtype::F32, vec![0, 4], vec![]));
    let named: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), *d, s.clone(), b.clone()))
        .collect();
    let file = file_with(&named, Some(&[("format", "pt"), ("epoch", "3")]));

    let (dir, path) = temp_store();
    let src = dir.path().join("in.safetensors");
    std::fs::write(&src, &file).expect("write");
    let store = Store::open(&path).expect("open");
    let r = store.import_safetensors(&src, 7).expect("import");
    assert_eq!(r.tensors, tensors.len());
    assert_eq!(r.metadata, r#"{"epoch":"3","format":"pt"}"#);
    assert_eq!(store.checkpoint_metadata(7).expect("meta"), r.metadata);

    let out = dir.path().join("out.safetensors");
    let e = store.export_safetensors(7, &out).expect("export");
    assert_eq!(e.tensors, tensors.len());
    let back = std::fs::read(&out).expect("read");
    let st = SafeTensors::deserialize(&back).expect("parse export");
    assert_eq!(st.len(), tensors.len());
    for (name, d, shape, data) in &tensors {
        let v = st.tensor(name).expect("tensor in export");
        assert_eq!(v.dtype(), *d, "{name}");
        assert_eq!(v.shape(), shape.as_slice(), "{name}");
        assert_eq!(v.data(), data.as_slice(), "{name}");
    }
    let (_, meta) = SafeTensors::read_metadata(&back).expect("header");
    let meta = meta.metadata().clone().expect("__metadata__");
    assert_eq!(meta.get("format").map(String::as_str), Some("pt"));
    assert_eq!(meta.get("epoch").map(String::as_str), Some("3"));
}

#[test]
fn exports_of_one_checkpoint_are_the_same_bytes() {
    // Six metadata keys: written in a HashMap's order, two exports would differ in their
    // header (each map has its own random order) and the files would not compare equal.
    let meta = [
        ("format", "pt"),
        ("epoch", "3"),
        ("global_step", "1200"),
        ("lr", "0.0006"),
        ("run", "a"),
        ("seed", "7"),
    ];
    let file = file_with(
        &[
            ("w", Dtype::F32, vec![4, 8], bytes(32, 4, 1)),
            ("b", Dtype::BF16, vec![8], bytes(8, 2, 2)),
        ],
        Some(&meta),
    );
    let (dir, path) = temp_store();
    let src = dir.path().join("in.safetensors");
    std::fs::write(&src, &file).expect("write");
    let store = Store::open(&path).expect("open");
    store.import_safetensors(&src, 5).expect("import");
    let export = |i: usize| {
        let out = dir.path().join(format!("out{i}.safetensors"));
        store.export_safetensors(5, &out).expect("export");
        std::fs::read(&out).expect("read")
    };
    let first = export(0);
    for i in 1..8 {
        assert_eq!(export(i), first, "export {i}");
    }
    let (_, header) = SafeTensors::read_metadata(&first).expect("header");
    let got = header.metadata().clone().expect("__metadata__");
    assert_eq!(got.len(), meta.len());
    for (k, v) in meta {
        assert_eq!(got.get(k).map(String::as_str), Some(v), "{k}");
    }
    let st = SafeTensors::deserialize(&first).expect("parse export");
    assert_eq!(
        st.tensor("w").expect("w").data(),
        bytes(32, 4, 1).as_slice()
    );
    assert_eq!(st.tensor("b").expect("b").data(), bytes(8, 2, 2).as_slice());
}

#[test]
fn metadata_that_is_not_an_object_of_strings_survives_a_round_trip() {
    let (dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let data = 2.0f32.to_le_bytes();
    let t = strata_store::TensorRef {
        dtype: DType::F32,
        shape: &[1],
        bytes: &data,
    };
    let text = r#"{"step": 100, "loss": 0.25}"#;
    store.save_checkpoint(100, &[("w", t)], text).expect("save");
    store.save_checkpoint(200, &[("w", t)], "").expect("save");
    let out = dir.path().join("100.safetensors");
    store.export_safetensors(100, &out).expect("export");
    let back = std::fs::read(&out).expect("read");
    let (_, meta) = SafeTensors::read_metadata(&back).expect("header");
    assert_eq!(
        meta.metadata()
            .as_ref()
            .and_then(|m| m.get(METADATA_KEY))
            .map(String::as_str),
        Some(text)
    );
    let r = store.import_safetensors(&out, 101).expect("reimport");
    assert_eq!(r.metadata, text);

    let out = dir.path().join("200.safetensors");
    store.export_safetensors(200, &out).expect("export");
    let back = std::fs::read(&out).expect("read");
    let (_, meta) = SafeTensors::read_metadata(&back).expect("header");
    assert!(meta.metadata().is_none());
    assert_eq!(
        store
            .import_safetensors(&out, 201)
            .expect("import")
            .metadata,
        ""
    );
}

#[test]
fn sub_byte_tensor_off_its_groups_is_refused_by_name() {
    // Six F4 values are three whole bytes, but a last dimension of 3 splits a packed pair
    // across rows: Strata cannot hold that layout.
    let file = file_with(
        &[
            ("ok", Dtype::F32, vec![2], vec![0; 8]),
            ("mxfp4", Dtype::F4, vec![2, 3], vec![1; 3]),
        ],
        None,
    );
    let (_dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let err = store
        .import_safetensors_bytes(&file, 1, "model.safetensors")
        .expect_err("an F4 tensor with an odd last dimension must be refused");
    match &err {
        StoreError::Invalid(InvalidInput::UnsupportedDType { tensor, path, .. }) => {
            assert_eq!(tensor, "mxfp4");
            assert_eq!(path.to_str(), Some("model.safetensors"));
        }
        other => panic!("unexpected error {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("mxfp4") && text.contains("[2, 3]"), "{text}");
    // Nothing was saved.
    assert!(store.checkpoints().expect("list").is_empty());
}

/// A store holding `tensors` imported at step 1 and at step 2, where step 2 has byte `at` of
/// each tensor XORed with `flip` (a delta against step 1); each step's export is checked to be
/// the file imported, byte for byte.
fn import_two_steps_and_export(
    tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)],
    (at, flip): (usize, u8),
    file_name: &str,
) -> (tempfile::TempDir, Store) {
    let (dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    for step in [1u64, 2] {
        let file = file_with(
            &tensors
                .iter()
                .map(|(n, d, s, b)| {
                    let mut b = b.clone();
                    if step == 2 {
                        b[at] ^= flip;
                    }
                    (*n, *d, s.clone(), b)
                })
                .collect::<Vec<_>>(),
            None,
        );
        store
            .import_safetensors_bytes(&file, step, file_name)
            .expect("import");
        let out = dir.path().join(format!("{step}.safetensors"));
        store.export_safetensors(step, &out).expect("export");
        assert_eq!(std::fs::read(&out).expect("read"), file, "step {step}");
    }
    (dir, store)
}

#[test]
fn f4_and_f6_tensors_round_trip_bit_exact() {
    // MX-style blocks: 32 values per scale along the last dimension, every code present.
    let f4: Vec<u8> = (0..512u32).map(|i| (i * 37 % 256) as u8).collect();
    let f6: Vec<u8> = (0..768u32).map(|i| (i * 101 % 256) as u8).collect();
    let scales: Vec<u8> = (0..32u8).map(|i| 120 + i % 8).collect();
    let tensors = [
        ("w.fp4", Dtype::F4, vec![32, 32], f4),
        ("w.scales", Dtype::F8_E8M0, vec![32, 1], scales),
        ("w.fp6_e2m3", Dtype::F6_E2M3, vec![16, 64], f6.clone()),
        ("w.fp6_e3m2", Dtype::F6_E3M2, vec![1024], f6),
    ];
    let (_dir, store) = import_two_steps_and_export(&tensors, (5, 0x10), "mx.safetensors");
    // Strata holds packed groups: the last dimension counts pairs (F4) or fours (F6).
    let t = store.get("w.fp4", 2).expect("get");
    assert_eq!(t.dtype, DType::F4E2M1x2);
    assert_eq!(t.shape, vec![32, 16]);
    assert_eq!(t.data.len(), 512);
    let t = store.get("w.fp6_e3m2", 1).expect("get");
    assert_eq!(t.dtype, DType::F6E3M2x4);
    assert_eq!(t.shape, vec![256]);
    assert_eq!(t.data.len(), 768);
    // Byte 0 of the F6 data is 0: the group's first value is +0; every value decodes.
    let values = t.to_f64();
    assert_eq!(values.len(), 1024);
    assert_eq!(values[0], 0.0);
    assert!(values.iter().all(|v| v.is_finite() && v.abs() <= 28.0));
    // Step 2 is stored as deltas against step 1 (a keyframe this small is not re-encoded
    // against the newest, ADR 0006).
    let versions = store.versions("w.fp4").expect("versions");
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1].encodings[0].base, Some(1));
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn fp8_and_complex_tensors_round_trip_bit_exact() {
    let every_byte: Vec<u8> = (0..=255u8).collect();
    let complex: Vec<u8> = (0..64u32)
        .flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes())
        .collect();
    let tensors = [
        ("e4m3", Dtype::F8_E4M3, vec![16, 16], every_byte.clone()),
        ("e5m2", Dtype::F8_E5M2, vec![256], every_byte.clone()),
        ("e8m0", Dtype::F8_E8M0, vec![4, 64], every_byte.clone()),
        (
            "e4m3fnuz",
            Dtype::F8_E4M3FNUZ,
            vec![256],
            every_byte.clone(),
        ),
        ("e5m2fnuz", Dtype::F8_E5M2FNUZ, vec![2, 128], every_byte),
        ("c64", Dtype::C64, vec![8, 4], complex),
    ];
    let (_dir, store) = import_two_steps_and_export(&tensors, (3, 1), "fp8.safetensors");
    let t = store.get("e4m3", 2).expect("get");
    assert_eq!(t.dtype, DType::F8E4M3);
    assert_eq!(t.shape, vec![16, 16]);
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let (dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let good = file_with(&[("a", Dtype::F32, vec![4], vec![7; 16])], None);

    let header = |json: &str, data: usize| {
        let mut f = (json.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(json.as_bytes());
        f.extend(std::iter::repeat_n(0u8, data));
        f
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("truncated", good[..good.len() - 3].to_vec()),
        ("header past the end", {
            let mut f = good.clone();
            f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
            f
        }),
        ("not json", header("{not json", 0)),
        (
            "offsets overlap",
            header(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                12,
            ),
        ),
        (
            "shape disagrees with offsets",
            header(
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                8,
            ),
        ),
        (
            "huge offsets",
            header(
                r#"{"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,18446744073709551615]}}"#,
                0,
            ),
        ),
        (
            "overflowing shape",
            header(
                r#"{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#,
                8,
            ),
        ),
    ];
    for (what, bytes) in cases {
        let file = dir
            .path()
            .join(format!("{}.safetensors", what.replace(' ', "_")));
        std::fs::write(&file, &bytes).expect("write");
        match store.import_safetensors(&file, 1) {
            Err(StoreError::Invalid(InvalidInput::SafeTensorsFile { path, .. })) => {
                assert_eq!(path, file, "{what}")
            }
            other => panic!("{what}: expected a safetensors error, got {other:?}"),
        }
    }
    // A missing file is an I/O error naming it.
    let missing = dir.path().join("missing.safetensors");
    assert!(matches!(
        store.import_safetensors(&missing, 1),
        Err(StoreError::Io { path, .. }) if path == missing
    ));
    assert!(store.checkpoints().expect("list").is_empty());
}

/// A safetensors file of `header` (JSON text, written as it is) and `data` bytes of data.
fn raw_file(header: &str, data: usize) -> Vec<u8> {
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.extend(std::iter::repeat_n(1u8, data));
    f
}

/// The problem an import of `file` is refused for: the import must fail with
/// [`InvalidInput::SafeTensorsFile`] naming `name`, write nothing, and [`check_safetensors`]
/// must refuse the file for the same reason.
fn refusal(store: &Store, dir: &std::path::Path, name: &str, file: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, file).expect("write");
    let err = store
        .import_safetensors(&path, 1)
        .expect_err("a bad file must be refused");
    let text = err.to_string();
    assert!(
        matches!(&err, StoreError::Invalid(InvalidInput::SafeTensorsFile { path: p, .. }) if *p == path),
        "{name}: expected SafeTensorsFile, got {err:?}"
    );
    assert!(text.contains(name), "the message names the file: {text}");
    let checked = check_safetensors(&path).expect_err("check_safetensors refuses it too");
    assert_eq!(checked.to_string(), text);
    assert!(store.checkpoints().expect("list").is_empty(), "{name}");
    text
}

#[test]
fn a_tensor_named_twice_is_refused_by_name() {
    let (dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    // Both entries describe the same 8 bytes: a map that keeps the last key (serde_json's,
    // the safetensors crate's) would import them as f32 [2] and never say that the file
    // also called them bf16 [4].
    let text = refusal(
        &store,
        dir.path(),
        "twice.safetensors",
        &raw_file(
            r#"{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            8,
        ),
    );
    assert!(text.contains(r#"names "w" twice"#), "{text}");
    // __metadata__ twice, and a key twice inside it.
    let text = refusal(
        &store,
        dir.path(),
        "meta_twice.safetensors",
        &raw_file(
            r#"{"__metadata__":{"epoch":"1"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"epoch":"2"}}"#,
            8,
        ),
    );
    assert!(text.contains(r#"names "__metadata__" twice"#), "{text}");
    let text = refusal(
        &store,
        dir.path(),
        "meta_key_twice.safetensors",
        &raw_file(
            r#"{"__metadata__":{"epoch":"1","epoch":"2"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            8,
        ),
    );
    assert!(
        text.contains(r#"__metadata__ has the key "epoch" twice"#),
        "{text}"
    );
    // A field twice inside a tensor's entry.
    let text = refusal(
        &store,
        dir.path(),
        "field_twice.safetensors",
        &raw_file(
            r#"{"w":{"dtype":"BF16","shape":[4],"dtype":"F32","data_offsets":[0,8]}}"#,
            8,
        ),
    );
    assert!(
        text.contains(r#"tensor "w""#) && text.contains("duplicate field `dtype`"),
        "{text}"
    );
}

#[test]
fn every_refusal_names_the_file_the_tensor_and_the_numbers() {
    let (dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let f32_entry = |name: &str, n: u64, start: u64| {
        format!(
            r#""{name}":{{"dtype":"F32","shape":[{n}],"data_offsets":[{start},{}]}}"#,
            start + 4 * n
        )
    };
    let two = |a: String, b: String| format!("{{{a},{b}}}");
    // (file name, header, data bytes, the problem, what the message must say)
    type Check = fn(&SafeTensorsProblem) -> bool;
    let cases: Vec<(&str, String, usize, Check, Vec<&str>)> = vec![
        (
            "overlap.safetensors",
            two(f32_entry("a", 2, 0), f32_entry("b", 2, 4)),
            12,
            |p| matches!(p, SafeTensorsProblem::Overlap { .. }),
            vec![r#""a" (bytes 0..8)"#, r#""b" (bytes 4..12)"#, "overlap"],
        ),
        (
            "past_end.safetensors",
            two(f32_entry("a", 2, 0), f32_entry("b", 4, 8)),
            16,
            |p| matches!(p, SafeTensorsProblem::PastEnd { .. }),
            vec![
                r#"tensor "b" ends at byte 24"#,
                "only 16 bytes",
                "truncated",
            ],
        ),
        (
            "hole.safetensors",
            two(f32_entry("a", 2, 0), f32_entry("b", 2, 12)),
            20,
            |p| matches!(p, SafeTensorsProblem::Hole { .. }),
            vec!["bytes 8..12", "no tensor"],
        ),
        (
            "trailing.safetensors",
            format!("{{{}}}", f32_entry("a", 2, 0)),
            12,
            |p| matches!(p, SafeTensorsProblem::Trailing { .. }),
            vec!["end at byte 8", "12 bytes of data"],
        ),
        (
            "size.safetensors",
            r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#.into(),
            8,
            |p| matches!(p, SafeTensorsProblem::Size { .. }),
            vec![
                r#"tensor "a""#,
                "[0, 8] span 8 bytes",
                "[3] of F32 needs 12",
            ],
        ),
        (
            "backwards.safetensors",
            r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}"#.into(),
            8,
            |p| matches!(p, SafeTensorsProblem::Offsets { .. }),
            vec![r#"tensor "a""#, "[8, 0]"],
        ),
        (
            "overflow.safetensors",
            r#"{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#.into(),
            8,
            |p| matches!(p, SafeTensorsProblem::ShapeOverflow { .. }),
            vec![r#"tensor "a""#, "[4294967296, 4294967296]"],
        ),
        (
            "entry.safetensors",
            r#"{"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}}"#.into(),
            8,
            |p| matches!(p, SafeTensorsProblem::Entry { .. }),
            vec![r#"tensor "a""#, "line 1"],
        ),
        (
            "metadata.safetensors",
            r#"{"__metadata__":{"epoch":3}}"#.into(),
            0,
            |p| matches!(p, SafeTensorsProblem::Metadata { .. }),
            vec!["__metadata__", "string"],
        ),
        (
            "empty_name.safetensors",
            r#"{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#.into(),
            8,
            |p| matches!(p, SafeTensorsProblem::Name { .. }),
            vec![r#"tensor """#, "empty"],
        ),
        (
            "dimensions.safetensors",
            format!(
                r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[0,1]}}}}"#,
                vec!["1"; 33].join(",")
            ),
            1,
            |p| matches!(p, SafeTensorsProblem::Dimensions { .. }),
            vec![r#"tensor "a""#, "33 dimensions, more than 32"],
        ),
        (
            "not_json.safetensors",
            "{not json".into(),
            0,
            |p| matches!(p, SafeTensorsProblem::Json { .. }),
            vec!["not a JSON object", "line 1 column 2"],
        ),
        (
            "a_list.safetensors",
            "[1, 2]".into(),
            0,
            |p| matches!(p, SafeTensorsProblem::Json { .. }),
            vec!["expected a JSON object"],
        ),
    ];
    for (name, header, data, check, says) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, raw_file(&header, data)).expect("write");
        let err = store.import_safetensors(&file, 1).expect_err(name);
        let text = err.to_string();
        match &err {
            StoreError::Invalid(InvalidInput::SafeTensorsFile { path, problem }) => {
                assert_eq!(path, &file, "{text}");
                assert!(check(problem), "{name}: {problem:?}");
            }
            other => panic!("{name}: expected SafeTensorsFile, got {other:?}"),
        }
        assert!(text.contains(name), "{text}");
        for s in says {
            assert!(text.contains(s), "{name}: {text:?} does not say {s:?}");
        }
    }

    // A file cut short: where its header ends, and inside its data.
    let good = file_with(&[("w", Dtype::F32, vec![4], vec![7; 16])], None);
    let text = refusal(&store, dir.path(), "cut_header.safetensors", &good[..20]);
    assert!(
        text.contains("runs past the end of the file, which holds 12 bytes"),
        "{text}"
    );
    let text = refusal(
        &store,
        dir.path(),
        "cut_data.safetensors",
        &good[..good.len() - 3],
    );
    assert!(
        text.contains(r#"tensor "w" ends at byte 16"#) && text.contains("only 13 bytes"),
        "{text}"
    );
    let text = refusal(&store, dir.path(), "tiny.safetensors", b"1234");
    assert!(text.contains("4 bytes long"), "{text}");

    // An F4 tensor of an odd count is refused by name, as is a dtype Strata does not know.
    for (name, header, says) in [
        (
            "odd_f4.safetensors",
            r#"{"fp4":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
            vec![r#"tensor "fp4""#, "[3]", "multiple of 2"],
        ),
        (
            "unknown.safetensors",
            r#"{"q":{"dtype":"Q4_K","shape":[3],"data_offsets":[0,2]}}"#,
            vec![r#"tensor "q""#, "Q4_K"],
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, raw_file(header, 2)).expect("write");
        let err = store.import_safetensors(&file, 1).expect_err(name);
        let text = err.to_string();
        assert!(
            matches!(&err, StoreError::Invalid(InvalidInput::UnsupportedDType { path, .. }) if *path == file),
            "{name}: {err:?}"
        );
        for s in says {
            assert!(text.contains(s), "{name}: {text:?} does not say {s:?}");
        }
    }
    assert!(store.checkpoints().expect("list").is_empty());
}

#[test]
fn check_safetensors_reads_only_the_header() {
    let (dir, path) = temp_store();
    let file = file_with(
        &[
            ("a", Dtype::F32, vec![4], vec![7; 16]),
            ("b", Dtype::BF16, vec![2, 2], vec![1; 8]),
        ],
        Some(&[("epoch", "3")]),
    );
    let src = dir.path().join("ok.safetensors");
    std::fs::write(&src, &file).expect("write");
    let summary = check_safetensors(&src).expect("a good file");
    assert_eq!(
        summary,
        SafeTensorsSummary {
            tensors: 2,
            raw_bytes: 24,
            metadata: r#"{"epoch":"3"}"#.into(),
        }
    );
    let store = Store::open(&path).expect("open");
    let r = store.import_safetensors(&src, 3).expect("import");
    assert_eq!(
        (r.tensors, r.raw_bytes, r.metadata),
        (2, 24, summary.metadata)
    );
    let missing = dir.path().join("missing.safetensors");
    assert!(matches!(
        check_safetensors(&missing),
        Err(StoreError::Io { path, .. }) if path == missing
    ));
}

#[test]
fn header_byte_flips_never_panic() {
    let file = file_with(
        &[
            ("a", Dtype::F32, vec![4], vec![7; 16]),
            ("b", Dtype::BF16, vec![2, 2], vec![1; 8]),
        ],
        Some(&[("k", "v")]),
    );
    let (_dir, path) = temp_store();
    let store = Store::open(&path).expect("open");
    let header_end = 8 + u64::from_le_bytes(file[..8].try_into().expect("8 bytes")) as usize;
    let mut step = 0u64;
    for at in 0..header_end {
        for flip in [0x01u8, 0x20, 0x80] {
            let mut bad = file.clone();
            bad[at] ^= flip;
            step += 1;
            // Either a clean import of what the header now says, or an error: never a panic.
            let _ = store.import_safetensors_bytes(&bad, step, "flipped.safetensors");
        }
    }
}

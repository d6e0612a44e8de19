//! Writes the seed corpora of the store targets (`store_open`, `store_records`,
//! `import_safetensors`) into `corpus/<target>/seed-*`, from the committed real series
//! (`../testdata/series`) and by hand. Run from `fuzz/`:
//!
//! ```sh
//! cargo run --release --example make_store_seeds
//! ```
//!
//! - `store_open`: small real stores (a few KiB to ~100 KiB): three to five checkpoints cut
//!   from the series (the first tensors of each file, their first elements: real deltas
//!   between steps), with metadata, tags, a retain, a tiered `kv.*` tensor moved by
//!   `maintain` and a pinned pattern; the synthetic store of `store_records` in two
//!   variants; an empty store.
//! - `store_records`: edits of each table of that synthetic store (one seed per table and
//!   edit kind).
//! - `import_safetensors`: small files cut from the series (f32, bf16, with and without
//!   `__metadata__`), and edge cases: a zero-size tensor, a scalar, a declared shape much
//!   larger than the data, overlapping, gapped and out-of-range offsets, an unknown dtype,
//!   a header length past the file, an empty header, a name `__metadata__`-like, metadata
//!   with one key, non-string metadata.

use std::path::{Path, PathBuf};

use strata_codec_fuzz::store_util::build_store;
use strata_store::safetensors::SafeTensors;
use strata_store::{
    dtype_from_safetensors, DType, Residual, RetainPolicy, Store, TensorRef, Tier, TierPolicy,
};

fn series() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/series")
}

/// A tensor cut from a file: its first `elems` elements, as a 1-D tensor.
struct Cut {
    name: String,
    dtype: DType,
    st_dtype: String,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// The first `count` tensors (by name) of a series file, each cut to `elems` elements.
fn cut(file: &str, count: usize, elems: usize) -> Vec<Cut> {
    let bytes = std::fs::read(series().join(file)).expect("read a series file");
    let st = SafeTensors::deserialize(&bytes).expect("parse a series file");
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    views
        .into_iter()
        .take(count)
        .map(|(name, v)| {
            let dtype = dtype_from_safetensors(v.dtype()).expect("a store dtype");
            let n = elems.min(v.data().len() / dtype.size());
            Cut {
                name,
                dtype,
                st_dtype: format!("{:?}", v.dtype()),
                shape: vec![n as u64],
                data: v.data()[..n * dtype.size()].to_vec(),
            }
        })
        .collect()
}

/// A safetensors file of `tensors` laid out one after another, with `meta` (JSON object
/// text) as `__metadata__` when given.
fn st_file(tensors: &[(&str, &str, &[u64], &[u8])], meta: Option<&str>) -> Vec<u8> {
    let mut header = String::from("{");
    if let Some(m) = meta {
        header += &format!("\"__metadata__\":{m}");
        if !tensors.is_empty() {
            header.push(',');
        }
    }
    let mut off = 0usize;
    let mut data = Vec::new();
    for (i, (name, dtype, shape, bytes)) in tensors.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        header += &format!(
            "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{off},{}]}}",
            off + bytes.len()
        );
        off += bytes.len();
        data.extend_from_slice(bytes);
    }
    header.push('}');
    raw_file(&header, &data)
}

/// A file of an 8-byte header length, `header` and `data`.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write a seed");
    println!("{}/seed-{name}: {} bytes", dir.display(), bytes.len());
}

/// A real store: `steps` checkpoints of `files` cut to `count` tensors of `elems` elements.
fn real_store(path: &Path, files: &[&str], count: usize, elems: usize, extras: bool) {
    let _ = std::fs::remove_file(path);
    let mut store = Store::open(path).expect("create a seed store");
    for (i, f) in files.iter().enumerate() {
        let step = 100 * (i as u64 + 1);
        let cuts = cut(f, count, elems);
        let refs: Vec<(&str, TensorRef<'_>)> = cuts
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    TensorRef {
                        dtype: c.dtype,
                        shape: &c.shape,
                        bytes: &c.data,
                    },
                )
            })
            .collect();
        store
            .save_checkpoint(step, &refs, &format!("{{\"source\": \"{f}\"}}"))
            .expect("save a seed checkpoint");
    }
    if extras {
        store.tag("best", 200).expect("tag");
        store
            .set_policy(
                "kv.*",
                TierPolicy::tiered(Tier::Hot8).with_residual(Residual::Exact),
            )
            .expect("policy");
        store.pin("*norm*").expect("pin");
        let kv = cut(files[0], 1, 2048).remove(0);
        for step in 1..=2u64 {
            let f32s: Vec<u8> = match kv.dtype {
                DType::F32 => kv.data.clone(),
                _ => kv
                    .data
                    .chunks_exact(2)
                    .flat_map(|b| [0, 0, b[0], b[1]])
                    .collect(),
            };
            let n = (f32s.len() / 4) as u64;
            store
                .put(
                    "kv.0",
                    step,
                    &TensorRef {
                        dtype: DType::F32,
                        shape: &[n],
                        bytes: &f32s,
                    },
                )
                .expect("put kv");
        }
        store.maintain(30 * 86_400_000).expect("maintain");
        store
            .retain(&RetainPolicy {
                keep_last: Some(2),
                keep_every: None,
                keep_tagged: true,
            })
            .expect("retain");
    }
    store.compact().expect("compact");
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let tmp = std::env::temp_dir().join(format!("strata-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");

    // store_open: real stores, the synthetic one, an empty one.
    let open = root.join("store_open");
    std::fs::create_dir_all(&open).expect("corpus dir");
    let bf16 = [
        "dev_ft/bf16/step_000400.safetensors",
        "dev_ft/bf16/step_000410.safetensors",
        "dev_ft/bf16/step_000420.safetensors",
    ];
    let f32s = [
        "dev_pre/step_000250.safetensors",
        "dev_pre/step_000300.safetensors",
        "dev_pre/step_000350.safetensors",
    ];
    let stores: [(&str, &[&str], usize, usize, bool); 4] = [
        ("real-bf16", &bf16, 3, 4096, true),
        ("real-f32", &f32s, 2, 2048, true),
        ("real-bf16-plain", &bf16[..2], 2, 1024, false),
        ("real-f32-one", &f32s[..1], 4, 512, false),
    ];
    for (name, files, count, elems, extras) in stores {
        let p = tmp.join(format!("{name}.strata"));
        real_store(&p, files, count, elems, extras);
        write(&open, name, &std::fs::read(&p).expect("read a seed store"));
    }
    for variant in 0..2u64 {
        let p = tmp.join(format!("synthetic-{variant}.strata"));
        let _ = std::fs::remove_file(&p);
        build_store(&p, variant).expect("synthetic store");
        write(
            &open,
            &format!("synthetic-{variant}"),
            &std::fs::read(&p).expect("read"),
        );
    }
    let p = tmp.join("empty.strata");
    let _ = std::fs::remove_file(&p);
    drop(Store::open(&p).expect("empty store"));
    write(&open, "empty-store", &std::fs::read(&p).expect("read"));

    // store_records: one edit per table and kind (byte 2 bit 4: with the writes).
    let rec = root.join("store_records");
    std::fs::create_dir_all(&rec).expect("corpus dir");
    for table in 0..7u8 {
        for (kind, op, at, rest) in [
            ("xor", 1u8 | 16, 2u8, vec![0x01u8]),
            ("replace", 0, 0, vec![1, 0, 0, 0]),
            ("insert", 2, 3, vec![0xff; 4]),
            ("cut", 3, 5, vec![]),
            ("rekey", 1 | 8 | 16, 0, vec![0]),
            ("raw", 1 | 4, 1, vec![0x80]),
        ] {
            let mut bytes = vec![table, 1, op, at];
            bytes.extend_from_slice(&rest);
            write(&rec, &format!("t{table}-{kind}"), &bytes);
        }
    }

    // import_safetensors: cut real files, then edge cases.
    let imp = root.join("import_safetensors");
    std::fs::create_dir_all(&imp).expect("corpus dir");
    for (name, file, count, elems, meta) in [
        ("real-bf16", bf16[0], 3, 256, Some("{\"step\":\"400\"}")),
        ("real-f32", f32s[0], 2, 128, None),
        (
            "real-f32-many",
            f32s[1],
            6,
            16,
            Some("{\"a\":\"1\",\"b\":\"x\"}"),
        ),
    ] {
        let cuts = cut(file, count, elems);
        let ts: Vec<(&str, &str, &[u64], &[u8])> = cuts
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.st_dtype.as_str(),
                    c.shape.as_slice(),
                    c.data.as_slice(),
                )
            })
            .collect();
        write(&imp, name, &st_file(&ts, meta));
    }
    let f4 = [0u8, 0, 128, 63, 0, 0, 0, 64];
    let edge: Vec<(&str, Vec<u8>)> = vec![
        ("zero-size", st_file(&[("z", "F32", &[0, 4], &[])], None)),
        (
            "zero-and-one",
            st_file(&[("z", "BF16", &[0], &[]), ("a", "F32", &[2], &f4)], None),
        ),
        ("scalar", st_file(&[("s", "F32", &[], &f4[..4])], None)),
        (
            "every-dtype",
            st_file(
                &[
                    ("b", "BOOL", &[2], &[0, 1]),
                    ("u8", "U8", &[2], &[1, 2]),
                    ("i8", "I8", &[2], &[1, 255]),
                    ("i16", "I16", &[1], &[1, 2]),
                    ("f16", "F16", &[1], &[0, 60]),
                    ("i32", "I32", &[1], &[1, 2, 3, 4]),
                    ("u64", "U64", &[1], &[1, 2, 3, 4, 5, 6, 7, 8]),
                    ("f64", "F64", &[1], &[0, 0, 0, 0, 0, 0, 240, 63]),
                ],
                None,
            ),
        ),
        (
            "big-shape",
            raw_file(
                "{\"t\":{\"dtype\":\"F32\",\"shape\":[1000000,1000000],\"data_offsets\":[0,8]}}",
                &f4,
            ),
        ),
        (
            "overflow-shape",
            raw_file(
                "{\"t\":{\"dtype\":\"F32\",\"shape\":[18446744073709551615,2],\"data_offsets\":[0,8]}}",
                &f4,
            ),
        ),
        (
            "overlap",
            raw_file(
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                &f4,
            ),
        ),
        (
            "gap",
            raw_file(
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                &f4,
            ),
        ),
        (
            "past-end",
            raw_file(
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                &f4,
            ),
        ),
        (
            "unknown-dtype",
            raw_file(
                "{\"a\":{\"dtype\":\"X99\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                &f4,
            ),
        ),
        (
            "f8-dtype",
            raw_file(
                "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[8],\"data_offsets\":[0,8]}}",
                &f4,
            ),
        ),
        ("header-past-end", {
            let mut b = 4096u64.to_le_bytes().to_vec();
            b.extend_from_slice(b"{}");
            b
        }),
        ("empty-header", raw_file("{}", &[])),
        ("spaces-header", raw_file("{}      ", &[])),
        ("empty-file", Vec::new()),
        (
            "meta-one-key",
            st_file(
                &[("a", "F32", &[2], &f4)],
                Some("{\"strata.metadata\":\"{\\\"k\\\":\\\"v\\\"}\"}"),
            ),
        ),
        (
            "meta-not-strings",
            raw_file(
                "{\"__metadata__\":{\"a\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                &f4,
            ),
        ),
        ("empty-name", st_file(&[("", "F32", &[2], &f4)], None)),
        (
            "duplicate-name",
            raw_file(
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                &f4,
            ),
        ),
    ];
    for (name, bytes) in edge {
        write(&imp, name, &bytes);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

//! `native-ref`: what the native build computes, for the tests that compare WebAssembly
//! with it (`wasm/test/determinism.test.mjs`, `wasm/test/e2e.test.mjs`).
//!
//! ```text
//! cargo run --release -p strata-wasm --example native-ref -- encode FILE [BASE] --out DIR
//! cargo run --release -p strata-wasm --example native-ref -- report FILE
//! cargo run --release -p strata-wasm --example native-ref -- bench FILE
//! ```
//!
//! - `encode`: for every tensor of the safetensors FILE, in name order, writes the segments
//!   the codec makes natively: `DIR/<i>.key` (lossless keyframe of the tensor's bytes),
//!   `DIR/<i>.delta` (XOR delta against the same tensor in BASE, when given and of the same
//!   dtype and length), and for float tensors `DIR/<i>.q8`, `.q7`, `.q5`, `.q3` (the values
//!   widened to f32, quantized with default parameters). `DIR/manifest.json` lists the
//!   tensors and files.
//! - `report`: prints the demo page's figures as JSON: `{"tensors": [{"name", "analysis"}],
//!   "total"}`, each analysis as `strata_wasm::analyze::Analysis::to_json` writes it.
//! - `bench`: times, on one thread, what `wasm/bench.mjs` times in WebAssembly, with the
//!   same definitions, and prints one JSON object of MB/s (10^6 bytes per second) as
//!   `[median, best]` of repeated runs: `pack` and `unpack` per width (bytes of i8 codes, one per value of
//!   the file's float tensors), `lossless_encode` and `lossless_decode` (raw bytes of every
//!   tensor, in 1 MiB keyframe blocks), `quantize` and `dequantize` per width (raw bytes of
//!   the float tensors in their dtype, widened to f32 outside the timing, blocks of 1 MiB
//!   of raw bytes).
//!
//! Exit codes: 0 success, 1 unusable input or a codec failure, 2 bad command line.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use safetensors::SafeTensors;
use strata_wasm::analyze::{analyze, Analysis, LOSSLESS_BLOCK_BYTES, TIER_BITS};
use strata_wasm::{ops, DType};

type BoxError = Box<dyn Error>;

const USAGE: &str =
    "usage: native-ref encode FILE [BASE] --out DIR | native-ref report FILE | native-ref bench FILE";

/// Fewest timed runs of a measurement; more run until they add up to [`MIN_TIME`].
const REPS: usize = 5;
/// Total time a measurement runs for at least.
const MIN_TIME: Duration = Duration::from_millis(1000);

/// A tensor as read from the file: name, dtype, little-endian bytes.
struct Tensor {
    name: String,
    dtype: DType,
    data: Vec<u8>,
}

fn read_tensors(path: &str) -> Result<Vec<Tensor>, BoxError> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| format!("{path}: {e}"))?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        let dtype =
            DType::from_safetensors_name(&format!("{:?}", view.dtype())).ok_or_else(|| {
                format!(
                    "{path}: tensor {name}: dtype {:?} not supported",
                    view.dtype()
                )
            })?;
        out.push(Tensor {
            name,
            dtype,
            data: view.data().to_vec(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn encode(file: &str, base: Option<&str>, out: &PathBuf) -> Result<(), BoxError> {
    let tensors = read_tensors(file)?;
    let bases = match base {
        Some(b) => read_tensors(b)?,
        None => Vec::new(),
    };
    std::fs::create_dir_all(out)?;
    let opts = Default::default();
    let mut manifest = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let mut files = vec![format!("{i}.key")];
        std::fs::write(
            out.join(&files[0]),
            ops::encode(t.dtype, &t.data, None, &opts)?,
        )?;
        let base = bases
            .iter()
            .find(|b| b.name == t.name && b.dtype == t.dtype && b.data.len() == t.data.len());
        if let Some(b) = base {
            let f = format!("{i}.delta");
            std::fs::write(
                out.join(&f),
                ops::encode(t.dtype, &t.data, Some(&b.data), &opts)?,
            )?;
            files.push(f);
        }
        if t.dtype.is_float() {
            let values = ops::widen(t.dtype, &t.data)?;
            for bits in TIER_BITS {
                let f = format!("{i}.q{bits}");
                std::fs::write(out.join(&f), ops::quantize(&values, bits, t.dtype, None)?)?;
                files.push(f);
            }
        }
        manifest.push(serde_json::json!({
            "name": t.name,
            "dtype": t.dtype.name(),
            "files": files,
        }));
    }
    let m = serde_json::json!({ "file": file, "base": base, "tensors": manifest });
    std::fs::write(out.join("manifest.json"), serde_json::to_string_pretty(&m)?)?;
    println!("{} tensors encoded into {}", tensors.len(), out.display());
    Ok(())
}

fn report(file: &str) -> Result<(), BoxError> {
    let tensors = read_tensors(file)?;
    let mut total = Analysis::empty();
    let mut parts = Vec::new();
    for t in &tensors {
        let a = analyze(t.dtype, &t.data)?;
        total.merge(&a);
        parts.push(format!(
            "{{\"name\":{},\"analysis\":{}}}",
            serde_json::to_string(&t.name)?,
            a.to_json()
        ));
    }
    println!(
        "{{\"tensors\":[{}],\"total\":{}}}",
        parts.join(","),
        total.to_json()
    );
    Ok(())
}

/// Median and shortest seconds of `f` over at least [`REPS`] runs and [`MIN_TIME`].
fn time<T>(mut f: impl FnMut() -> Result<T, BoxError>) -> Result<(f64, f64), BoxError> {
    let mut runs = Vec::new();
    let start = Instant::now();
    while runs.len() < REPS || start.elapsed() < MIN_TIME {
        let t = Instant::now();
        std::hint::black_box(f()?);
        runs.push(t.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    Ok((runs[runs.len() / 2], runs[0]))
}

/// `[median, best]` MB/s of `bytes` processed in the times of [`time`].
fn mbps(bytes: usize, (median, best): (f64, f64)) -> serde_json::Value {
    serde_json::json!([bytes as f64 / median / 1e6, bytes as f64 / best / 1e6])
}

/// Codes in `-qmax..=qmax` for a width: the same sequence `bench.mjs` makes.
fn codes(n: usize, bits: u32) -> Vec<i8> {
    let q = (1i64 << (bits - 1)) - 1;
    (0..n as i64)
        .map(|i| ((i * 7919 + (i >> 3)) % (2 * q + 1) - q) as i8)
        .collect()
}

fn bench(file: &str) -> Result<(), BoxError> {
    let tensors = read_tensors(file)?;
    let floats: Vec<&Tensor> = tensors.iter().filter(|t| t.dtype.is_float()).collect();
    let values: usize = floats.iter().map(|t| t.data.len() / t.dtype.size()).sum();
    let mut out = serde_json::Map::new();
    let (mut pack, mut unpack) = (serde_json::Map::new(), serde_json::Map::new());
    for bits in TIER_BITS {
        let c = codes(values, bits);
        let packed = ops::pack(&c, bits)?;
        pack.insert(
            bits.to_string(),
            mbps(values, time(|| Ok(ops::pack(&c, bits)?))?),
        );
        let t = time(|| Ok(ops::unpack(&packed, bits, values)?))?;
        unpack.insert(bits.to_string(), mbps(values, t));
    }
    out.insert("pack".into(), pack.into());
    out.insert("unpack".into(), unpack.into());

    let opts = Default::default();
    let raw: usize = tensors.iter().map(|t| t.data.len()).sum();
    let blocks: Vec<(DType, &[u8])> = tensors
        .iter()
        .flat_map(|t| {
            t.data
                .chunks(LOSSLESS_BLOCK_BYTES)
                .map(move |b| (t.dtype, b))
        })
        .collect();
    let encode_all = || -> Result<Vec<Vec<u8>>, BoxError> {
        let mut v = Vec::with_capacity(blocks.len());
        for (dt, b) in &blocks {
            v.push(ops::encode(*dt, b, None, &opts)?);
        }
        Ok(v)
    };
    let segments = encode_all()?;
    out.insert("lossless_encode".into(), mbps(raw, time(encode_all)?));
    let t = time(|| {
        for s in &segments {
            std::hint::black_box(ops::decode(s, None)?);
        }
        Ok(())
    })?;
    out.insert("lossless_decode".into(), mbps(raw, t));

    let float_raw: usize = floats.iter().map(|t| t.data.len()).sum();
    let mut fblocks = Vec::new();
    for t in &floats {
        for b in t.data.chunks(LOSSLESS_BLOCK_BYTES) {
            fblocks.push((t.dtype, ops::widen(t.dtype, b)?));
        }
    }
    let (mut quant, mut dequant) = (serde_json::Map::new(), serde_json::Map::new());
    for bits in TIER_BITS {
        let q_all = || -> Result<Vec<Vec<u8>>, BoxError> {
            let mut v = Vec::with_capacity(fblocks.len());
            for (dt, f) in &fblocks {
                v.push(ops::quantize(f, bits, *dt, None)?);
            }
            Ok(v)
        };
        let segs = q_all()?;
        quant.insert(bits.to_string(), mbps(float_raw, time(q_all)?));
        let t = time(|| {
            for s in &segs {
                std::hint::black_box(ops::dequantize(s)?);
            }
            Ok(())
        })?;
        dequant.insert(bits.to_string(), mbps(float_raw, t));
    }
    out.insert("quantize".into(), quant.into());
    out.insert("dequantize".into(), dequant.into());
    out.insert("raw_bytes".into(), raw.into());
    out.insert("values".into(), values.into());
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("report") if args.len() == 2 => report(&args[1]),
        Some("bench") if args.len() == 2 => bench(&args[1]),
        Some("encode") => {
            let mut out = None;
            let mut files = Vec::new();
            let mut it = args[1..].iter();
            while let Some(a) = it.next() {
                if a == "--out" {
                    out = it.next().map(PathBuf::from);
                } else {
                    files.push(a.as_str());
                }
            }
            match (out, files.as_slice()) {
                (Some(out), [file]) => encode(file, None, &out),
                (Some(out), [file, base]) => encode(file, Some(base), &out),
                _ => {
                    eprintln!("{USAGE}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("native-ref: {e}");
            ExitCode::from(1)
        }
    }
}

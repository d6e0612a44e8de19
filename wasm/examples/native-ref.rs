//! `native-ref`: what the native build computes, for the tests that compare WebAssembly
//! with it (`wasm/test/determinism.test.mjs`, `wasm/test/e2e.test.mjs`).
//!
//! ```text
//! cargo run --release -p strata-wasm --example native-ref -- encode FILE [BASE] --out DIR
//! cargo run --release -p strata-wasm --example native-ref -- report FILE
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
//!
//! Exit codes: 0 success, 1 unusable input or a codec failure, 2 bad command line.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use safetensors::SafeTensors;
use strata_wasm::analyze::{analyze, Analysis, TIER_BITS};
use strata_wasm::{ops, DType};

type BoxError = Box<dyn Error>;

const USAGE: &str = "usage: native-ref encode FILE [BASE] --out DIR | native-ref report FILE";

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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("report") if args.len() == 2 => report(&args[1]),
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

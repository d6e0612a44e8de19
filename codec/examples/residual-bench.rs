//! `residual-bench`: sizes and errors of the residuals of each quantized tier on a real
//! safetensors checkpoint (ADR 0012).
//!
//! ```text
//! cargo run --release -p strata-codec --example residual-bench -- FILE.safetensors [--json]
//! ```
//!
//! Every float tensor (f32, f16 or bf16) is cut into blocks of 1 MiB of raw bytes, as the
//! store cuts them. For each block and each tier (8, 7, 5, 3 bits; groups of 64, two-level
//! at 3 bits):
//!
//! - `quant_bytes`: the quantized segment ([`segment::encode_quantized`]);
//! - `exact_bytes`: the exact residual, a lossless delta segment of the original block
//!   against the dequantized block cast back to its dtype ([`residual::exact_residual`],
//!   default lossless options); every one is applied and compared with the original;
//! - `exact_hpdkv_bytes` (fp16/bf16 blocks only, else `null`): the alternative, the XOR
//!   words of the same two blocks as a dense zlib-compressed HPΔKV blob;
//! - `topk`: for `k = ceil(fraction * block length)` at fractions 0.1 %, 1 % and 5 %, the
//!   top-k residual in fp16 and in bf16 ([`residual::topk_residual`], zlib-compressed
//!   blob), applied to the dequantized block; errors before and after over the whole file:
//!   `rms` (root mean square of `x - x̂`), `max_abs` (largest `|x - x̂|`) and `max_rel`
//!   (worst group of 64 values of `max|x - x̂| / max|x|`, all-zero groups skipped).
//!
//! `keyframe_bytes` is the lossless keyframe of every block, for comparison. No timings.
//! Exit codes: 0 success, 1 unusable input or a codec failure, 2 bad command line.

use std::error::Error;
use std::process::ExitCode;

use safetensors::SafeTensors;
use serde::Serialize;
use strata_codec::hpdkv::{HalfDType, HpdkvBlob, HpdkvView};
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams};
use strata_codec::residual;
use strata_codec::segment::{self, Segment};
use strata_codec::{convert, DType};

type BoxError = Box<dyn Error>;

/// Raw bytes per block, as in the store.
const BLOCK_BYTES: usize = 1 << 20;
/// Values per group of the `max_rel` measure.
const ERR_GROUP: usize = 64;
/// Tiers measured, in report order.
const TIERS: [QuantBits; 4] = [QuantBits::B8, QuantBits::B7, QuantBits::B5, QuantBits::B3];
/// Top-k fractions measured.
const FRACTIONS: [f64; 3] = [0.001, 0.01, 0.05];
/// Decode limit: a block is 1 MiB.
const LIMIT: usize = 1 << 24;

#[derive(Serialize)]
struct Report {
    file: String,
    dtypes: Vec<String>,
    float_tensors: usize,
    blocks: usize,
    raw_bytes: u64,
    keyframe_bytes: u64,
    tiers: Vec<TierReport>,
}

#[derive(Serialize)]
struct TierReport {
    bits: u8,
    quant_bytes: u64,
    exact_bytes: u64,
    exact_hpdkv_bytes: Option<u64>,
    topk: Vec<TopkReport>,
}

#[derive(Serialize, Clone)]
struct TopkReport {
    fraction: f64,
    residual_dtype: String,
    entries: u64,
    blob_bytes: u64,
    rms_before: f64,
    rms_after: f64,
    max_abs_before: f64,
    max_abs_after: f64,
    max_rel_before: f64,
    max_rel_after: f64,
}

/// Error accumulators over a file.
#[derive(Default, Clone)]
struct Errors {
    sum_sq: f64,
    count: u64,
    max_abs: f64,
    max_rel: f64,
}

impl Errors {
    fn add(&mut self, x: &[f32], y: &[f32]) {
        for (gx, gy) in x.chunks(ERR_GROUP).zip(y.chunks(ERR_GROUP)) {
            let mut gmax = 0f64;
            let mut emax = 0f64;
            for (&a, &b) in gx.iter().zip(gy) {
                let e = (f64::from(a) - f64::from(b)).abs();
                self.sum_sq += e * e;
                emax = emax.max(e);
                gmax = gmax.max(f64::from(a).abs());
            }
            self.count += gx.len() as u64;
            self.max_abs = self.max_abs.max(emax);
            if gmax > 0.0 {
                self.max_rel = self.max_rel.max(emax / gmax);
            }
        }
    }

    fn rms(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            (self.sum_sq / self.count as f64).sqrt()
        }
    }
}

/// What one tier accumulates over the file.
struct TierAcc {
    quant: u64,
    exact: u64,
    /// `None` once a block is not fp16/bf16.
    exact_hp: Option<u64>,
    before: Errors,
    topk: Vec<TopkAcc>,
}

#[derive(Default, Clone)]
struct TopkAcc {
    entries: u64,
    blob_bytes: u64,
    after: Errors,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    if files.len() != 1 || args.iter().any(|a| a.starts_with("--") && a != "--json") {
        eprintln!("usage: residual-bench FILE.safetensors [--json]");
        return ExitCode::from(2);
    }
    match run(files[0]) {
        Ok(report) => {
            if json {
                match serde_json::to_string(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("residual-bench: {e}");
                        return ExitCode::from(1);
                    }
                }
            } else {
                print_table(&report);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("residual-bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(path: &str) -> Result<Report, BoxError> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let st = SafeTensors::deserialize(&bytes)?;
    let mut dtypes: Vec<String> = Vec::new();
    let mut float_tensors = 0;
    let mut blocks = 0;
    let mut raw_bytes = 0u64;
    let mut keyframe_bytes = 0u64;
    let opts = LosslessOptions::default();
    let mut tiers: Vec<TierAcc> = TIERS
        .iter()
        .map(|_| TierAcc {
            quant: 0,
            exact: 0,
            exact_hp: Some(0),
            before: Errors::default(),
            topk: vec![TopkAcc::default(); FRACTIONS.len() * 2],
        })
        .collect();

    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    for name in names {
        let view = st.tensor(&name)?;
        let Some(dtype) = DType::from_safetensors_name(&format!("{:?}", view.dtype())) else {
            continue;
        };
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            continue;
        }
        let name_of = dtype.to_string();
        if !dtypes.contains(&name_of) {
            dtypes.push(name_of);
        }
        float_tensors += 1;
        let half = match dtype {
            DType::F16 => Some(HalfDType::F16),
            DType::BF16 => Some(HalfDType::BF16),
            _ => None,
        };
        for block in view.data().chunks(BLOCK_BYTES) {
            blocks += 1;
            raw_bytes += block.len() as u64;
            keyframe_bytes += segment::encode_keyframe(dtype, block, &opts)?.len() as u64;
            let values = convert::to_f32(dtype, block)?;
            for (t, &bits) in TIERS.iter().enumerate() {
                let TierAcc {
                    quant,
                    exact,
                    exact_hp,
                    before,
                    topk,
                } = &mut tiers[t];
                let seg = segment::encode_quantized(dtype, &values, &QuantParams::new(bits))?;
                *quant += seg.len() as u64;
                let approx = Segment::parse(&seg)?.dequantize(LIMIT)?;
                let approx_bytes = residual::cast_to(dtype, &approx)?;
                let r = residual::exact_residual(dtype, block, &approx_bytes, &opts)?;
                if residual::apply_exact_residual(&r, &approx_bytes, LIMIT)? != block {
                    return Err(format!("{name}: exact residual did not rebuild the block").into());
                }
                *exact += r.len() as u64;
                *exact_hp = match (half, *exact_hp) {
                    (Some(h), Some(acc)) => Some(acc + xor_blob_len(h, block, &approx_bytes)?),
                    _ => None,
                };
                before.add(&values, &approx);
                let n = values.len();
                for (f, &frac) in FRACTIONS.iter().enumerate() {
                    let k = (frac * n as f64).ceil() as usize;
                    for (j, rd) in HalfDType::ALL.into_iter().enumerate() {
                        let acc = &mut topk[2 * f + j];
                        let blob = residual::topk_residual(&values, &approx, &[n as u32], k, rd)?;
                        acc.entries += blob.values.len() as u64;
                        let encoded = blob.encode(true)?;
                        acc.blob_bytes += encoded.len() as u64;
                        let mut fixed = approx.clone();
                        residual::apply_residual(&HpdkvView::parse(&encoded)?, &mut fixed)?;
                        acc.after.add(&values, &fixed);
                    }
                }
            }
        }
    }
    if float_tensors == 0 {
        return Err(format!("{path}: no f32, f16 or bf16 tensor").into());
    }
    let tiers = TIERS
        .iter()
        .zip(tiers)
        .map(|(&bits, acc)| TierReport {
            bits: bits.bits(),
            quant_bytes: acc.quant,
            exact_bytes: acc.exact,
            exact_hpdkv_bytes: acc.exact_hp,
            topk: acc
                .topk
                .iter()
                .enumerate()
                .map(|(i, k)| TopkReport {
                    fraction: FRACTIONS[i / 2],
                    residual_dtype: HalfDType::ALL[i % 2].dtype().to_string(),
                    entries: k.entries,
                    blob_bytes: k.blob_bytes,
                    rms_before: acc.before.rms(),
                    rms_after: k.after.rms(),
                    max_abs_before: acc.before.max_abs,
                    max_abs_after: k.after.max_abs,
                    max_rel_before: acc.before.max_rel,
                    max_rel_after: k.after.max_rel,
                })
                .collect(),
        })
        .collect();
    Ok(Report {
        file: path.rsplit('/').next().unwrap_or(path).to_string(),
        dtypes,
        float_tensors,
        blocks,
        raw_bytes,
        keyframe_bytes,
        tiers,
    })
}

/// Bytes of the XOR words of two 16-bit blocks as a dense zlib HPΔKV blob (the other way
/// to keep an exact residual); checked to decode back to the original.
fn xor_blob_len(dtype: HalfDType, block: &[u8], approx: &[u8]) -> Result<u64, BoxError> {
    let words = |b: &[u8]| -> Vec<u16> {
        b.chunks_exact(2)
            .map(|w| u16::from_le_bytes([w[0], w[1]]))
            .collect()
    };
    let (o, a) = (words(block), words(approx));
    let xor: Vec<u16> = o.iter().zip(&a).map(|(x, y)| x ^ y).collect();
    let blob = HpdkvBlob {
        dtype,
        shape: vec![u32::try_from(xor.len())?],
        indices: None,
        values: xor,
    }
    .encode(true)?;
    let back = HpdkvBlob::decode(&blob, LIMIT)?;
    if back.values.iter().zip(&a).map(|(x, y)| x ^ y).ne(o) {
        return Err("XOR HPΔKV blob did not rebuild the block".into());
    }
    Ok(blob.len() as u64)
}

fn print_table(r: &Report) {
    let raw = r.raw_bytes as f64;
    println!(
        "{}: {} float tensors ({}), {} blocks, {} raw bytes; lossless keyframes {} bytes ({:.3} of raw)",
        r.file,
        r.float_tensors,
        r.dtypes.join(", "),
        r.blocks,
        r.raw_bytes,
        r.keyframe_bytes,
        r.keyframe_bytes as f64 / raw
    );
    println!();
    println!("| bits | quantized / raw | exact residual / raw | quantized + exact / raw | exact as HPΔKV XOR zlib / raw |");
    println!("|---|---|---|---|---|");
    for t in &r.tiers {
        println!(
            "| {} | {:.4} | {:.4} | {:.4} | {} |",
            t.bits,
            t.quant_bytes as f64 / raw,
            t.exact_bytes as f64 / raw,
            (t.quant_bytes + t.exact_bytes) as f64 / raw,
            t.exact_hpdkv_bytes
                .map_or("-".to_string(), |b| format!("{:.4}", b as f64 / raw))
        );
    }
    println!();
    println!("| bits | k | residual | blob / raw | rms before | rms after | max abs before | max abs after | max rel before | max rel after |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for t in &r.tiers {
        for k in &t.topk {
            println!(
                "| {} | {:.1} % | {} | {:.4} | {:.3e} | {:.3e} | {:.3e} | {:.3e} | {:.4} | {:.4} |",
                t.bits,
                k.fraction * 100.0,
                k.residual_dtype,
                k.blob_bytes as f64 / raw,
                k.rms_before,
                k.rms_after,
                k.max_abs_before,
                k.max_abs_after,
                k.max_rel_before,
                k.max_rel_after
            );
        }
    }
}

//! `frame-bench`: a checkpoint series replayed as frame streams (ADR 0013).
//!
//! ```text
//! cargo run --release -p strata-codec --example frame-bench -- DIR [--drift D] [--json]
//! ```
//!
//! `DIR` holds `step_*.safetensors` files (a shared series, for example
//! `../shared/data/series/dev_ft`). Every float tensor becomes one stream, its versions in
//! step order its frames, pushed into a [`FrameStreamEncoder`] per tier (8, 7, 5, 3 bits;
//! groups of 64; drift `D`, default 0.1; at most 64 frames per segment). Reported per tier:
//!
//! - `frames`, `epochs` (segments written) and `reused` (frames that kept their epoch's
//!   scales);
//! - `frame_bytes`: all frame segments; `block_bytes`: the same frames quantized one by one
//!   with [`segment::encode_quantized`] (groups of 64, no two-level), for comparison;
//! - `max_rel_to_scale_max`: over every element of every frame, `|x - x̂| / scale_max` of
//!   its group (all-zero groups skipped), against `bound` = `(1 + d) / (2 qmax)`;
//! - `max_rel_to_frame_max`: the same relative to the group's max in that frame.
//!
//! Every frame is decoded on its own ([`FrameSegment::decode_frame`]). No timings.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use safetensors::SafeTensors;
use serde::Serialize;
use strata_codec::frames::{FrameParams, FramePush, FrameSegment, FrameStreamEncoder};
use strata_codec::quant::{QuantBits, QuantParams};
use strata_codec::segment;
use strata_codec::{convert, DType};

type BoxError = Box<dyn Error>;

const TIERS: [QuantBits; 4] = [QuantBits::B8, QuantBits::B7, QuantBits::B5, QuantBits::B3];
const GROUP: usize = 64;

#[derive(Serialize)]
struct Report {
    dir: String,
    steps: usize,
    streams: usize,
    drift: f32,
    raw_f32_bytes: u64,
    tiers: Vec<TierReport>,
}

#[derive(Serialize, Default)]
struct TierReport {
    bits: u8,
    frames: u64,
    epochs: u64,
    reused: u64,
    frame_bytes: u64,
    block_bytes: u64,
    max_rel_to_scale_max: f64,
    max_rel_to_frame_max: f64,
    bound: f64,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let mut drift = 0.1f32;
    let mut dir = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => {}
            "--drift" => match it.next().and_then(|d| d.parse().ok()) {
                Some(d) => drift = d,
                None => return usage(),
            },
            _ if a.starts_with("--") || dir.is_some() => return usage(),
            _ => dir = Some(PathBuf::from(a)),
        }
    }
    let Some(dir) = dir else {
        return usage();
    };
    match run(&dir, drift) {
        Ok(r) => {
            if json {
                match serde_json::to_string(&r) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("frame-bench: {e}");
                        return ExitCode::from(1);
                    }
                }
            } else {
                print_table(&r);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("frame-bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: frame-bench DIR [--drift D] [--json]");
    ExitCode::from(2)
}

/// A tensor's name and its values at every step, in step order.
type Stream = (String, Vec<Vec<f32>>);

/// The number of steps and every float tensor of every step, as f32.
fn load(dir: &PathBuf) -> Result<(usize, Vec<Stream>), BoxError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step_") && n.ends_with(".safetensors"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no step_*.safetensors in {}", dir.display()).into());
    }
    let mut streams: Vec<Stream> = Vec::new();
    for f in &files {
        let bytes = std::fs::read(f)?;
        let st = SafeTensors::deserialize(&bytes)?;
        let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
        names.sort();
        for name in names {
            let view = st.tensor(&name)?;
            let Some(dtype) = DType::from_safetensors_name(&format!("{:?}", view.dtype())) else {
                continue;
            };
            if !matches!(dtype, DType::F32 | DType::BF16) {
                continue;
            }
            let values = convert::to_f32(dtype, view.data())?;
            match streams.iter_mut().find(|(n, _)| *n == name) {
                Some((_, frames)) => frames.push(values),
                None => streams.push((name, vec![values])),
            }
        }
    }
    Ok((files.len(), streams))
}

fn run(dir: &PathBuf, drift: f32) -> Result<Report, BoxError> {
    let (steps, streams) = load(dir)?;
    let mut tiers = Vec::new();
    let mut raw = 0u64;
    for bits in TIERS {
        let params = FrameParams::new(bits).with_drift(drift);
        let mut t = TierReport {
            bits: bits.bits(),
            bound: params.relative_error_bound(),
            ..TierReport::default()
        };
        raw = 0;
        for (name, frames) in &streams {
            let n = frames[0].len();
            let mut enc = FrameStreamEncoder::new(DType::F32, n, params)?;
            // (segment number, index in it) of every frame.
            let mut placed = Vec::new();
            let mut segments: Vec<Vec<u8>> = Vec::new();
            for f in frames {
                if f.len() != n {
                    return Err(format!("{name}: shape changes between steps").into());
                }
                raw += 4 * n as u64;
                t.frames += 1;
                let block = segment::encode_quantized(
                    DType::F32,
                    f,
                    &QuantParams {
                        two_level: None,
                        ..QuantParams::new(bits)
                    },
                )?;
                t.block_bytes += block.len() as u64;
                match enc.push(f)? {
                    FramePush::Reused { frame } => {
                        t.reused += 1;
                        placed.push((segments.len(), frame));
                    }
                    FramePush::NewEpoch { sealed, .. } => {
                        segments.extend(sealed);
                        placed.push((segments.len(), 0));
                    }
                }
            }
            segments.extend(enc.finish());
            t.epochs += segments.len() as u64;
            t.frame_bytes += segments.iter().map(|s| s.len() as u64).sum::<u64>();
            for (f, &(s, i)) in frames.iter().zip(&placed) {
                let seg = FrameSegment::parse(&segments[s])?;
                let got = seg.decode_frame(i, usize::MAX)?;
                for ((gx, gy), &sm) in f.chunks(GROUP).zip(got.chunks(GROUP)).zip(seg.scale_max()) {
                    let fm = gx.iter().fold(0f64, |m, x| m.max(f64::from(x.abs())));
                    let e = gx.iter().zip(gy).fold(0f64, |m, (a, b)| {
                        m.max((f64::from(*a) - f64::from(*b)).abs())
                    });
                    if sm > 0.0 {
                        t.max_rel_to_scale_max = t.max_rel_to_scale_max.max(e / f64::from(sm));
                    }
                    if fm > 0.0 {
                        t.max_rel_to_frame_max = t.max_rel_to_frame_max.max(e / fm);
                    }
                }
            }
        }
        tiers.push(t);
    }
    Ok(Report {
        dir: dir.display().to_string(),
        steps,
        streams: streams.len(),
        drift,
        raw_f32_bytes: raw,
        tiers,
    })
}

fn print_table(r: &Report) {
    println!(
        "{}: {} steps, {} streams, drift {}, {} bytes of f32 frames",
        r.dir, r.steps, r.streams, r.drift, r.raw_f32_bytes
    );
    println!();
    println!("| bits | frames | epochs | reused | frame segments / raw f32 | one segment per frame / raw f32 | max err / scale_max | bound (1+d)/(2 qmax) | max err / frame max |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let raw = r.raw_f32_bytes as f64;
    for t in &r.tiers {
        println!(
            "| {} | {} | {} | {} | {:.4} | {:.4} | {:.6} | {:.6} | {:.6} |",
            t.bits,
            t.frames,
            t.epochs,
            t.reused,
            t.frame_bytes as f64 / raw,
            t.block_bytes as f64 / raw,
            t.max_rel_to_scale_max,
            t.bound,
            t.max_rel_to_frame_max
        );
    }
}

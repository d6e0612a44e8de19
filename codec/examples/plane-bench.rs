//! `plane-bench`: one-thread lossless encode and decode of keyframes and chain deltas on
//! real checkpoints, with what the encoder chose per plane.
//!
//! ```text
//! cargo run --release -p strata-codec --example plane-bench -- [--reps N] [--encode-reps N] [--min-gain F] [--planes] [--json] SET...
//! ```
//!
//! A SET is `key:FILE.safetensors` (every tensor cut into 1 MiB blocks, each a keyframe;
//! F32 tensors are cast to bf16 first with `key-bf16:FILE`), or `delta:DIR` (a folder of
//! `step_N.safetensors`: each step's tensors, cut into 1 MiB blocks, encoded as XOR deltas
//! against the same block of the step before, as a store's chain deltas are; the first step
//! is not counted). Every figure is one thread; a timing is the median of `--reps` (default
//! 7) runs over the whole set (`--encode-reps`: encode that many times instead, for
//! profiling the decoder), MB/s is raw bytes / 1e6 / seconds, and the brackets give the
//! slowest and fastest run. Every decode is compared with the input. `--planes` adds what
//! the encoder chose for each plane: method, count, bytes, bits per symbol.
//!
//! The sets of ADR 0019 (run from the workspace):
//!
//! ```text
//! plane-bench key-bf16:../cache/minilm/all-MiniLM-L6-v2.safetensors \
//!   delta:../shared/data/series/dev_ft/bf16 delta:../shared/data/series/dev_pre/bf16 \
//!   delta:../shared/data/series/dev_ft delta:../shared/data/series/dev_pre
//! ```

use std::collections::BTreeMap;
use std::error::Error;
use std::time::Instant;

use strata_codec::lossless::{self, LosslessOptions};
use strata_codec::segment::{self, Segment};

#[path = "common/sets.rs"]
mod sets;
use sets::{set_blocks, Block};

type BoxError = Box<dyn Error>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), BoxError> {
    let mut reps = 7;
    let mut show_planes = false;
    let mut json = false;
    let mut enc_reps = None;
    let mut opts = LosslessOptions::default();
    let mut sets = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().ok_or("--reps N")?.parse()?,
            "--planes" => show_planes = true,
            "--json" => json = true,
            // Profiling: encode this many times only, then decode `--reps` times.
            "--encode-reps" => enc_reps = Some(args.next().ok_or("--encode-reps N")?.parse()?),
            // The encoder's `min_gain`: planes that coding would shrink by less are stored raw.
            "--min-gain" => opts.min_gain = args.next().ok_or("--min-gain F")?.parse()?,
            _ => sets.push(a),
        }
    }
    for spec in &sets {
        let blocks = set_blocks(spec)?;
        let raw: usize = blocks.iter().map(|b| b.data.len()).sum();
        let encode = |b: &Block| match &b.base {
            Some(base) => segment::encode_delta(b.dtype, &b.data, base, &opts),
            None => segment::encode_keyframe(b.dtype, &b.data, &opts),
        };
        let mut segs = Vec::new();
        let mut enc_t = Vec::new();
        for _ in 0..enc_reps.unwrap_or(reps) {
            let t = Instant::now();
            segs = blocks.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
            enc_t.push(t.elapsed().as_secs_f64());
        }
        let mut outs: Vec<Vec<u8>> = blocks.iter().map(|b| vec![0; b.data.len()]).collect();
        let mut dec_t = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            for ((s, b), o) in segs.iter().zip(&blocks).zip(outs.iter_mut()) {
                Segment::parse(s)?.decode_lossless_into(b.base.as_deref(), o)?;
            }
            dec_t.push(t.elapsed().as_secs_f64());
        }
        for (b, o) in blocks.iter().zip(&outs) {
            if &b.data != o {
                return Err(format!("{spec}: round trip differs").into());
            }
        }
        let stored: usize = segs.iter().map(Vec::len).sum();
        let (te, td) = (median(enc_t.clone()), median(dec_t.clone()));
        let spread = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            (raw as f64 / 1e6 / hi, raw as f64 / 1e6 / lo)
        };
        let (elo, ehi) = spread(&enc_t);
        let (dlo, dhi) = spread(&dec_t);
        if json {
            println!(
                "{{\"set\":\"{spec}\",\"blocks\":{},\"raw\":{raw},\"stored\":{stored},\"ratio\":{:.5},\"encode_mbps\":{:.1},\"decode_mbps\":{:.1}}}",
                blocks.len(),
                raw as f64 / stored as f64,
                raw as f64 / 1e6 / te,
                raw as f64 / 1e6 / td
            );
        } else {
            println!(
                "{spec}: {} blocks, raw {raw}, stored {stored}, ratio {:.5}, encode {:.1} MB/s [{elo:.0}-{ehi:.0}], decode {:.1} MB/s [{dlo:.0}-{dhi:.0}]",
                blocks.len(),
                raw as f64 / stored as f64,
                raw as f64 / 1e6 / te,
                raw as f64 / 1e6 / td
            );
        }
        if show_planes {
            // Per plane index and method: count and stored bytes.
            let mut by: BTreeMap<(usize, String), (usize, usize, usize)> = BTreeMap::new();
            for b in &blocks {
                let mut out = Vec::new();
                let st = lossless::encode(b.dtype, &b.data, b.base.as_deref(), &opts, &mut out)?;
                let n = b.data.len() / b.dtype.size();
                for (k, &(m, bytes)) in st.planes.iter().enumerate() {
                    let e = by
                        .entry((k, format!("{:?}/{}", m, b.dtype)))
                        .or_insert((0, 0, 0));
                    e.0 += 1;
                    e.1 += bytes;
                    e.2 += n;
                }
            }
            for ((k, m), (count, bytes, n)) in by {
                println!(
                    "  plane {k} {m:<28} {count:>5} planes, {bytes:>10} bytes, {n:>10} symbols, {:.3} bits/symbol",
                    bytes as f64 * 8.0 / n as f64
                );
            }
        }
    }
    Ok(())
}

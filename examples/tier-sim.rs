//! tier-sim: Zipf reads over blocks of real weights in a tiered store.
//!
//! N blocks of 4096 f32 values (16 KiB) cut from the real checkpoints of
//! `../shared/data/series/dev_ft` (else the committed `testdata/series/dev_ft`; cycled when N
//! asks for more) are written to a fresh store
//! under a tiered policy starting at 8 bits, 64 blocks per tensor. Then Zipf(s = 1.2) reads,
//! one block each (`get_range`), one every `--tick-ms` of injected time, with
//! `store.maintain(now)` every `--maintain-every` reads under a `warm_byte_cap` of
//! `--cap-pct` percent of the data at 8 bits. Prints what happened: warm bytes after each
//! pass against the cap, tier flips per block, bytes per tier on disk, read latency, and the
//! error of what reads returned, per tier of precision.
//!
//! ```text
//! cargo run --release --example tier-sim -- [--blocks N] [--accesses N] [--json]
//!     [--tick-ms MS] [--maintain-every N] [--cap-pct P] [--seed N] [--data DIR]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use strata::codec::convert;
use strata::codec::testing::SplitMix64;
use strata::store::{
    Budget, Clock, DType, Fidelity, Options, Store, TensorRef, Tier, TierConfig, TierOptions,
    TierPolicy,
};

const VALUES: usize = 4096;
const BLOCKS_PER_TENSOR: usize = 64;
const ZIPF_S: f64 = 1.2;
/// Every n-th read is compared with the original data.
const ERROR_SAMPLE: usize = 16;

#[derive(Debug)]
struct Args {
    blocks: usize,
    accesses: usize,
    json: bool,
    tick_ms: u64,
    maintain_every: usize,
    cap_pct: f64,
    seed: u64,
    data: PathBuf,
}

/// `../shared/data/series/dev_ft` beside the repository, else the committed cut of it
/// (`testdata/series/dev_ft`, five checkpoints of five tensors).
fn default_data() -> PathBuf {
    let shared = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/series/dev_ft"
    ));
    if shared.is_dir() {
        shared
    } else {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/series/dev_ft"
        ))
    }
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        blocks: 100_000,
        accesses: 1_000_000,
        json: false,
        tick_ms: 10,
        maintain_every: 10_000,
        cap_pct: 10.0,
        seed: 1,
        data: default_data(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            a.json = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--blocks" => a.blocks = num()? as usize,
            "--accesses" => a.accesses = num()? as usize,
            "--tick-ms" => a.tick_ms = num()?,
            "--maintain-every" => a.maintain_every = num()?.max(1) as usize,
            "--cap-pct" => {
                a.cap_pct = value
                    .parse::<f64>()
                    .map_err(|e| format!("{flag} {value}: {e}"))?
            }
            "--seed" => a.seed = num()?,
            "--data" => a.data = PathBuf::from(&value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.blocks == 0 {
        return Err("--blocks must be at least 1".into());
    }
    Ok(a)
}

/// Zipf(s) over ranks `0..n` by inverse CDF.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|r| {
                acc += (r as f64).powf(-s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Self { cdf }
    }

    fn sample(&self, rng: &mut SplitMix64) -> usize {
        let u = rng.next_f64();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Every f32 value of every checkpoint in `dir`, in file and tensor order.
fn real_values(dir: &PathBuf) -> Result<Vec<f32>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| format!("{}: {e}", f.display()))?;
        let mut names: Vec<_> = st.names().into_iter().map(str::to_string).collect();
        names.sort();
        for n in names {
            let t = st.tensor(&n).map_err(|e| format!("{n}: {e}"))?;
            if t.dtype() == safetensors::Dtype::F32 {
                out.extend(convert::to_f32(DType::F32, t.data()).map_err(|e| e.to_string())?);
            }
        }
    }
    if out.len() < VALUES {
        return Err(format!("no f32 weights in {}", dir.display()));
    }
    Ok(out)
}

/// The values of block `b`: a window of the real values, cycled.
fn block_values(pool: &[f32], b: usize) -> Vec<f32> {
    let windows = pool.len() / VALUES;
    let start = (b % windows) * VALUES;
    pool[start..start + VALUES].to_vec()
}

/// max |x - y| / max |x| over groups of 64, averaged over the groups.
fn mean_rel_err(x: &[f32], y: &[f32]) -> f64 {
    let mut sum = 0.0;
    let mut n = 0;
    for (gx, gy) in x.chunks(64).zip(y.chunks(64)) {
        let max = gx.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
        if max == 0.0 {
            continue;
        }
        let err = gx
            .iter()
            .zip(gy)
            .fold(0f64, |m, (a, b)| m.max((a - b).abs() as f64));
        sum += err / max;
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

fn precision_name(f: Fidelity) -> &'static str {
    match f {
        Fidelity::Exact => "exact",
        Fidelity::Aged { .. } => "aged",
        Fidelity::Bounded { bits: 8, .. } => "hot8",
        Fidelity::Bounded { bits: 7, .. } => "warm7",
        Fidelity::Bounded { bits: 5, .. } => "warm5",
        Fidelity::Bounded { .. } => "cold3",
        Fidelity::Reconstructed { .. } => "reconstructed",
        Fidelity::Zeros => "absent",
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tier-sim: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tier-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let pool = real_values(&a.data)?;
    let dir = tempfile::tempdir()?;
    let hot_bytes = Tier::Hot8.block_bytes(VALUES as u32, 64);
    let cap = (a.blocks as f64 * hot_bytes as f64 * a.cap_pct / 100.0) as u64;
    let (clock, time) = Clock::manual(0);
    let opts = Options {
        block_bytes: (VALUES * 4) as u64,
        cache_bytes: 0,
        tiering: TierOptions {
            config: TierConfig {
                warm_byte_cap: cap,
                allow_zero_fill: true,
                ..TierConfig::default()
            },
            budget: Budget::new(1 << 30, 100_000),
            clock,
            ..TierOptions::default()
        },
        ..Options::default()
    };
    let store = Store::open_with(dir.path().join("sim.strata"), opts)?;
    store.set_policy("sim.*", TierPolicy::tiered(Tier::Hot8))?;

    // Write: 64 blocks per tensor, many tensors per transaction.
    let t0 = Instant::now();
    let tensors = a.blocks.div_ceil(BLOCKS_PER_TENSOR);
    let shape_of = |t: usize| {
        let blocks = BLOCKS_PER_TENSOR.min(a.blocks - t * BLOCKS_PER_TENSOR);
        [(blocks * VALUES) as u64]
    };
    for chunk in (0..tensors).collect::<Vec<_>>().chunks(64) {
        let data: Vec<(String, [u64; 1], Vec<u8>)> = chunk
            .iter()
            .map(|&t| {
                let shape = shape_of(t);
                let blocks = shape[0] as usize / VALUES;
                let values: Vec<f32> = (0..blocks)
                    .flat_map(|i| block_values(&pool, t * BLOCKS_PER_TENSOR + i))
                    .collect();
                // F32 is a float dtype: the conversion cannot fail.
                let bytes = convert::from_f32(DType::F32, &values).unwrap_or_default();
                (format!("sim.{t}"), shape, bytes)
            })
            .collect();
        for (name, shape, bytes) in &data {
            let t = TensorRef {
                dtype: DType::F32,
                shape,
                bytes,
            };
            store.put(name, 0, &t)?;
        }
    }
    let write_s = t0.elapsed().as_secs_f64();

    let mut rng = SplitMix64::new(a.seed);
    let mut perm: Vec<usize> = (0..a.blocks).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let zipf = Zipf::new(a.blocks, ZIPF_S);
    let mut read_us = Vec::with_capacity(a.accesses);
    let mut err_sum: BTreeMap<&'static str, (f64, u64)> = BTreeMap::new();
    let mut max_warm_after = 0u64;
    let mut violations = 0u32;
    let mut passes = 0u32;
    let mut maintain_ms = Vec::new();
    let mut now = 0u64;
    for i in 0..a.accesses {
        let b = perm[zipf.sample(&mut rng)];
        let (t, j) = (b / BLOCKS_PER_TENSOR, b % BLOCKS_PER_TENSOR);
        let name = format!("sim.{t}");
        let range = (j * VALUES) as u64..((j + 1) * VALUES) as u64;
        now += a.tick_ms;
        time.set(now);
        let t0 = Instant::now();
        let slice = store.get_range(&name, 0, range)?;
        read_us.push(t0.elapsed().as_secs_f64() * 1e6);
        if i % ERROR_SAMPLE == 0 {
            let got = convert::to_f32(DType::F32, &slice.data)?;
            let e = mean_rel_err(&block_values(&pool, b), &got);
            let entry = err_sum.entry(precision_name(slice.fidelity)).or_default();
            entry.0 += e;
            entry.1 += 1;
        }
        if (i + 1) % a.maintain_every == 0 || i + 1 == a.accesses {
            let t0 = Instant::now();
            let report = store.maintain(now)?;
            maintain_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            passes += 1;
            max_warm_after = max_warm_after.max(report.warm_bytes_after);
            if report.warm_bytes_after > cap {
                violations += 1;
            }
        }
    }
    read_us.sort_by(f64::total_cmp);
    maintain_ms.sort_by(f64::total_cmp);
    let ts = store.tier_stats();
    let stats = store.stats()?;
    let flips_per_block = ts.flips as f64 / a.blocks as f64;
    let mean_err: BTreeMap<&str, f64> = err_sum
        .iter()
        .map(|(k, (s, n))| (*k, s / (*n).max(1) as f64))
        .collect();
    let out = serde_json::json!({
        "blocks": a.blocks,
        "accesses": a.accesses,
        "warm_byte_cap": cap,
        "max_warm_bytes_after_maintain": max_warm_after,
        "cap_violations": violations,
        "maintain_passes": passes,
        "tier_flips_per_block": flips_per_block,
        "moves": ts.moves,
        "bytes_by_tier": stats.tier_bytes,
        "p50_read_us": percentile(&read_us, 0.5),
        "p95_read_us": percentile(&read_us, 0.95),
        "mean_rel_err_by_tier": mean_err,
        "maintain_ms_p50": percentile(&maintain_ms, 0.5),
        "maintain_ms_max": maintain_ms.last().copied().unwrap_or(0.0),
        "write_s": write_s,
        "file_bytes": stats.file_bytes,
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

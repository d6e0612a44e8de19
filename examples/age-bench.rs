//! age-bench: lossy aging of checkpoint series ([`Store::age`], issue 15, ADR 0020), for the
//! README "Aging" table.
//!
//! ```text
//! cargo run --release --example age-bench -- [--series DIR]... [--budgets 1e-3,3e-3,1e-2,3e-2]
//!     [--keep-exact-last 2] [--synthetic MB] [--json]
//! ```
//!
//! Each series (a folder of `step_NNNNNN.safetensors`; default: the shared series
//! `../shared/data/series/{dev_ft,dev_pre}/bf16` when present, else the committed ones) is
//! imported into a temporary store, one checkpoint per file, and compacted: the lossless
//! history. Then, for each budget, a copy of that store is aged (`keep_exact_last`, the
//! default rules: tensors of fewer than two dimensions exact) and measured:
//!
//! - stored and file bytes before and after, and the whole-series ratio (raw bytes of every
//!   checkpoint over file bytes, and over stored bytes);
//! - the aged checkpoints alone: raw bytes over the bytes of their versions (records and the
//!   segments they hold), against the same versions' bytes in the lossless history;
//! - the exact checkpoints' bytes (what bounds the whole-series ratio: they stay lossless);
//! - every tensor of every aged checkpoint read back and compared with the file: the worst
//!   and median relative Frobenius error, and the worst reported [`Fidelity::Aged`] error;
//! - the wall time of `age`, and of reading the oldest aged checkpoint back.
//!
//! `--synthetic MB` (default 20) also generates 20 checkpoints of MB megabytes of bf16
//! (10 tensors of normal values at the scale of trained weights, each checkpoint the last
//! plus a fine-tuning step of noise), saves them, and times `age` at a 1e-2 budget: the
//! issue's "20 checkpoints of 20 MB in under 10 s on 2 cores". `--synthetic 0` skips it.
//!
//! The peak RSS of the process (VmHWM) is read at the end. `--json` prints one JSON document
//! with every figure and the machine; without it, a table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{json, Value};
use strata::codec::convert::to_f32;
use strata::codec::testing::SplitMix64;
use strata::codec::DType;
use strata::store::safetensors::SafeTensors;
use strata::store::{AgePolicy, Fidelity, Store, TensorRef};
use strata_testkit::machine::{machine, peak_rss};
use strata_testkit::series::{list_step_files, series_root};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    series: Vec<PathBuf>,
    budgets: Vec<f64>,
    keep_exact_last: usize,
    synthetic_mb: usize,
    json: bool,
}

const USAGE: &str = "usage: age-bench [--series DIR]... [--budgets E,E,...] [--keep-exact-last N] [--synthetic MB] [--json]";

fn parse_args() -> Res<Args> {
    let mut a = Args {
        series: Vec::new(),
        budgets: vec![1e-3, 3e-3, 1e-2, 3e-2],
        keep_exact_last: 2,
        synthetic_mb: 20,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--series" => a.series.push(PathBuf::from(value("a folder")?)),
            "--budgets" => {
                a.budgets = value("errors")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--keep-exact-last" => a.keep_exact_last = value("a count")?.parse()?,
            "--synthetic" => a.synthetic_mb = value("megabytes")?.parse()?,
            "--json" => a.json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    if a.series.is_empty() {
        let base = series_root();
        a.series = vec![base.join("dev_ft/bf16"), base.join("dev_pre/bf16")];
    }
    Ok(a)
}

/// The checkpoint files of a series folder, in step order.
fn checkpoints(dir: &Path) -> Res<Vec<(u64, PathBuf)>> {
    let out = list_step_files(dir)?;
    if out.len() < 3 {
        return Err(format!("{}: fewer than 3 checkpoints", dir.display()).into());
    }
    Ok(out)
}

/// Raw bytes of the versions of the checkpoints at `steps`, and their stored bytes: records
/// and the segments they hold.
fn version_bytes(store: &Store, steps: &[u64]) -> Res<(u64, u64)> {
    let (mut raw, mut stored) = (0, 0);
    for name in store.tensors()? {
        for v in store.versions(&name)? {
            if steps.contains(&v.step) {
                raw += v.raw_bytes;
                stored += v.stored_bytes;
            }
        }
    }
    Ok((raw, stored))
}

/// Relative Frobenius error (byte equality for dtypes that are not floats).
fn rel_error(dtype: DType, got: &[u8], want: &[u8]) -> f64 {
    match (to_f32(dtype, got), to_f32(dtype, want)) {
        (Ok(a), Ok(b)) => strata_testkit::noise::rel_error(&a, &b),
        _ if got == want => 0.0,
        _ => f64::INFINITY,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One series aged at each budget.
fn bench_series(dir: &Path, args: &Args) -> Res<Value> {
    let cps = checkpoints(dir)?;
    let tmp = tempfile::tempdir()?;
    let base = tmp.path().join("lossless.strata");
    {
        let mut store = Store::open(&base)?;
        for (step, path) in &cps {
            store.import_safetensors(path, *step)?;
        }
        store.compact()?;
    }
    let steps: Vec<u64> = cps.iter().map(|(s, _)| *s).collect();
    let n_exact = args.keep_exact_last.min(steps.len());
    let aged_steps = &steps[..steps.len() - n_exact];
    let exact_steps = &steps[steps.len() - n_exact..];
    let (lossless, (raw_aged, lossless_aged_bytes), (_, lossless_exact_bytes)) = {
        let store = Store::open(&base)?;
        (
            store.stats()?,
            version_bytes(&store, aged_steps)?,
            version_bytes(&store, exact_steps)?,
        )
    };
    let raw_total = lossless.raw_bytes;
    let mut runs = Vec::new();
    for &budget in &args.budgets {
        let path = tmp.path().join("aged.strata");
        std::fs::copy(&base, &path)?;
        let mut store = Store::open(&path)?;
        let t0 = Instant::now();
        let report = store.age(&AgePolicy {
            keep_exact_last: args.keep_exact_last,
            budget,
            ..AgePolicy::default()
        })?;
        let age_s = t0.elapsed().as_secs_f64();
        let stats = store.stats()?;
        let (_, aged_bytes) = version_bytes(&store, aged_steps)?;
        let (_, exact_bytes) = version_bytes(&store, exact_steps)?;
        let t0 = Instant::now();
        store.load_checkpoint(steps[0])?;
        let read_oldest_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut errors = Vec::new();
        let mut worst_reported = 0f64;
        for (step, file) in &cps[..aged_steps.len()] {
            let bytes = std::fs::read(file)?;
            let st = SafeTensors::deserialize(&bytes)?;
            for (name, view) in st.tensors() {
                let got = store.get(&name, *step)?;
                if let Fidelity::Aged {
                    rel_error: reported,
                } = got.fidelity
                {
                    worst_reported = worst_reported.max(reported);
                    errors.push(rel_error(got.dtype, &got.data, view.data()));
                }
            }
        }
        let worst = errors.iter().copied().fold(0.0, f64::max);
        runs.push(json!({
            "budget": budget,
            "age_s": age_s,
            "aged_checkpoints": report.aged.len(),
            "versions_aged": report.versions_aged,
            "versions_exact": report.versions_exact,
            "blocks_unmet": report.blocks_unmet,
            "stored_bytes": stats.stored_bytes,
            "file_bytes": stats.file_bytes,
            "file_bytes_before": report.file_bytes_before,
            "ratio_file": raw_total as f64 / stats.file_bytes as f64,
            "ratio_stored": raw_total as f64 / stats.stored_bytes as f64,
            "aged_bytes": aged_bytes,
            "aged_ratio": raw_aged as f64 / aged_bytes.max(1) as f64,
            "exact_bytes": exact_bytes,
            "tensor_rel_error_max": worst,
            "tensor_rel_error_median": median(errors),
            "reported_rel_error_max": worst_reported,
            "read_oldest_ms": read_oldest_ms,
        }));
    }
    Ok(json!({
        "series": dir.display().to_string(),
        "checkpoints": steps.len(),
        "keep_exact_last": args.keep_exact_last,
        "raw_bytes": raw_total,
        "lossless": {
            "stored_bytes": lossless.stored_bytes,
            "file_bytes": lossless.file_bytes,
            "ratio_file": raw_total as f64 / lossless.file_bytes as f64,
            "aged_bytes": lossless_aged_bytes,
            "aged_ratio": raw_aged as f64 / lossless_aged_bytes.max(1) as f64,
            "exact_bytes": lossless_exact_bytes,
        },
        "runs": runs,
    }))
}

/// 20 generated checkpoints of `mb` megabytes of bf16, aged at a 1e-2 budget.
fn bench_synthetic(mb: usize, keep_exact_last: usize) -> Res<Value> {
    const TENSORS: usize = 10;
    const CHECKPOINTS: u64 = 20;
    let elems = mb * (1 << 20) / 2 / TENSORS;
    let cols = 1024usize;
    let rows = elems / cols;
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("synthetic.strata");
    let mut store = Store::open(&path)?;
    let mut rng = SplitMix64::new(20);
    let mut weights: Vec<Vec<f32>> = (0..TENSORS)
        .map(|_| {
            (0..rows * cols)
                .map(|_| 0.02 * rng.normal() as f32)
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..TENSORS).map(|i| format!("layers.{i}.weight")).collect();
    let shape = [rows as u64, cols as u64];
    for step in 0..CHECKPOINTS {
        for w in &mut weights {
            for x in w.iter_mut() {
                *x += 2e-4 * rng.normal() as f32;
            }
        }
        let bytes: Vec<Vec<u8>> = weights
            .iter()
            .map(|w| strata::codec::convert::from_f32(DType::BF16, w))
            .collect::<Result<_, _>>()?;
        let tensors: Vec<(&str, TensorRef<'_>)> = names
            .iter()
            .zip(&bytes)
            .map(|(n, b)| {
                (
                    n.as_str(),
                    TensorRef {
                        dtype: DType::BF16,
                        shape: &shape,
                        bytes: b,
                    },
                )
            })
            .collect();
        store.save_checkpoint(step * 100, &tensors, "{}")?;
    }
    store.compact()?;
    let before = store.stats()?;
    let t0 = Instant::now();
    let report = store.age(&AgePolicy {
        keep_exact_last,
        budget: 1e-2,
        ..AgePolicy::default()
    })?;
    let age_s = t0.elapsed().as_secs_f64();
    let after = store.stats()?;
    Ok(json!({
        "checkpoints": CHECKPOINTS,
        "checkpoint_bytes": before.raw_bytes / CHECKPOINTS,
        "budget": 1e-2,
        "age_s": age_s,
        "versions_aged": report.versions_aged,
        "stored_bytes_before": before.stored_bytes,
        "stored_bytes_after": after.stored_bytes,
        "ratio_before": before.raw_bytes as f64 / before.stored_bytes as f64,
        "ratio_after": after.raw_bytes as f64 / after.stored_bytes as f64,
        "target_s": 10.0,
    }))
}

fn print_table(doc: &Value) {
    for s in doc["series"].as_array().into_iter().flatten() {
        let l = &s["lossless"];
        println!(
            "{} ({} checkpoints, last {} exact): lossless ratio {:.2} (aged part {:.2})",
            s["series"].as_str().unwrap_or("?"),
            s["checkpoints"],
            s["keep_exact_last"],
            l["ratio_file"].as_f64().unwrap_or(0.0),
            l["aged_ratio"].as_f64().unwrap_or(0.0),
        );
        println!("  budget    ratio  aged part  worst err  median err  age s  oldest read ms");
        for r in s["runs"].as_array().into_iter().flatten() {
            println!(
                "  {:<8.0e} {:>6.2} {:>10.2} {:>10.2e} {:>11.2e} {:>6.2} {:>15.1}",
                r["budget"].as_f64().unwrap_or(0.0),
                r["ratio_file"].as_f64().unwrap_or(0.0),
                r["aged_ratio"].as_f64().unwrap_or(0.0),
                r["tensor_rel_error_max"].as_f64().unwrap_or(0.0),
                r["tensor_rel_error_median"].as_f64().unwrap_or(0.0),
                r["age_s"].as_f64().unwrap_or(0.0),
                r["read_oldest_ms"].as_f64().unwrap_or(0.0),
            );
        }
    }
    if let Some(s) = doc.get("synthetic").filter(|s| !s.is_null()) {
        println!(
            "synthetic: {} checkpoints of {} bytes aged in {:.2} s (target 10 s), ratio {:.2} -> {:.2}",
            s["checkpoints"],
            s["checkpoint_bytes"],
            s["age_s"].as_f64().unwrap_or(0.0),
            s["ratio_before"].as_f64().unwrap_or(0.0),
            s["ratio_after"].as_f64().unwrap_or(0.0),
        );
    }
}

fn run() -> Res<()> {
    let args = parse_args()?;
    let series = args
        .series
        .iter()
        .map(|d| bench_series(d, &args))
        .collect::<Res<Vec<_>>>()?;
    let synthetic = if args.synthetic_mb > 0 {
        bench_synthetic(args.synthetic_mb, args.keep_exact_last)?
    } else {
        Value::Null
    };
    let doc = json!({
        "machine": machine(),
        "series": series,
        "synthetic": synthetic,
        "peak_rss_bytes": peak_rss(),
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_table(&doc);
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("age-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

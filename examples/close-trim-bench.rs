//! close-trim-bench: what the trim a writer's close does costs, and what it leaves (issue 29
//! item 7, ADR 0028).
//!
//! ```text
//! cargo run --release --example close-trim-bench -- [--state-mb 12] [--checkpoints 20]
//!     [--import-mb 500] [--rounds 3] [--json]
//! ```
//!
//! Three ways a store is written, each run `--rounds` times with the trim on and off
//! ([`Options::trim_on_close`]) alternating, in a fresh temporary store, medians reported:
//!
//! - **one handle**: a training loop's state (weights and AdamW's two moments, 12 tensors,
//!   `--state-mb` MB of f32 in all, drifting a little each save) saved `--checkpoints` times
//!   through one handle, then closed;
//! - **a handle per save**: the same saves, each opening and closing the store (what
//!   `strata.torch.save_file` does);
//! - **import**: a bf16 checkpoint of `--import-mb` MB imported into a fresh store and closed,
//!   then its fine-tuned successor imported and closed (two `strata import` runs).
//!
//! For each: seconds writing, seconds closing (the trim, when it runs, is in the close), and
//! the file's length and bytes on disk after the last close (`ls -l` and `du`). `--json`
//! prints one JSON document with the machine; without it, a table.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{json, Value};
use strata::store::safetensors::tensor::{serialize, TensorView};
use strata::store::{Options, Store};
use strata_testkit::machine::machine;
use strata_testkit::noise::Rng;

#[path = "common/drift.rs"]
mod drift;
use drift::Drifting;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "usage: close-trim-bench [--state-mb MB] [--checkpoints N] [--import-mb MB] [--rounds N] [--json]";

struct Args {
    state_mb: usize,
    checkpoints: u64,
    import_mb: usize,
    rounds: usize,
    json: bool,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        state_mb: 12,
        checkpoints: 20,
        import_mb: 500,
        rounds: 3,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--state-mb" => a.state_mb = value()?.parse()?,
            "--checkpoints" => a.checkpoints = value()?.parse()?,
            "--import-mb" => a.import_mb = value()?.parse()?,
            "--rounds" => a.rounds = value()?.parse()?,
            "--json" => a.json = true,
            _ => return Err(format!("unknown argument {arg}\n{USAGE}").into()),
        }
    }
    if a.state_mb == 0 || a.checkpoints == 0 || a.import_mb == 0 || a.rounds == 0 {
        return Err(format!("sizes and counts must be at least 1\n{USAGE}").into());
    }
    Ok(a)
}

/// What one way of writing measured in one round.
#[derive(Clone, Copy)]
struct Run {
    write_s: f64,
    close_s: f64,
    file_bytes: u64,
    disk_bytes: u64,
    /// The largest `length / bytes on disk` seen after any close of the round.
    worst_after_close: f64,
}

fn sizes(path: &Path) -> Res<(u64, u64)> {
    let m = std::fs::metadata(path)?;
    Ok((m.len(), m.blocks() * 512))
}

fn opts(trim: bool) -> Options {
    Options {
        trim_on_close: trim,
        ..Options::default()
    }
}

fn one_handle(a: &Args, trim: bool) -> Res<Run> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("run.strata");
    let mut state = Drifting::training_state(a.state_mb);
    let t = Instant::now();
    let store = Store::open_with(&path, opts(trim))?;
    for _ in 0..a.checkpoints {
        state.advance();
        state.save(&store)?;
    }
    let write_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    drop(store);
    let close_s = t.elapsed().as_secs_f64();
    let (file_bytes, disk_bytes) = sizes(&path)?;
    Ok(Run {
        write_s,
        close_s,
        file_bytes,
        disk_bytes,
        worst_after_close: file_bytes as f64 / disk_bytes as f64,
    })
}

fn handle_per_save(a: &Args, trim: bool) -> Res<Run> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("run.strata");
    let mut state = Drifting::training_state(a.state_mb);
    let (mut write_s, mut close_s, mut worst) = (0.0, 0.0, 0.0f64);
    for _ in 0..a.checkpoints {
        state.advance();
        let t = Instant::now();
        let store = Store::open_with(&path, opts(trim))?;
        state.save(&store)?;
        write_s += t.elapsed().as_secs_f64();
        let t = Instant::now();
        drop(store);
        close_s += t.elapsed().as_secs_f64();
        let (len, disk) = sizes(&path)?;
        worst = worst.max(len as f64 / disk as f64);
    }
    let (file_bytes, disk_bytes) = sizes(&path)?;
    Ok(Run {
        write_s,
        close_s,
        file_bytes,
        disk_bytes,
        worst_after_close: worst,
    })
}

/// A safetensors file of 8 bf16 tensors, `mb` MB in all, at the scale of trained weights;
/// `drift_seed` adds a fine-tuning step of noise to every value.
fn bf16_checkpoint(mb: usize, drift_seed: Option<u64>) -> Res<Vec<u8>> {
    let per = (mb << 20) / 8 / 2;
    let mut data = Vec::new();
    for i in 0..8u64 {
        let mut rng = Rng::new(i);
        let mut drift = drift_seed.map(|s| Rng::new(s * 100 + i));
        let mut bytes = Vec::with_capacity(per * 2);
        for _ in 0..per {
            let mut x = (rng.unit() as f32 - 0.5) * 0.08;
            if let Some(d) = drift.as_mut() {
                x += (d.unit() as f32 - 0.5) * 1e-4;
            }
            bytes.extend_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes());
        }
        data.push((format!("w{i}"), bytes));
    }
    let views = data
        .iter()
        .map(|(name, bytes)| {
            let view = TensorView::new(strata::store::safetensors::Dtype::BF16, vec![per], bytes)?;
            Ok((name.clone(), view))
        })
        .collect::<Res<Vec<_>>>()?;
    Ok(serialize(views, None)?)
}

fn import(files: &[Vec<u8>], trim: bool) -> Res<Run> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("run.strata");
    let (mut write_s, mut close_s, mut worst) = (0.0, 0.0, 0.0f64);
    for (step, bytes) in files.iter().enumerate() {
        let t = Instant::now();
        let store = Store::open_with(&path, opts(trim))?;
        store.import_safetensors_bytes(bytes, step as u64 + 1, "bench.safetensors")?;
        write_s += t.elapsed().as_secs_f64();
        let t = Instant::now();
        drop(store);
        close_s += t.elapsed().as_secs_f64();
        let (len, disk) = sizes(&path)?;
        worst = worst.max(len as f64 / disk as f64);
    }
    let (file_bytes, disk_bytes) = sizes(&path)?;
    Ok(Run {
        write_s,
        close_s,
        file_bytes,
        disk_bytes,
        worst_after_close: worst,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians of the rounds of one way of writing, trim on or off.
fn summary(runs: &[Run]) -> Value {
    let last = runs[runs.len() - 1];
    json!({
        "write_s": median(runs.iter().map(|r| r.write_s).collect()),
        "close_s": median(runs.iter().map(|r| r.close_s).collect()),
        "file_bytes": last.file_bytes,
        "disk_bytes": last.disk_bytes,
        "worst_length_over_disk": runs.iter().map(|r| r.worst_after_close).fold(0.0, f64::max),
    })
}

fn run() -> Res<()> {
    let a = parse_args()?;
    let files = vec![
        bf16_checkpoint(a.import_mb, None)?,
        bf16_checkpoint(a.import_mb, Some(1))?,
    ];
    type Way<'a> = Box<dyn Fn(bool) -> Res<Run> + 'a>;
    let ways: Vec<(&str, Way<'_>)> = vec![
        ("one handle", Box::new(|trim| one_handle(&a, trim))),
        (
            "a handle per save",
            Box::new(|trim| handle_per_save(&a, trim)),
        ),
        ("import", Box::new(|trim| import(&files, trim))),
    ];
    let mut results = Vec::new();
    for (name, way) in &ways {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for _ in 0..a.rounds {
            on.push(way(true)?);
            off.push(way(false)?);
        }
        results.push(json!({"way": name, "trim": summary(&on), "no_trim": summary(&off)}));
    }
    let doc = json!({
        "machine": machine(),
        "state_mb": a.state_mb,
        "checkpoints": a.checkpoints,
        "import_mb": a.import_mb,
        "rounds": a.rounds,
        "results": results,
    });
    if a.json {
        println!("{doc:#}");
        return Ok(());
    }
    println!(
        "{}; state {} MB x {} checkpoints; import {} MB x 2; medians of {} rounds",
        doc["machine"], a.state_mb, a.checkpoints, a.import_mb, a.rounds
    );
    println!(
        "| way | close trims | write s | close s | file MB | on disk MB | worst length / disk |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &results {
        for (label, key) in [("yes", "trim"), ("no", "no_trim")] {
            let s = &r[key];
            println!(
                "| {} | {label} | {:.3} | {:.3} | {:.2} | {:.2} | {:.3} |",
                r["way"].as_str().unwrap_or(""),
                s["write_s"].as_f64().unwrap_or(0.0),
                s["close_s"].as_f64().unwrap_or(0.0),
                s["file_bytes"].as_f64().unwrap_or(0.0) / 1e6,
                s["disk_bytes"].as_f64().unwrap_or(0.0) / 1e6,
                s["worst_length_over_disk"].as_f64().unwrap_or(0.0),
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("close-trim-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

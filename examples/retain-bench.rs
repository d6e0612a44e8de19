//! retain-bench: what a retention after every save costs a training loop, with the room it
//! keeps (ADR 0037) and with a compaction after every call (the rule before it).
//!
//! ```text
//! cargo run --release --example retain-bench -- [--weights-mb 256] [--state-mb 96]
//!     [--checkpoints 12] [--keep 3] [--handles 1] [--rounds 3] [--json]
//! ```
//!
//! Two loops, each saving `--checkpoints` checkpoints and calling `Store::retain` with
//! `keep_last = --keep` after every save (a trainer's `max_to_keep`), through one handle, or
//! through `--handles` handles in turn, each opened, saving its share and closed (a run
//! resumed that many times):
//!
//! - **weights**: `--weights-mb` MB of f32 weights in 16 MB tensors, a seventh of the values
//!   nudged per save (a delta is a small fraction of a keyframe);
//! - **training state**: weights and AdamW's two moments, 12 tensors, `--state-mb` MB of
//!   f32, every value drifting a little per save (a delta is about a keyframe).
//!
//! Each runs `--rounds` times in a fresh temporary store, the two ways alternating: **keeps
//! room** (`Store::retain` as it is) and **compacts** (`Store::compact` after every
//! retention that did not). Reported, medians of the rounds: seconds in saves and in
//! retentions (compactions included), and the file's bytes on disk at the end and at most
//! during the loop (after a retention's commit, before its compaction: the room the
//! retention's re-encoded versions needed beside the ones they replace) and after the last
//! handle closed (its trim, ADRs 0036 and 0038), beside the bytes it stores; and the seconds
//! the closes took. `--json` prints one JSON document with the
//! machine; without it, a table.

use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{json, Value};
use strata::store::{RetainPolicy, Store};
use strata_testkit::machine::machine;

#[path = "common/drift.rs"]
mod drift;
use drift::Drifting;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "usage: retain-bench [--weights-mb MB] [--state-mb MB] [--checkpoints N] \
[--keep N] [--handles N] [--rounds N] [--json]";

struct Args {
    weights_mb: usize,
    state_mb: usize,
    checkpoints: u64,
    keep: usize,
    handles: u64,
    rounds: usize,
    json: bool,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        weights_mb: 256,
        state_mb: 96,
        checkpoints: 12,
        keep: 3,
        handles: 1,
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
            "--weights-mb" => a.weights_mb = value()?.parse()?,
            "--state-mb" => a.state_mb = value()?.parse()?,
            "--checkpoints" => a.checkpoints = value()?.parse()?,
            "--keep" => a.keep = value()?.parse()?,
            "--handles" => a.handles = value()?.parse()?,
            "--rounds" => a.rounds = value()?.parse()?,
            "--json" => a.json = true,
            _ => return Err(format!("unknown argument {arg}\n{USAGE}").into()),
        }
    }
    if a.weights_mb < 16 || a.state_mb == 0 || a.keep == 0 || a.rounds == 0 || a.handles == 0 {
        return Err(format!("--weights-mb is at least 16, the rest at least 1\n{USAGE}").into());
    }
    if a.checkpoints <= a.keep as u64 || a.checkpoints < a.handles {
        return Err(format!("--checkpoints must exceed --keep and --handles\n{USAGE}").into());
    }
    Ok(a)
}

/// What one loop measured.
#[derive(Clone, Copy)]
struct Run {
    save_s: f64,
    retain_s: f64,
    disk_bytes: u64,
    max_disk_bytes: u64,
    /// After the last handle closed (its trim, ADRs 0028, 0036 and 0038).
    closed_disk_bytes: u64,
    /// Seconds the handles took to close.
    close_s: f64,
    stored_bytes: u64,
    compactions: u64,
}

fn run(a: &Args, mut model: Drifting, compact_each: bool) -> Res<Run> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("run.strata");
    let keep = RetainPolicy {
        keep_last: Some(a.keep),
        keep_every: None,
        keep_tagged: true,
    };
    let (mut save_s, mut retain_s, mut max_disk, mut compactions) = (0.0, 0.0, 0u64, 0u64);
    let (mut close_s, mut stats, mut disk_bytes) = (0.0, None, 0);
    for h in 0..a.handles {
        let mut store = Store::open(&path)?;
        let share = (h + 1) * a.checkpoints / a.handles - h * a.checkpoints / a.handles;
        for _ in 0..share {
            model.advance();
            let t = Instant::now();
            model.save(&store)?;
            save_s += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let r = store.retain(&keep)?;
            // The file at its largest: after the retention's commit, before any compaction.
            let peak = store.disk_bytes()?;
            let mut compacted = r.compacted;
            if compact_each && !compacted {
                store.compact()?;
                compacted = true;
            }
            retain_s += t.elapsed().as_secs_f64();
            compactions += u64::from(compacted);
            max_disk = max_disk.max(peak);
        }
        stats = Some(store.stats()?);
        disk_bytes = store.disk_bytes()?;
        let t = Instant::now();
        drop(store);
        close_s += t.elapsed().as_secs_f64();
    }
    let stats = stats.ok_or("no handle ran")?;
    Ok(Run {
        save_s,
        retain_s,
        disk_bytes,
        max_disk_bytes: max_disk,
        closed_disk_bytes: std::fs::metadata(&path)?.blocks() * 512,
        close_s,
        stored_bytes: stats.segment_bytes + stats.metadata_bytes,
        compactions,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn summary(runs: &[Run]) -> Value {
    let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    json!({
        "save_seconds": m(|r| r.save_s),
        "retain_seconds": m(|r| r.retain_s),
        "disk_bytes": m(|r| r.disk_bytes as f64),
        "max_disk_bytes": m(|r| r.max_disk_bytes as f64),
        "closed_disk_bytes": m(|r| r.closed_disk_bytes as f64),
        "close_seconds": m(|r| r.close_s),
        "stored_bytes": m(|r| r.stored_bytes as f64),
        "compactions": m(|r| r.compactions as f64),
    })
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match measure(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("retain-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn measure(a: &Args) -> Res<()> {
    let mut loops = Vec::new();
    for (label, mb) in [("weights", a.weights_mb), ("training state", a.state_mb)] {
        let (mut keeps, mut compacts) = (Vec::new(), Vec::new());
        for _ in 0..a.rounds {
            let model = || {
                if label == "weights" {
                    Drifting::weights(mb)
                } else {
                    Drifting::training_state(mb)
                }
            };
            keeps.push(run(a, model(), false)?);
            compacts.push(run(a, model(), true)?);
        }
        loops.push(json!({
            "loop": label,
            "mb": mb,
            "keeps_room": summary(&keeps),
            "compacts": summary(&compacts),
        }));
    }
    let doc = json!({
        "machine": machine(),
        "checkpoints": a.checkpoints,
        "keep_last": a.keep,
        "handles": a.handles,
        "rounds": a.rounds,
        "loops": loops,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "{} saves through {} handle(s), retain keep_last {} after each, medians of {} rounds",
        a.checkpoints, a.handles, a.keep, a.rounds
    );
    println!(
        "| loop | way | saves s | retentions s | closes s | compactions | disk MB (end / max / closed) | stored MB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for l in &loops {
        for way in ["keeps_room", "compacts"] {
            let r = &l[way];
            let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            println!(
                "| {} ({} MB) | {} | {:.2} | {:.2} | {:.2} | {} | {:.1} / {:.1} / {:.1} | {:.1} |",
                l["loop"].as_str().unwrap_or("?"),
                l["mb"],
                way.replace('_', " "),
                f("save_seconds"),
                f("retain_seconds"),
                f("close_seconds"),
                f("compactions"),
                f("disk_bytes") / 1e6,
                f("max_disk_bytes") / 1e6,
                f("closed_disk_bytes") / 1e6,
                f("stored_bytes") / 1e6,
            );
        }
    }
    Ok(())
}

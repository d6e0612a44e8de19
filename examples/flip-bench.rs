//! flip-bench: single-byte flips in the low-entropy pages of a compacted store (redb's own
//! pages and Strata's records), each judged as a reader finds it: caught, harmless, silent,
//! panic or hang (README "Reliability" section; `tests/damage/mod.rs` says how, and
//! `tests/damaged_pages.rs` runs a sample of it as a test).
//!
//! ```text
//! cargo run --release --example flip-bench -- [--flips N] [--seed S] [--json]
//! ```
//!
//! Exits 1 when a flip was silent, panicked or hung.

#[path = "../tests/damage/mod.rs"]
mod damage;

use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;
use strata_testkit::noise::Rng;

fn main() -> ExitCode {
    let mut flips = 1000usize;
    let mut seed = 26u64;
    let mut as_json = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| {
                    eprintln!("{what} needs a number");
                    std::process::exit(2)
                })
        };
        match a.as_str() {
            "--flips" => flips = value("--flips") as usize,
            "--seed" => seed = value("--seed"),
            "--json" => as_json = true,
            _ => {
                eprintln!("usage: flip-bench [--flips N] [--seed S] [--json]");
                return ExitCode::from(2);
            }
        }
    }
    // redb's contained panics would each print a message; the outcomes say what happened.
    std::panic::set_hook(Box::new(|_| {}));
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no temporary directory: {e}");
            return ExitCode::from(1);
        }
    };
    let start = Instant::now();
    let base = damage::base(dir.path());
    let mut rng = Rng::new(seed);
    let mut tally = damage::Tally::default();
    for i in 0..flips {
        let (bytes, what) = damage::flip(&base, &mut rng);
        let path = dir.path().join("flipped.strata");
        let outcome = damage::judge(&path, &bytes, &base, dir.path());
        tally.add(&format!("flip {i} ({what})"), outcome);
    }
    let wall = start.elapsed().as_secs_f64();
    let report = json!({
        "flips": flips,
        "seed": seed,
        "store_bytes": base.bytes.len(),
        "pages": base.bytes.len().div_ceil(4096),
        "low_entropy_pages": base.pages.len(),
        "caught": tally.caught,
        "caught_by_engine": tally.caught_by_engine,
        "harmless": tally.harmless,
        "silent": tally.silent.len(),
        "panics": tally.panics.len(),
        "hangs": tally.hangs,
        "examples": tally.silent.iter().chain(&tally.panics).take(10).collect::<Vec<_>>(),
        "wall_s": wall,
    });
    if as_json {
        println!("{report}");
    } else {
        println!(
            "{flips} flips in {wall:.1} s (seed {seed}): {} caught ({} by the database engine), {} harmless, {} silent, {} panics, {} hangs",
            tally.caught,
            tally.caught_by_engine,
            tally.harmless,
            tally.silent.len(),
            tally.panics.len(),
            tally.hangs
        );
    }
    if tally.silent.is_empty() && tally.panics.is_empty() && tally.hangs == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

//! tier-sim: the tier policy under Zipf reads, without a store.
//!
//! N blocks of 4096 f32 values (16 KiB) start at a tier (default hot, as freshly written
//! data), then take Zipf(s = 1.2) reads, one every `--tick-ms` of injected time, with a
//! maintenance pass (plan + apply, within a budget) every `--maintain-every` reads. Prints
//! what the policy did: warm bytes against the cap after each pass, tier flips, bytes per
//! tier, the cost of recording a read and of planning.
//!
//! Read latency and error per tier on real weights need the store integration and are not
//! measured here.
//!
//! ```text
//! cargo run --release -p strata-tiering --example tier-sim -- [--blocks N] [--accesses N] [--json]
//!     [--tick-ms MS] [--maintain-every N] [--budget-ops N] [--budget-mib MIB] [--cap-pct P]
//!     [--start hot8|warm7|warm5|cold3] [--seed N]
//!     [--hot-enter R] [--hot-exit R] [--warm-enter R] [--warm-exit R] (reads per hour)
//!     [--half-life-min M] [--residency-min M]
//! ```
//!
//! Tier 0 is allowed for zero-filled blocks (scratch data); it needs a day of idleness,
//! so it shows only when the run covers more than 24 simulated hours (`--tick-ms 100`).

use std::process::ExitCode;
use std::time::Instant;

use strata_tiering::{BlockSpec, Budget, Tick, Tier, TierConfig, TierState, HOUR, MINUTE};

const VALUES: u32 = 4096;
const ZIPF_S: f64 = 1.2;
/// Reads timed together; the per-read figure is the batch mean (one `Instant` pair per
/// read would cost more than the read).
const BATCH: usize = 16;

#[derive(Debug)]
struct Args {
    blocks: usize,
    accesses: usize,
    json: bool,
    tick_ms: Tick,
    maintain_every: usize,
    budget_ops: u32,
    budget_mib: u64,
    cap_pct: f64,
    start: Tier,
    seed: u64,
    config: TierConfig,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        blocks: 100_000,
        accesses: 1_000_000,
        json: false,
        tick_ms: 10,
        maintain_every: 10_000,
        budget_ops: 10_000,
        budget_mib: 64,
        cap_pct: 10.0,
        start: Tier::Hot8,
        seed: 1,
        config: TierConfig::default(),
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
        let real = || {
            value
                .parse::<f64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--blocks" => a.blocks = num()? as usize,
            "--accesses" => a.accesses = num()? as usize,
            "--tick-ms" => a.tick_ms = num()?,
            "--maintain-every" => a.maintain_every = num()?.max(1) as usize,
            "--budget-ops" => a.budget_ops = u32::try_from(num()?).map_err(|e| e.to_string())?,
            "--budget-mib" => a.budget_mib = num()?,
            "--cap-pct" => a.cap_pct = real()?,
            "--seed" => a.seed = num()?,
            "--hot-enter" => a.config.hot_enter = real()?,
            "--hot-exit" => a.config.hot_exit = real()?,
            "--warm-enter" => a.config.warm_enter = real()?,
            "--warm-exit" => a.config.warm_exit = real()?,
            "--half-life-min" => a.config.score.half_life = num()? * MINUTE,
            "--residency-min" => a.config.min_residency = num()? * MINUTE,
            "--start" => {
                a.start = match value.as_str() {
                    "hot8" => Tier::Hot8,
                    "warm7" => Tier::Warm7,
                    "warm5" => Tier::Warm5,
                    "cold3" => Tier::Cold3,
                    _ => return Err(format!("--start {value}: hot8, warm7, warm5 or cold3")),
                };
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.blocks == 0 {
        return Err("--blocks must be at least 1".into());
    }
    Ok(a)
}

/// splitmix64: a small, seedable generator (no dependency needed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
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

    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
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

fn run(a: &Args) -> Result<(), strata_tiering::TierError> {
    let all_hot = a.blocks as u64 * Tier::Hot8.block_bytes(VALUES, 64);
    let cap = (all_hot as f64 * a.cap_pct / 100.0) as u64;
    let cfg = TierConfig {
        warm_byte_cap: cap,
        allow_zero_fill: true,
        ..a.config
    };
    let mut st = TierState::with_capacity(cfg, a.blocks)?;
    let mut rng = Rng(a.seed);
    // Rank r is block perm[r]: popular blocks are spread over the id space.
    let mut perm: Vec<u64> = (0..a.blocks as u64).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    for id in 0..a.blocks as u64 {
        st.register(
            BlockSpec::tiered(id, VALUES, Tier::Hot8).at_tier(a.start),
            0,
        )?;
    }
    let zipf = Zipf::new(a.blocks, ZIPF_S);
    let budget = Budget::new(a.budget_mib << 20, a.budget_ops);

    let mut now: Tick = 0;
    let mut batch = [0u64; BATCH];
    let mut record_ns: Vec<f64> = Vec::with_capacity(a.accesses / BATCH + 1);
    let mut plan_ms: Vec<f64> = Vec::new();
    let mut max_warm_after = 0u64;
    let mut cap_violations = 0u32;
    let mut deferred = 0u64;
    let mut done = 0usize;
    let mut next_maintain = a.maintain_every;
    while done < a.accesses {
        let n = BATCH.min(a.accesses - done).min(next_maintain - done);
        for b in batch.iter_mut().take(n) {
            *b = perm[zipf.sample(&mut rng)];
        }
        let t0 = Instant::now();
        for &id in &batch[..n] {
            now += a.tick_ms;
            st.record_access(id, now)?;
        }
        record_ns.push(t0.elapsed().as_nanos() as f64 / n as f64);
        done += n;
        if done == next_maintain || done == a.accesses {
            let t0 = Instant::now();
            let plan = st.plan(now, budget);
            plan_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            st.apply(&plan)?;
            deferred += u64::from(plan.deferred);
            let warm = st.warm_bytes();
            max_warm_after = max_warm_after.max(warm);
            if warm > cap {
                cap_violations += 1;
            }
            next_maintain += a.maintain_every;
        }
    }

    record_ns.sort_by(f64::total_cmp);
    plan_ms.sort_by(f64::total_cmp);
    let bytes = st.bytes_by_tier();
    let mut blocks_by_tier = [0u64; 6];
    let (mut flips, mut moves, mut flipped, mut max_flips) = (0u64, 0u64, 0u64, 0u32);
    for b in st.blocks() {
        blocks_by_tier[b.tier.index()] += 1;
        flips += u64::from(b.flips);
        moves += u64::from(b.moves);
        flipped += u64::from(b.flips > 0);
        max_flips = max_flips.max(b.flips);
    }
    let per_tier = |v: &dyn Fn(Tier) -> u64| {
        Tier::ALL
            .iter()
            .rev()
            .map(|&t| format!("\"{}\":{}", t.name(), v(t)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let n = a.blocks as f64;
    let json = format!(
        concat!(
            "{{\"blocks\":{},\"accesses\":{},\"warm_byte_cap\":{},",
            "\"max_warm_bytes_after_maintain\":{},\"tier_flips_per_block\":{:.5},",
            "\"bytes_by_tier\":{{{}}},\"p50_record_ns\":{:.1},\"p95_record_ns\":{:.1},",
            "\"plan_ms_p50\":{:.3},",
            "\"plan_ms_max\":{:.3},\"maintenance_passes\":{},\"cap_violations\":{},",
            "\"blocks_with_flips\":{},\"max_flips_one_block\":{},",
            "\"moves_per_block\":{:.4},\"deferred_moves\":{},\"blocks_by_tier\":{{{}}},",
            "\"simulated_hours\":{:.2},\"tick_ms\":{},\"start_tier\":\"{}\",",
            "\"budget\":{{\"max_ops\":{},\"max_bytes_reencoded\":{}}},",
            "\"record_ns_method\":\"mean of batches of {} reads\"}}"
        ),
        a.blocks,
        a.accesses,
        cap,
        max_warm_after,
        flips as f64 / n,
        per_tier(&|t| bytes.get(t)),
        percentile(&record_ns, 0.5),
        percentile(&record_ns, 0.95),
        percentile(&plan_ms, 0.5),
        plan_ms.last().copied().unwrap_or(0.0),
        plan_ms.len(),
        cap_violations,
        flipped,
        max_flips,
        moves as f64 / n,
        deferred,
        per_tier(&|t| blocks_by_tier[t.index()]),
        now as f64 / HOUR as f64,
        a.tick_ms,
        a.start,
        budget.max_ops,
        budget.max_bytes_reencoded,
        BATCH,
    );
    if a.json {
        println!("{json}");
    } else {
        println!(
            "tier-sim: {} blocks of {VALUES} f32, {} Zipf({ZIPF_S}) reads over {:.2} simulated hours",
            a.blocks,
            a.accesses,
            now as f64 / HOUR as f64
        );
        println!(
            "warm cap {} B ({}% of all-hot); max warm after maintain {} B; {} passes over the cap",
            cap, a.cap_pct, max_warm_after, cap_violations
        );
        println!(
            "flips per block {:.5} ({} blocks flipped, at most {} times); moves per block {:.4}; deferred moves {}",
            flips as f64 / n,
            flipped,
            max_flips,
            moves as f64 / n,
            deferred
        );
        for t in Tier::ALL.iter().rev() {
            println!(
                "  {:>6}: {:>7} blocks {:>12} B",
                t.name(),
                blocks_by_tier[t.index()],
                bytes.get(*t)
            );
        }
        println!(
            "record_access: p50 {:.1} ns, p95 {:.1} ns (batch means); plan: p50 {:.3} ms, max {:.3} ms over {} passes",
            percentile(&record_ns, 0.5),
            percentile(&record_ns, 0.95),
            percentile(&plan_ms, 0.5),
            plan_ms.last().copied().unwrap_or(0.0),
            plan_ms.len()
        );
        println!("{json}");
    }
    Ok(())
}

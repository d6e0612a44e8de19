//! Planning a maintenance pass over 100 000 blocks.

use std::hint::black_box;

use criterion::Criterion;
use strata_tiering::{Budget, TierState, MINUTE};

#[path = "support/mod.rs"]
mod common;

fn bench_plan(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan_100k");
    // Warm bytes at 0.8 x cap (no relief) and at 1.5 x cap (relief sorts the warm blocks).
    for (name, over) in [("under_cap", 0.8), ("over_cap", 1.5)] {
        let (st, _, t): (TierState, _, _) = common::state(100_000, 1_000_000, over);
        let now = t + 30 * MINUTE;
        let budget = Budget::new(256 << 20, 10_000);
        let p = st.plan(now, budget);
        eprintln!(
            "{name}: {} moves, {} deferred, warm {} -> {} (cap {})",
            p.moves.len(),
            p.deferred,
            p.warm_bytes_before,
            p.warm_bytes_after,
            st.config().warm_byte_cap
        );
        g.bench_function(name, |b| {
            b.iter(|| black_box(st.plan(black_box(now), budget)))
        });
        let unlimited = st.plan(now, Budget::UNLIMITED);
        eprintln!("{name} unlimited: {} moves", unlimited.moves.len());
        g.bench_function(format!("{name}_unlimited"), |b| {
            b.iter(|| black_box(st.plan(black_box(now), Budget::UNLIMITED)))
        });
    }
    g.finish();
}

// What `criterion_group!` and `criterion_main!` expand to, written out so that no
// undocumented `pub fn` is generated.
fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_plan(&mut c);
    c.final_summary();
}

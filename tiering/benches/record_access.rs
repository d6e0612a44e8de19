//! Recording one read in a state of 100 000 blocks.

use std::hint::black_box;

use criterion::Criterion;
use strata_tiering::SECOND;

#[path = "support/mod.rs"]
mod common;

fn bench_record(c: &mut Criterion) {
    let (mut st, ids, t0) = common::state(100_000, 0, 1.0);
    // A pseudo-random walk over the blocks, 1 s apart: every read is counted (none merged
    // into a correlated read), so each call pays the moving-average update.
    let order: Vec<u64> = (0..1 << 16)
        .map(|i| ids[(common::mix(i) % ids.len() as u64) as usize])
        .collect();
    let mut i = 0usize;
    let mut now = t0;
    c.bench_function("record_access_counted", |b| {
        b.iter(|| {
            now += SECOND;
            i = (i + 1) & (order.len() - 1);
            st.record_access(black_box(order[i]), now)
                .expect("registered");
        })
    });
    // The same walk through handles: no hash lookup.
    let handles: Vec<_> = order
        .iter()
        .map(|&id| st.handle(id).expect("registered"))
        .collect();
    c.bench_function("record_access_handle_counted", |b| {
        b.iter(|| {
            now += SECOND;
            i = (i + 1) & (handles.len() - 1);
            st.record_access_handle(black_box(handles[i]), now)
                .expect("registered");
        })
    });
    // Zipf-like skew (a few blocks take most reads), the common case: mostly cache hits.
    let skewed: Vec<u64> = (0..1u64 << 16)
        .map(|i| {
            let u = common::mix(i ^ 77) % 1_000_000;
            ids[(u * u / 1_000_000 * u / 1_000_000 * ids.len() as u64 / 1_000_000) as usize]
        })
        .collect();
    c.bench_function("record_access_skewed_counted", |b| {
        b.iter(|| {
            now += SECOND;
            i = (i + 1) & (skewed.len() - 1);
            st.record_access(black_box(skewed[i]), now)
                .expect("registered");
        })
    });
    // The same block over and over within the correlation period: the merge path.
    let id = ids[7];
    c.bench_function("record_access_merged", |b| {
        b.iter(|| st.record_access(black_box(id), now).expect("registered"))
    });
}

// What `criterion_group!` and `criterion_main!` expand to, written out so that no
// undocumented `pub fn` is generated.
fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_record(&mut c);
    c.final_summary();
}

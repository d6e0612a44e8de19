//! Shared set-up for the benches: a state of many 4096-value blocks with a read history.

use strata_codec::testing::SplitMix64;
use strata_tiering::{BlockSpec, Tick, Tier, TierConfig, TierState, SECOND};

/// `x` hashed by splitmix64: ids and read choices spread over `u64`.
pub(crate) fn mix(x: u64) -> u64 {
    SplitMix64::mix(x)
}

/// `n` tiered blocks spread over every tier, with ids scattered over `u64`, warm bytes
/// about `over` times the cap, and `reads` reads spread over the first 6 hours. Returns
/// the state, the ids, and the time after the reads.
pub(crate) fn state(n: usize, reads: usize, over: f64) -> (TierState, Vec<u64>, Tick) {
    let tiers = [Tier::Hot8, Tier::Warm7, Tier::Warm5, Tier::Cold3];
    let warm_per_block = Tier::Warm7.block_bytes(4096, 64);
    let cap = ((n as f64 / 2.0) * warm_per_block as f64 / over) as u64;
    let cfg = TierConfig {
        warm_byte_cap: cap,
        allow_zero_fill: true,
        ..TierConfig::default()
    };
    let mut st = TierState::with_capacity(cfg, n).expect("valid config");
    let ids: Vec<u64> = (0..n as u64).map(|i| mix(i ^ 0xABCD)).collect();
    for &id in &ids {
        let tier = tiers[(mix(id) % 4) as usize];
        st.register(BlockSpec::tiered(id, 4096, Tier::Hot8).at_tier(tier), 0)
            .expect("new block");
    }
    let span = 6 * 3600 * SECOND;
    let mut t = 0;
    for r in 0..reads as u64 {
        t = r * span / reads as u64;
        // Skewed: low indices read far more often.
        let u = mix(r) % 1_000_000;
        let idx = ((u * u) / 1_000_000 * n as u64 / 1_000_000) as usize;
        st.record_access(ids[idx.min(n - 1)], t)
            .expect("registered");
    }
    (st, ids, t)
}

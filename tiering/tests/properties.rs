//! Property tests of the tier policy. One tick is one second.

use std::collections::BTreeMap;

use proptest::prelude::*;
use strata_codec::testing::SplitMix64;
use strata_tiering::{
    BlockId, BlockSpec, Budget, MoveReason, Plan, Policy, ReconstructPolicy, ScoreConfig, Tick,
    Tier, TierConfig, TierState, SECOND,
};

const VALUES: u32 = 64;

/// Thresholds scaled so that things happen within a few hundred ticks.
fn config(cap: u64) -> TierConfig {
    TierConfig {
        score: ScoreConfig {
            half_life: 20 * SECOND,
            correlation: SECOND,
        },
        hot_enter: 1200.0,
        hot_exit: 600.0,
        warm_enter: 240.0,
        warm_exit: 120.0,
        min_residency: 50 * SECOND,
        cap_min_interval: 50 * SECOND,
        absent_min_score: 60.0,
        absent_age: 120 * SECOND,
        allow_zero_fill: true,
        warm_byte_cap: cap,
        ..TierConfig::default()
    }
}

const TIERS: [Tier; 5] = [
    Tier::Hot8,
    Tier::Warm7,
    Tier::Warm5,
    Tier::Cold3,
    Tier::Absent,
];

fn s7() -> u64 {
    Tier::Warm7.block_bytes(VALUES, 64)
}

/// A block: its tier at registration, whether it is pinned, its reconstruct base.
#[derive(Debug, Clone)]
struct BlockGen {
    tier: usize,
    pinned: bool,
    base: Option<u8>,
}

fn block_gen() -> impl Strategy<Value = BlockGen> {
    (
        0usize..5,
        prop::bool::weighted(0.1),
        prop::option::of(0u8..40),
    )
        .prop_map(|(tier, pinned, base)| BlockGen { tier, pinned, base })
}

/// Blocks, reads `(tick, block)`, the cap in 7-bit blocks, and a budget in ops.
#[derive(Debug, Clone)]
struct Scenario {
    blocks: Vec<BlockGen>,
    reads: Vec<(u16, u8)>,
    cap_blocks: u64,
    ops: u32,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(block_gen(), 1..40),
        prop::collection::vec((0u16..600, 0u8..40), 0..400),
        0u64..30,
        1u32..50,
    )
        .prop_map(|(blocks, reads, cap_blocks, ops)| Scenario {
            blocks,
            reads,
            cap_blocks,
            ops,
        })
}

fn spec(id: usize, g: &BlockGen) -> BlockSpec {
    let tier = TIERS[g.tier];
    let mut s = if g.pinned {
        BlockSpec::pinned(id as BlockId, VALUES, tier)
    } else {
        BlockSpec::tiered(id as BlockId, VALUES, Tier::Hot8).at_tier(tier)
    };
    if let Some(b) = g.base {
        s = s.with_reconstruct(ReconstructPolicy::Delta {
            base: BlockId::from(b),
        });
    }
    s
}

/// Builds the state, registering blocks in `order`.
fn build(sc: &Scenario, order: &[usize], cap: u64) -> TierState {
    let mut st = TierState::with_capacity(config(cap), sc.blocks.len()).expect("valid config");
    for &i in order {
        st.register(spec(i, &sc.blocks[i]), 0).expect("valid block");
    }
    st
}

/// Reads grouped by tick, ticks ascending.
fn reads_by_tick(sc: &Scenario) -> BTreeMap<Tick, Vec<BlockId>> {
    let mut m: BTreeMap<Tick, Vec<BlockId>> = BTreeMap::new();
    for &(t, b) in &sc.reads {
        if (b as usize) < sc.blocks.len() {
            m.entry(Tick::from(t) * SECOND)
                .or_default()
                .push(BlockId::from(b));
        }
    }
    m
}

/// Runs the scenario: reads, and a plan + apply every `every` ticks with `budget`. Calls
/// `check(state_before, plan)` on every plan.
fn run(
    sc: &Scenario,
    budget: Budget,
    every: u64,
    mut check: impl FnMut(&TierState, &Plan) -> Result<(), TestCaseError>,
) -> Result<TierState, TestCaseError> {
    let order: Vec<usize> = (0..sc.blocks.len()).collect();
    let mut st = build(sc, &order, sc.cap_blocks * s7());
    let reads = reads_by_tick(sc);
    for tick in 0..=700u64 {
        let now = tick * SECOND;
        if let Some(ids) = reads.get(&now) {
            for &id in ids {
                st.record_access(id, now).expect("registered");
            }
        }
        if tick % every == 0 {
            let p = st.plan(now, budget);
            check(&st, &p)?;
            st.apply(&p).expect("a fresh plan applies");
        }
    }
    Ok(st)
}

/// Replays a plan's moves and returns the warm bytes after each one.
fn warm_after_each(st: &TierState, p: &Plan) -> Vec<u64> {
    let size = |t: Tier| {
        if t.is_warm() {
            t.block_bytes(VALUES, 64)
        } else {
            0
        }
    };
    let mut w = st.warm_bytes();
    p.moves
        .iter()
        .map(|m| {
            w = w - size(m.from) + size(m.to);
            w
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Blocks read in on/off bursts of any period: no block changes tier more than twice
    /// in any 100 ticks (with maintenance every tick).
    #[test]
    fn oscillating_access_changes_a_tier_at_most_twice_per_100_ticks(
        patterns in prop::collection::vec((2u64..80, 1u64..80, 0u64..80, 1u64..4), 1..12),
        start_tiers in prop::collection::vec(0usize..4, 12),
        cap_blocks in 1u64..12,
    ) {
        let mut st = TierState::new(config(cap_blocks * s7())).unwrap();
        for (i, _) in patterns.iter().enumerate() {
            st.register(
                BlockSpec::tiered(i as BlockId, VALUES, Tier::Hot8).at_tier(TIERS[start_tiers[i]]),
                0,
            ).unwrap();
        }
        let mut changes: Vec<Vec<Tick>> = vec![Vec::new(); patterns.len()];
        for tick in 0..1000u64 {
            let now = tick * SECOND;
            for (i, &(on, off, phase, every)) in patterns.iter().enumerate() {
                let pos = (tick + phase) % (on + off);
                if pos < on && tick % every == 0 {
                    st.record_access(i as BlockId, now).unwrap();
                }
            }
            let p = st.maintain(now, Budget::UNLIMITED).unwrap();
            for m in &p.moves {
                changes[m.block as usize].push(tick);
            }
        }
        for (i, times) in changes.iter().enumerate() {
            for w in times.windows(3) {
                prop_assert!(w[2] - w[0] >= 100, "block {i} moved at {times:?}");
            }
        }
    }

    /// After plan + apply with a generous budget, warm bytes are within the cap (pinned
    /// warm blocks, which no plan moves, aside).
    #[test]
    fn warm_bytes_within_cap_after_maintain(sc in scenario()) {
        run(&sc, Budget::UNLIMITED, 7, |st, p| {
            let pinned_warm: u64 = st
                .blocks()
                .filter(|b| matches!(b.policy, Policy::Pinned(_)) && b.tier.is_warm())
                .map(|b| b.tier.block_bytes(VALUES, 64))
                .sum();
            let cap = st.config().warm_byte_cap;
            prop_assert!(
                p.warm_bytes_after <= cap.max(pinned_warm),
                "after {} cap {} pinned {}", p.warm_bytes_after, cap, pinned_warm
            );
            Ok(())
        })?;
    }

    /// No block enters 7 bits (a 5 -> 7 restore, or a landing in warm at 7 bits) unless
    /// warm bytes stay below 0.8 x cap, whatever the budget.
    #[test]
    fn no_seven_bit_growth_at_or_above_the_low_watermark(sc in scenario()) {
        let budget = Budget::new(u64::MAX, sc.ops);
        run(&sc, budget, 5, |st, p| {
            let low = st.config().warm_low_bytes();
            for (m, w) in p.moves.iter().zip(warm_after_each(st, p)) {
                if m.to == Tier::Warm7 {
                    prop_assert!(w < low, "{m:?}: warm {w} >= low {low}");
                }
                if m.reason == MoveReason::CapRestore {
                    prop_assert_eq!((m.from, m.to), (Tier::Warm5, Tier::Warm7));
                }
            }
            Ok(())
        })?;
    }

    /// Every move is one step from the block's current tier, no block moves twice in a
    /// plan, and the plan stays within its budget.
    #[test]
    fn one_step_per_move_within_budget(sc in scenario(), bytes in 0u64..2_000) {
        let budget = Budget::new(bytes, sc.ops);
        run(&sc, budget, 3, |st, p| {
            let mut seen = std::collections::BTreeSet::new();
            for m in &p.moves {
                prop_assert!(seen.insert(m.block), "block {} twice", m.block);
                prop_assert_eq!(st.tier(m.block).unwrap(), m.from);
                prop_assert!(m.from.is_one_step(m.to), "{m:?}");
                prop_assert!(m.to != Tier::Exact && m.from != Tier::Absent);
            }
            prop_assert!(p.moves.len() as u32 <= budget.max_ops);
            prop_assert!(p.bytes_reencoded <= budget.max_bytes_reencoded);
            Ok(())
        })?;
    }

    /// Same state and time: the same plan, whatever the registration order.
    #[test]
    fn plans_are_deterministic(sc in scenario(), seed in any::<u64>(), at in 0u64..700) {
        let n = sc.blocks.len();
        let mut order: Vec<usize> = (0..n).collect();
        // Fisher-Yates with a splitmix64 stream.
        let mut rng = SplitMix64::new(seed);
        for i in (1..n).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let cap = sc.cap_blocks * s7();
        let mut a = build(&sc, &(0..n).collect::<Vec<_>>(), cap);
        let mut b = build(&sc, &order, cap);
        for (t, ids) in reads_by_tick(&sc) {
            for id in ids {
                a.record_access(id, t).unwrap();
                b.record_access(id, t).unwrap();
            }
        }
        let now = at * SECOND;
        let budget = Budget::new(u64::MAX, sc.ops);
        let pa = a.plan(now, budget);
        prop_assert_eq!(&pa, &a.plan(now, budget));
        prop_assert_eq!(&pa, &b.plan(now, budget));
    }

    /// Without exact writes, no block's precision ever improves.
    #[test]
    fn precision_never_improves_without_a_write(sc in scenario()) {
        let mut last: BTreeMap<BlockId, strata_tiering::Precision> = BTreeMap::new();
        let st = run(&sc, Budget::new(u64::MAX, sc.ops), 4, |st, _| {
            for b in st.blocks() {
                if let Some(prev) = last.insert(b.id, b.precision) {
                    prop_assert!(
                        b.precision.is_no_better_than(prev),
                        "block {}: {prev:?} -> {:?}", b.id, b.precision
                    );
                }
                if let (Some(bits), Some(tier_bits)) = (b.precision.bits(), b.tier.bits()) {
                    prop_assert!(bits <= tier_bits);
                }
            }
            Ok(())
        })?;
        for b in st.blocks() {
            prop_assert!(b.precision.is_no_better_than(last[&b.id]));
        }
    }
}

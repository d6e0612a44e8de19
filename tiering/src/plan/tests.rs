use super::*;
use crate::{BlockSpec, Precision, ReconstructPolicy, TierConfig, TierState, HOUR, MINUTE, SECOND};

const N: u32 = 4096;

fn s7() -> u64 {
    Tier::Warm7.block_bytes(N, 64)
}

fn s5() -> u64 {
    Tier::Warm5.block_bytes(N, 64)
}

fn state_with(cfg: TierConfig) -> TierState {
    TierState::new(cfg).unwrap()
}

fn reads(st: &mut TierState, id: BlockId, from: Tick, to: Tick, every: Tick) {
    let mut t = from;
    while t <= to {
        st.record_access(id, t).unwrap();
        t += every;
    }
}

fn moves_of(p: &Plan) -> Vec<(BlockId, Tier, Tier, MoveReason)> {
    p.moves
        .iter()
        .map(|m| (m.block, m.from, m.to, m.reason))
        .collect()
}

#[test]
fn scores_inside_the_band_keep_the_tier() {
    let mut st = state_with(TierConfig::default());
    st.register(BlockSpec::tiered(1, N, Tier::Hot8), 0).unwrap();
    st.register(BlockSpec::tiered(2, N, Tier::Hot8).at_tier(Tier::Warm7), 0)
        .unwrap();
    // 45 reads per hour: between hot_exit (30) and hot_enter (60).
    let mut t = 0;
    while t < 6 * HOUR {
        t += 80 * SECOND;
        st.record_access(1, t).unwrap();
        st.record_access(2, t).unwrap();
        if t % (10 * MINUTE) < 80 * SECOND {
            let p = st.maintain(t, Budget::UNLIMITED).unwrap();
            assert!(p.is_empty(), "{t}: {:?}", p.moves);
        }
    }
    let s = st.score(1, t).unwrap();
    assert!((40.0..50.0).contains(&s), "{s}");
    assert_eq!(st.tier(1).unwrap(), Tier::Hot8);
    assert_eq!(st.tier(2).unwrap(), Tier::Warm7);
}

#[test]
fn minimum_residency_delays_moves() {
    let mut st = state_with(TierConfig::default());
    st.register(BlockSpec::tiered(1, N, Tier::Hot8), 0).unwrap();
    assert!(st.plan(10 * MINUTE - 1, Budget::UNLIMITED).is_empty());
    let p = st.maintain(10 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(
        moves_of(&p),
        vec![(1, Tier::Hot8, Tier::Warm7, MoveReason::Demote)]
    );
    // Cold by score now, but it just moved.
    assert!(st.plan(19 * MINUTE, Budget::UNLIMITED).is_empty());
    let p = st.maintain(20 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(
        moves_of(&p),
        vec![(1, Tier::Warm7, Tier::Cold3, MoveReason::Demote)]
    );
}

#[test]
fn promotion_climbs_one_step_per_move() {
    let mut st = state_with(TierConfig::default());
    st.register(BlockSpec::tiered(1, N, Tier::Hot8).at_tier(Tier::Cold3), 0)
        .unwrap();
    reads(&mut st, 1, 0, 20 * MINUTE, 10 * SECOND);
    let p = st.maintain(20 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(
        moves_of(&p),
        vec![(1, Tier::Cold3, Tier::Warm7, MoveReason::Promote)]
    );
    reads(&mut st, 1, 20 * MINUTE, 30 * MINUTE, 10 * SECOND);
    assert!(st.plan(29 * MINUTE, Budget::UNLIMITED).is_empty());
    let p = st.maintain(30 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(
        moves_of(&p),
        vec![(1, Tier::Warm7, Tier::Hot8, MoveReason::Promote)]
    );
    // Promotion stores 3-bit data at 8 bits: the precision stays 3 bits.
    assert_eq!(st.effective_bits(1).unwrap(), Some(3));
}

/// Twelve warm blocks at 7 bits, block `i` last read at `i` seconds.
fn twelve_warm(cap: u64) -> TierState {
    let mut st = state_with(TierConfig {
        warm_byte_cap: cap,
        ..TierConfig::default()
    });
    for id in 0..12 {
        st.register(BlockSpec::tiered(id, N, Tier::Warm7), 0)
            .unwrap();
        st.record_access(id, id * SECOND).unwrap();
    }
    st
}

#[test]
fn over_the_cap_the_least_recently_read_go_to_five_bits() {
    let cap = 10 * s7();
    let mut st = twelve_warm(cap);
    assert!(st.warm_bytes() > cap);
    let p = st.maintain(MINUTE, Budget::UNLIMITED).unwrap();
    // 12 * s7 - k * (s7 - s5) <= 10 * s7  =>  k = 8.
    let squeezed: Vec<_> = p.moves.iter().map(|m| m.block).collect();
    assert_eq!(squeezed, (0..8).collect::<Vec<_>>());
    assert!(p
        .moves
        .iter()
        .all(|m| m.reason == MoveReason::CapSqueeze && m.to == Tier::Warm5));
    assert!(st.warm_bytes() <= cap);
    assert_eq!(st.warm_bytes(), p.warm_bytes_after);

    // Warm bytes between 0.8 cap and the cap: a read 5-bit block stays at 5 bits.
    st.record_access(0, 2 * MINUTE).unwrap();
    assert!(st.warm_bytes() >= st.config().warm_low_bytes());
    assert!(st.plan(3 * MINUTE, Budget::UNLIMITED).is_empty());

    // Below 0.8 cap, read 5-bit blocks go back to 7 bits (most recently read first).
    for id in 8..12 {
        st.remove(id).unwrap();
    }
    st.record_access(1, 3 * MINUTE).unwrap();
    let p = st.maintain(4 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(
        moves_of(&p),
        vec![
            (1, Tier::Warm5, Tier::Warm7, MoveReason::CapRestore),
            (0, Tier::Warm5, Tier::Warm7, MoveReason::CapRestore),
        ]
    );
    assert!(st.warm_bytes() < st.config().warm_low_bytes());
    // Precision: 7, then 5, then 7 bits again holds 5-bit data.
    assert_eq!(st.effective_bits(0).unwrap(), Some(5));
}

#[test]
fn when_squeezing_is_not_enough_the_least_recent_go_cold() {
    let cap = 2 * s5();
    let mut st = twelve_warm(cap);
    let p = st.maintain(MINUTE, Budget::UNLIMITED).unwrap();
    assert!(st.warm_bytes() <= cap);
    for m in &p.moves {
        let expect = if m.block < 10 {
            (Tier::Cold3, MoveReason::CapEvict)
        } else {
            (Tier::Warm5, MoveReason::CapSqueeze)
        };
        assert_eq!((m.to, m.reason), expect, "{m:?}");
        assert!(m.from.is_one_step(m.to));
    }
    assert_eq!(p.moves.len(), 12);
}

#[test]
fn hot_to_warm_makes_room_from_older_warm_blocks() {
    let cap = 3 * s5();
    let mut st = state_with(TierConfig {
        warm_byte_cap: cap,
        ..TierConfig::default()
    });
    for id in 1..=3 {
        st.register(BlockSpec::tiered(id, N, Tier::Warm5), 0)
            .unwrap();
        reads(&mut st, id, 0, 20 * MINUTE, 5 * MINUTE);
    }
    st.register(BlockSpec::tiered(9, N, Tier::Hot8), 0).unwrap();
    st.record_access(9, 25 * MINUTE).unwrap();
    let p = st.maintain(30 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(
        moves_of(&p),
        vec![
            (1, Tier::Warm5, Tier::Cold3, MoveReason::CapEvict),
            (9, Tier::Hot8, Tier::Warm5, MoveReason::Demote),
        ]
    );
    assert_eq!(st.warm_bytes(), cap);

    // A hot block used less recently than every warm block waits instead.
    st.register(BlockSpec::tiered(10, N, Tier::Hot8), 0)
        .unwrap();
    let p = st.plan(35 * MINUTE, Budget::UNLIMITED);
    assert!(p.is_empty(), "{:?}", p.moves);
    assert!(p.deferred >= 1);
}

#[test]
fn tier_zero_needs_idleness_low_score_and_a_way_back() {
    let run = |zero_fill: bool| {
        let mut st = state_with(TierConfig {
            allow_zero_fill: zero_fill,
            ..TierConfig::default()
        });
        let cold = |id| BlockSpec::tiered(id, N, Tier::Hot8).at_tier(Tier::Cold3);
        st.register(cold(1), 0).unwrap();
        st.register(
            cold(2).with_reconstruct(ReconstructPolicy::Delta { base: 100 }),
            0,
        )
        .unwrap();
        st.register(
            cold(3).with_reconstruct(ReconstructPolicy::Delta { base: 2 }),
            0,
        )
        .unwrap();
        st.register(
            cold(4).with_reconstruct(ReconstructPolicy::Factor { source: 3 }),
            0,
        )
        .unwrap();
        st.register(
            cold(5).with_reconstruct(ReconstructPolicy::Delta { base: 4 }),
            0,
        )
        .unwrap();
        // Read recently: not idle.
        st.register(
            cold(6).with_reconstruct(ReconstructPolicy::Delta { base: 100 }),
            0,
        )
        .unwrap();
        st.record_access(6, 23 * HOUR).unwrap();
        assert!(st.plan(24 * HOUR - 1, Budget::UNLIMITED).is_empty());
        let p = st.maintain(24 * HOUR, Budget::UNLIMITED).unwrap();
        let gone: Vec<_> = p.moves.iter().map(|m| m.block).collect();
        assert!(p
            .moves
            .iter()
            .all(|m| m.to == Tier::Absent && m.reason == MoveReason::Absent));
        assert_eq!(st.error_bound_rel(2).unwrap(), f64::INFINITY);
        assert_eq!(st.bytes_by_tier().get(Tier::Absent), 0);
        gone
    };
    // 5 would need 4 reconstructions (5 <- 4 <- 3 <- 2): over the depth of 3.
    assert_eq!(run(false), vec![2, 3, 4]);
    assert_eq!(run(true), vec![1, 2, 3, 4]);
}

#[test]
fn budget_limits_ops_and_bytes() {
    let mut st = state_with(TierConfig::default());
    for id in 0..5 {
        st.register(BlockSpec::tiered(id, N, Tier::Hot8), 0)
            .unwrap();
    }
    let p = st.plan(HOUR, Budget::new(2 * s7(), u32::MAX));
    assert_eq!(p.moves.len(), 2);
    assert_eq!(p.deferred, 3);
    assert_eq!(p.bytes_reencoded, 2 * s7());
    let p = st.plan(HOUR, Budget::new(u64::MAX, 0));
    assert!(p.is_empty());
    assert_eq!(p.deferred, 5);
}

#[test]
fn plans_do_not_depend_on_registration_order() {
    let build = |ids: &[u64]| {
        let mut st = state_with(TierConfig {
            warm_byte_cap: 3 * s7(),
            ..TierConfig::default()
        });
        for &id in ids {
            let tier = [Tier::Hot8, Tier::Warm7, Tier::Warm5, Tier::Cold3][id as usize % 4];
            st.register(BlockSpec::tiered(id, N, Tier::Hot8).at_tier(tier), 0)
                .unwrap();
            // Same reads for the same id, equal recency for many (ties by id).
            reads(&mut st, id, 0, (id % 3) * 10 * MINUTE, 30 * SECOND);
        }
        st
    };
    let ids: Vec<u64> = (0..40).collect();
    let mut rev = ids.clone();
    rev.reverse();
    let a = build(&ids);
    let mut b = build(&rev);
    b.remove(7).unwrap();
    b.register(BlockSpec::tiered(7, N, Tier::Hot8).at_tier(Tier::Cold3), 0)
        .unwrap();
    reads(&mut b, 7, 0, 10 * MINUTE, 30 * SECOND);
    let pa = a.plan(40 * MINUTE, Budget::new(u64::MAX, 25));
    let pb = b.plan(40 * MINUTE, Budget::new(u64::MAX, 25));
    assert!(!pa.is_empty());
    assert_eq!(pa, pb);
}

#[test]
fn apply_checks_everything_first() {
    let mut st = state_with(TierConfig::default());
    st.register(BlockSpec::tiered(1, N, Tier::Hot8), 0).unwrap();
    st.register(BlockSpec::tiered(2, N, Tier::Hot8), 0).unwrap();
    st.register(BlockSpec::pinned(3, N, Tier::Hot8), 0).unwrap();
    let p = st.plan(HOUR, Budget::UNLIMITED);
    assert_eq!(p.moves.len(), 2);
    st.apply(&p).unwrap();
    let before: Vec<_> = st.blocks().collect();
    // Applying again: stale.
    assert!(matches!(
        st.apply(&p),
        Err(TierError::StaleMove { block: 1, .. })
    ));
    let bad = |block, from, to| Plan {
        now: 2 * HOUR,
        moves: vec![
            Move {
                block: 1,
                from: Tier::Warm7,
                to: Tier::Cold3,
                reason: MoveReason::Demote,
            },
            Move {
                block,
                from,
                to,
                reason: MoveReason::Demote,
            },
        ],
        bytes_reencoded: 0,
        warm_bytes_before: 0,
        warm_bytes_after: 0,
        deferred: 0,
    };
    for (plan, what) in [
        (bad(2, Tier::Warm7, Tier::Absent), "two steps"),
        (bad(3, Tier::Hot8, Tier::Warm7), "pinned"),
        (bad(1, Tier::Warm7, Tier::Cold3), "twice"),
        (bad(2, Tier::Warm7, Tier::Exact), "into exact"),
    ] {
        assert!(
            matches!(st.apply(&plan), Err(TierError::InvalidMove { .. })),
            "{what}"
        );
    }
    assert!(matches!(
        st.apply(&bad(99, Tier::Warm7, Tier::Cold3)),
        Err(TierError::UnknownBlock { block: 99 })
    ));
    let after: Vec<_> = st.blocks().collect();
    assert_eq!(before, after, "a failed apply changes nothing");
}

#[test]
fn exact_and_pinned_blocks_never_move() {
    let mut st = state_with(TierConfig {
        warm_byte_cap: 1,
        allow_zero_fill: true,
        ..TierConfig::default()
    });
    st.register(BlockSpec::exact(1, N), 0).unwrap();
    st.register(BlockSpec::pinned(2, N, Tier::Warm7), 0)
        .unwrap();
    st.register(BlockSpec::pinned(3, N, Tier::Cold3), 0)
        .unwrap();
    let p = st.maintain(48 * HOUR, Budget::UNLIMITED).unwrap();
    assert!(p.is_empty());
    // The pinned warm block keeps warm bytes over the cap: the plan says so.
    assert!(p.warm_bytes_after > st.config().warm_byte_cap);
    assert_eq!(st.precision(1).unwrap(), Precision::Exact);
}

#[test]
fn a_write_resets_precision_after_moves() {
    let mut st = state_with(TierConfig::default());
    st.register(BlockSpec::tiered(1, N, Tier::Hot8), 0).unwrap();
    st.maintain(HOUR, Budget::UNLIMITED).unwrap();
    st.maintain(2 * HOUR, Budget::UNLIMITED).unwrap();
    assert_eq!(st.tier(1).unwrap(), Tier::Cold3);
    let b = st.error_bound_rel(1).unwrap();
    assert!((b - (1.0 / 254.0 + 1.0 / 126.0 + 1.0 / 6.0)).abs() < 1e-12);
    assert_eq!(st.record_write(1, 3 * HOUR).unwrap(), Tier::Cold3);
    assert_eq!(st.error_bound_rel(1).unwrap(), 1.0 / 6.0);
    let v = st.block(1).unwrap();
    assert_eq!((v.moves, v.flips), (2, 0));
}

#[test]
fn an_exact_source_makes_every_move_a_fresh_encoding() {
    let mut st = state_with(TierConfig::default());
    st.register(
        BlockSpec::tiered(1, N, Tier::Hot8)
            .at_tier(Tier::Cold3)
            .with_exact_source(),
        0,
    )
    .unwrap();
    st.register(BlockSpec::tiered(2, N, Tier::Hot8).at_tier(Tier::Cold3), 0)
        .unwrap();
    for id in [1, 2] {
        reads(&mut st, id, 0, 20 * MINUTE, 10 * SECOND);
    }
    st.maintain(20 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(st.tier(1).unwrap(), Tier::Warm7);
    assert_eq!(st.error_bound_rel(1).unwrap(), 1.0 / 126.0);
    assert_eq!(st.effective_bits(2).unwrap(), Some(3));
    assert!(st.block(1).unwrap().exact_source);
}

#[test]
fn promotions_of_lossy_blocks_can_be_turned_off() {
    let mut st = state_with(TierConfig {
        promote_lossy: false,
        ..TierConfig::default()
    });
    st.register(BlockSpec::tiered(1, N, Tier::Hot8).at_tier(Tier::Cold3), 0)
        .unwrap();
    st.register(
        BlockSpec::tiered(2, N, Tier::Hot8)
            .at_tier(Tier::Cold3)
            .with_exact_source(),
        0,
    )
    .unwrap();
    for id in [1, 2] {
        reads(&mut st, id, 0, 20 * MINUTE, 10 * SECOND);
    }
    let p = st.maintain(20 * MINUTE, Budget::UNLIMITED).unwrap();
    assert_eq!(
        moves_of(&p),
        vec![(2, Tier::Cold3, Tier::Warm7, MoveReason::Promote)]
    );
}

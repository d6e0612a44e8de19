//! Tiers moving under reads, through the facade: real weights written under
//! `TierPolicy::tiered(Tier::Hot8)`, reads recorded with a manual clock, and `maintain(now)`
//! passes that move the blocks nobody reads down (8 -> 7 -> 3 bits), keep the blocks read
//! every minute at 8 bits, and take a cold tensor that starts being read back up, while
//! `Tensor::fidelity` reports after every pass the bits the data really holds (a block that
//! went through 3 bits says 3, whatever its tier now).
//!
//! Reads that only check what a read reports ("probes") are stamped at time 0: a read
//! earlier than a block's last read counts as the same instant, and one read alone gives no
//! rate, so probes never change where a block goes.

// Checks fail the test by panicking, as assertions do.
#![allow(clippy::panic)]

mod common;

use std::ops::Range;

use common::{committed, f32s, Named};
use strata::store::{
    Budget, Clock, Fidelity, ManualClock, Options, Store, Tier, TierConfig, TierOptions, TierPolicy,
};

const SECOND: u64 = 1000;
const MINUTE: u64 = 60 * SECOND;
/// 16384 f32 values per block.
const BLOCK_BYTES: u64 = 64 << 10;
const BLOCK: u64 = BLOCK_BYTES / 4;
const STEP: u64 = 1;

struct Bench {
    store: Store,
    clock: ManualClock,
    /// The attention weight (7 blocks), the position embedding (2) and a layer norm (1).
    attn: Named,
    pos: Named,
    ln: Named,
}

impl Bench {
    fn at(&self, t: u64) {
        self.clock.set(t);
    }

    /// A read recorded at time `t`.
    fn read(&self, t: u64, name: &str, range: Range<u64>) -> Fidelity {
        self.at(t);
        let s = self.store.get_range(name, STEP, range).expect("read");
        s.fidelity
    }

    /// What a read of `name` (whole) reports, stamped at time 0 so that it moves nothing.
    fn probe(&self, t: &Named) -> Fidelity {
        self.at(0);
        let got = self.store.get(&t.name, STEP).expect("probe");
        check_bound(t, &got.data, got.fidelity);
        got.fidelity
    }

    /// The same for a range of elements.
    fn probe_range(&self, name: &str, range: Range<u64>) -> Fidelity {
        self.at(0);
        self.store
            .get_range(name, STEP, range)
            .expect("probe")
            .fidelity
    }

    fn tiers(&self, name: &str) -> Vec<Tier> {
        self.store.versions(name).expect("versions")[0]
            .encodings
            .iter()
            .map(|e| e.tier)
            .collect()
    }
}

/// Every value within the bound the fidelity claims (groups of 64); panics otherwise.
fn check_bound(t: &Named, data: &[u8], fidelity: Fidelity) {
    let bound = match fidelity {
        Fidelity::Exact => 0.0,
        Fidelity::Bounded { max_rel_error, .. } => max_rel_error,
        other => panic!("{}: no bound claimed: {other:?}", t.name),
    };
    let (x, y) = (f32s(&t.data), f32s(data));
    assert_eq!(x.len(), y.len());
    for (gx, gy) in x.chunks(64).zip(y.chunks(64)) {
        let max = gx.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
        for (a, b) in gx.iter().zip(gy) {
            let err = (f64::from(*a) - f64::from(*b)).abs();
            assert!(
                err <= bound * max * (1.0 + 1e-5) + 1e-7,
                "{}: error {err} above {bound} x {max} ({fidelity:?})",
                t.name
            );
        }
    }
}

fn bits(f: Fidelity) -> u8 {
    match f {
        Fidelity::Bounded { bits, .. } => bits,
        other => panic!("expected a bounded read, got {other:?}"),
    }
}

fn tensor(all: &[Named], name: &str, as_name: &str) -> Named {
    let mut t = all
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name} in the committed series"))
        .clone();
    t.name = as_name.to_string();
    t
}

fn bench() -> (tempfile::TempDir, Bench) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (clock, handle) = Clock::manual(0);
    let opts = Options {
        block_bytes: BLOCK_BYTES,
        tiering: TierOptions {
            config: TierConfig::default(),
            budget: Budget::UNLIMITED,
            clock,
            ..TierOptions::default()
        },
        ..Options::default()
    };
    let store = Store::open_with(dir.path().join("tiers.strata"), opts).expect("open");
    store
        .set_policy("*", TierPolicy::tiered(Tier::Hot8))
        .expect("policy");
    let all = committed(430, false);
    let b = Bench {
        store,
        clock: handle,
        attn: tensor(&all, "blocks.0.attn.in_proj_weight", "attn.w"),
        pos: tensor(&all, "pos.weight", "pos"),
        ln: tensor(&all, "blocks.0.ln1.weight", "ln"),
    };
    for t in [&b.attn, &b.pos, &b.ln] {
        b.store.put(&t.name, STEP, &t.as_ref()).expect("put");
    }
    (dir, b)
}

#[test]
fn rarely_read_blocks_move_down_and_read_ones_stay_or_come_up() {
    let (_dir, b) = bench();
    let attn_elems = b.attn.data.len() as u64 / 4;
    let hot = 0..3 * BLOCK; // blocks 0, 1, 2 of the attention weight: read every minute
    let idle = 3 * BLOCK..attn_elems; // blocks 3..=6: never read
    assert_eq!(b.tiers("attn.w").len(), 7);
    assert_eq!(b.tiers("pos").len(), 2);
    assert!(b.tiers("attn.w").iter().all(|t| *t == Tier::Hot8));
    assert_eq!(bits(b.probe(&b.attn)), 8);

    let hot8 = |tiers: &[Tier]| tiers.iter().all(|t| *t == Tier::Hot8);
    let all_at = |tiers: &[Tier], want: Tier| tiers.iter().all(|t| *t == want);

    // Phase 1: the first three blocks of the attention weight and the layer norm are read
    // every minute, the rest never. A pass every 11 minutes (a block stays at least 10
    // minutes in a tier).
    let mut now = 0;
    for (pass, (idle_tier, idle_bits)) in [(Tier::Warm7, 7u8), (Tier::Cold3, 3), (Tier::Cold3, 3)]
        .into_iter()
        .enumerate()
    {
        for _ in 0..11 {
            now += MINUTE;
            b.read(now, "attn.w", hot.clone());
            b.read(now, "ln", 0..192);
        }
        let report = b.store.maintain(now).expect("maintain");
        let attn = b.tiers("attn.w");
        eprintln!(
            "pass {pass} at {} min: {report:?}; attn.w {attn:?}, pos {:?}, ln {:?}",
            now / MINUTE,
            b.tiers("pos"),
            b.tiers("ln")
        );
        // The read blocks stay at 8 bits, the others move down one tier a pass.
        assert!(hot8(&attn[..3]), "pass {pass}: {attn:?}");
        assert!(all_at(&attn[3..], idle_tier), "pass {pass}: {attn:?}");
        assert!(all_at(&b.tiers("pos"), idle_tier), "pass {pass}");
        assert!(hot8(&b.tiers("ln")), "pass {pass}");
        if pass < 2 {
            assert_eq!(report.moves, 4 + 2, "pass {pass}: {report:?}");
        } else {
            // Nothing left to move: no block flaps.
            assert_eq!(report.moves, 0, "pass {pass}: {report:?}");
        }
        // What reads report: the worst block read.
        assert_eq!(bits(b.read(now, "attn.w", hot.clone())), 8);
        assert_eq!(bits(b.read(now, "ln", 0..192)), 8);
        assert_eq!(bits(b.probe_range("attn.w", idle.clone())), idle_bits);
        assert_eq!(
            bits(b.probe(&b.attn)),
            idle_bits,
            "the whole tensor: its worst block"
        );
        assert_eq!(bits(b.probe(&b.pos)), idle_bits);
    }

    // Phase 2: the position embedding, cold, is read every 20 seconds from now on. It goes
    // back up to 8 bits; its reads still say 3 bits, since its data went through 3 bits.
    // The idle blocks stay cold, the read ones hot.
    let mut pos_tiers = Vec::new();
    for pass in 0..4 {
        for _ in 0..11 {
            for _ in 0..3 {
                now += 20 * SECOND;
                b.read(now, "pos", 0..b.pos.data.len() as u64 / 4);
            }
            b.read(now, "attn.w", hot.clone());
            b.read(now, "ln", 0..192);
        }
        let report = b.store.maintain(now).expect("maintain");
        let pos = b.tiers("pos");
        eprintln!(
            "pass {} at {} min: {report:?}; pos {pos:?}",
            pass + 3,
            now / MINUTE
        );
        assert!(pos.iter().all(|t| *t == pos[0]), "{pos:?}");
        assert!(
            pos[0] != Tier::Cold3,
            "pass {pass}: pos read 3 times a minute stays cold"
        );
        pos_tiers.push(pos[0]);
        let got = b.store.get("pos", STEP).expect("get");
        check_bound(&b.pos, &got.data, got.fidelity);
        assert_eq!(
            bits(got.fidelity),
            3,
            "promoted data keeps its real precision"
        );
        let attn = b.tiers("attn.w");
        assert!(
            hot8(&attn[..3]) && all_at(&attn[3..], Tier::Cold3),
            "{attn:?}"
        );
        assert_eq!(bits(b.read(now, "attn.w", hot.clone())), 8);
    }
    // One tier a pass (a block stays 10 minutes in a tier): 3 -> 7 -> 8 bits, then it stays.
    assert_eq!(
        pos_tiers,
        [Tier::Warm7, Tier::Hot8, Tier::Hot8, Tier::Hot8],
        "pos, read 3 times a minute"
    );
    let report = b.store.verify().expect("verify");
    assert!(report.is_ok(), "{:?}", report.issues);
}

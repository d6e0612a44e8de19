//! The planner: one pass over the blocks to gather candidates, then the phases.
//!
//! Candidates are 24 bytes and carry what the phases need (tier, size, spacing), so that
//! processing them in sorted order does not chase the block records at random. Sort keys
//! are 32-bit: scores as f32 bits (which order like the values for non-negative floats),
//! recency in whole seconds. Ties are broken by block id, so the order is total.

use std::cell::Cell;
use std::cmp::Ordering;

use super::{Budget, Move, MoveReason, Plan};
use crate::clock::{Tick, SECOND};
use crate::state::TierState;
use crate::tier::{BlockId, Policy, ReconstructPolicy, Tier};

const NONE: u32 = u32::MAX;

/// A candidate move, ordered by `(key, id)`.
#[derive(Debug, Clone, Copy)]
struct Cand {
    id: BlockId,
    key: u32,
    slot: u32,
    values: u32,
    tier: Tier,
    /// Last move `cap_min_interval` ago or more.
    spaced: bool,
}

impl Cand {
    #[inline]
    fn order(&self) -> u128 {
        (u128::from(self.key) << 64) | u128::from(self.id)
    }
}

fn by_key(a: &Cand, b: &Cand) -> Ordering {
    a.order().cmp(&b.order())
}

/// Ascending key of a non-negative score.
fn score_key(score: f64) -> u32 {
    (score.max(0.0) as f32).to_bits()
}

/// Ascending key of a recency (whole seconds, saturating).
fn recency_key(t: Tick) -> u32 {
    u32::try_from(t / SECOND).unwrap_or(u32::MAX)
}

/// Candidate lists gathered in one pass over the blocks.
#[derive(Default)]
struct Candidates {
    warm_down: Vec<Cand>,
    warm_up: Vec<Cand>,
    hot_down: Vec<Cand>,
    cold_up: Vec<Cand>,
    absent: Vec<Cand>,
}

/// What a phase does after one candidate.
enum Step {
    Next,
    Stop,
}

pub(super) struct Planner<'a> {
    st: &'a TierState,
    now: Tick,
    budget: Budget,
    cap: u64,
    low: u64,
    ops: u32,
    bytes: u64,
    warm: u64,
    moves: Vec<Move>,
    /// Per slot: index of its move in `moves`, or `NONE`.
    moved: Vec<u32>,
    deferred: u32,
    /// Every tiered warm block, least recently used first; built on first use.
    lru: Option<Vec<Cand>>,
    /// Sizes per tier of the last block size looked up (blocks mostly share one size).
    memo: Cell<(u32, [u64; 6])>,
}

impl<'a> Planner<'a> {
    pub(super) fn new(st: &'a TierState, now: Tick, budget: Budget) -> Self {
        let first = st.meta.iter().find(|m| m.live).map_or(1, |m| m.values);
        Self {
            st,
            now,
            budget,
            cap: st.config.warm_byte_cap,
            low: st.config.warm_low_bytes(),
            ops: 0,
            bytes: 0,
            warm: st.warm_bytes(),
            moves: Vec::new(),
            moved: vec![NONE; st.slots()],
            deferred: 0,
            lru: None,
            memo: Cell::new((first, st.sizes.table(first))),
        }
    }

    pub(super) fn run(mut self) -> Plan {
        let warm_before = self.warm;
        let c = self.gather();
        let wanted = c.warm_down.len()
            + c.warm_up.len()
            + c.hot_down.len()
            + c.cold_up.len()
            + c.absent.len();
        self.moves
            .reserve((self.budget.max_ops as usize).min(wanted + 64));
        let Candidates {
            mut warm_down,
            mut warm_up,
            mut hot_down,
            mut cold_up,
            mut absent,
        } = c;
        self.in_order(&mut warm_down, |p, x| {
            p.push(x, Tier::Cold3, MoveReason::Demote);
            Step::Next
        });
        self.in_order(&mut warm_up, |p, x| {
            p.push(x, Tier::Hot8, MoveReason::Promote);
            Step::Next
        });
        if self.warm > self.cap {
            self.relieve();
        }
        self.hot_down(&mut hot_down);
        self.in_order(&mut cold_up, |p, x| {
            match p.landing(x) {
                Some(to) => {
                    p.push(x, to, MoveReason::Promote);
                }
                None => p.deferred += 1,
            }
            Step::Next
        });
        self.in_order(&mut absent, |p, x| {
            if p.rebuildable(x.slot) {
                p.push(x, Tier::Absent, MoveReason::Absent);
            }
            Step::Next
        });
        if self.warm < self.low && !self.out_of_ops() {
            let mut restore = self.restore_candidates();
            self.in_order(&mut restore, |p, x| p.restore(x));
        }
        Plan {
            now: self.now,
            moves: self.moves,
            bytes_reencoded: self.bytes,
            warm_bytes_before: warm_before,
            warm_bytes_after: self.warm,
            deferred: self.deferred,
        }
    }

    /// One pass over the blocks: scores and candidate lists of score-driven moves.
    fn gather(&self) -> Candidates {
        let st = self.st;
        let cfg = &st.config;
        let mut c = Candidates::default();
        for (slot, m) in st.meta.iter().enumerate() {
            if !m.live
                || !matches!(m.policy, Policy::Tiered { .. })
                || m.tier == Tier::Absent
                || self.now.saturating_sub(m.last_move) < cfg.min_residency
            {
                continue;
            }
            let cand = |key| Cand {
                id: m.id,
                key,
                slot: slot as u32,
                values: m.values,
                tier: m.tier,
                spaced: self.now.saturating_sub(m.last_move) >= cfg.cap_min_interval,
            };
            let score = st.access[slot].stats.score(self.now, &cfg.score);
            let may_promote = cfg.promote_lossy || m.exact_source;
            match m.tier {
                Tier::Hot8 if score < cfg.hot_exit => {
                    c.hot_down
                        .push(cand(u32::MAX - recency_key(st.recency(slot))));
                }
                Tier::Warm7 | Tier::Warm5 => {
                    if score >= cfg.hot_enter && may_promote {
                        c.warm_up.push(cand(u32::MAX - score_key(score)));
                    } else if score < cfg.warm_exit {
                        c.warm_down.push(cand(score_key(score)));
                    }
                }
                Tier::Cold3 => {
                    if score >= cfg.warm_enter && may_promote {
                        c.cold_up.push(cand(u32::MAX - score_key(score)));
                    } else if score < cfg.absent_min_score {
                        let recency = st.recency(slot);
                        if self.now.saturating_sub(recency) >= cfg.absent_age {
                            c.absent.push(cand(recency_key(recency)));
                        }
                    }
                }
                _ => {}
            }
        }
        c
    }

    /// Tiered warm blocks, least recently used first (sorted once, on first use).
    fn lru(&mut self) -> Vec<Cand> {
        if let Some(l) = self.lru.take() {
            return l;
        }
        let st = self.st;
        let mut l: Vec<Cand> = st
            .meta
            .iter()
            .enumerate()
            .filter(|(_, m)| m.live && m.policy.is_tiered() && m.tier.is_warm())
            .map(|(slot, m)| Cand {
                id: m.id,
                key: recency_key(st.recency(slot)),
                slot: slot as u32,
                values: m.values,
                tier: m.tier,
                spaced: self.spaced_at(m.last_move),
            })
            .collect();
        l.sort_unstable_by(by_key);
        l
    }

    /// `Warm5` blocks read since their last move, which was `cap_min_interval` ago or more,
    /// whose score would admit them to warm now (`warm_enter`): a block about to cool down
    /// is not worth a re-encode.
    fn restore_candidates(&self) -> Vec<Cand> {
        let st = self.st;
        let cfg = &st.config;
        st.meta
            .iter()
            .enumerate()
            .filter(|&(slot, m)| {
                m.live
                    && m.policy.is_tiered()
                    && m.tier == Tier::Warm5
                    && (cfg.promote_lossy || m.exact_source)
                    && self.moved[slot] == NONE
                    && self.spaced_at(m.last_move)
                    && st.access[slot]
                        .stats
                        .last_read()
                        .is_some_and(|r| r > m.last_move)
                    && st.access[slot].stats.score(self.now, &cfg.score) >= cfg.warm_enter
            })
            .map(|(slot, m)| Cand {
                id: m.id,
                key: u32::MAX - recency_key(st.recency(slot)),
                slot: slot as u32,
                values: m.values,
                tier: m.tier,
                spaced: true,
            })
            .collect()
    }

    /// Runs `f` on the candidates in `(key, id)` order until it stops or the ops budget
    /// runs out (the rest count as deferred). Sorts only as far as the budget can reach:
    /// a chunk of the smallest `remaining ops` candidates at a time.
    fn in_order(&mut self, list: &mut [Cand], mut f: impl FnMut(&mut Self, Cand) -> Step) {
        let mut start = 0;
        while start < list.len() {
            let left = (self.budget.max_ops - self.ops) as usize;
            if left == 0 {
                self.deferred += (list.len() - start) as u32;
                return;
            }
            let rest = &mut list[start..];
            let take = left.min(rest.len());
            if take < rest.len() {
                rest.select_nth_unstable_by(take - 1, by_key);
            }
            rest[..take].sort_unstable_by(by_key);
            for &x in &list[start..start + take] {
                if let Step::Stop = f(self, x) {
                    return;
                }
            }
            start += take;
        }
    }

    /// Bytes of a block of `values` values in `tier`.
    fn size(&self, values: u32, tier: Tier) -> u64 {
        let (v, table) = self.memo.get();
        if v == values {
            return table[tier.index()];
        }
        let table = self.st.sizes.table(values);
        self.memo.set((values, table));
        table[tier.index()]
    }

    fn warm_size(&self, values: u32, tier: Tier) -> u64 {
        if tier.is_warm() {
            self.size(values, tier)
        } else {
            0
        }
    }

    /// Whether a last move at `last_move` is `cap_min_interval` ago or more.
    fn spaced_at(&self, last_move: Tick) -> bool {
        self.now.saturating_sub(last_move) >= self.st.config.cap_min_interval
    }

    fn is_moved(&self, slot: u32) -> bool {
        self.moved[slot as usize] != NONE
    }

    fn out_of_ops(&self) -> bool {
        self.ops >= self.budget.max_ops
    }

    fn fits(&self, ops: u32, bytes: u64) -> bool {
        self.ops
            .checked_add(ops)
            .is_some_and(|o| o <= self.budget.max_ops)
            && self
                .bytes
                .checked_add(bytes)
                .is_some_and(|b| b <= self.budget.max_bytes_reencoded)
    }

    /// Bytes a move writes: the block at its new tier (nothing for Tier 0).
    fn cost(&self, x: &Cand, to: Tier) -> u64 {
        if to == Tier::Absent {
            0
        } else {
            self.size(x.values, to)
        }
    }

    /// Adds a move if the block has not moved in this plan and the budget allows.
    fn push(&mut self, x: Cand, to: Tier, reason: MoveReason) -> bool {
        if self.is_moved(x.slot) {
            return false;
        }
        if !self.fits(1, self.cost(&x, to)) {
            self.deferred += 1;
            return false;
        }
        self.commit(x, to, reason);
        true
    }

    fn commit(&mut self, x: Cand, to: Tier, reason: MoveReason) {
        let from = x.tier;
        self.ops += 1;
        self.bytes += self.cost(&x, to);
        self.warm = self.warm - self.warm_size(x.values, from) + self.warm_size(x.values, to);
        self.moved[x.slot as usize] = self.moves.len() as u32;
        self.moves.push(Move {
            block: x.id,
            from,
            to,
            reason,
        });
    }

    /// Phase 3: bring warm bytes back under the cap.
    fn relieve(&mut self) {
        let lru = self.lru();
        for &x in &lru {
            if self.warm <= self.cap || self.out_of_ops() {
                break;
            }
            if x.tier == Tier::Warm7 {
                self.push(x, Tier::Warm5, MoveReason::CapSqueeze);
            }
        }
        for &x in &lru {
            if self.warm <= self.cap {
                break;
            }
            let mi = self.moved[x.slot as usize];
            if mi == NONE {
                if !self.out_of_ops() {
                    self.push(x, Tier::Cold3, MoveReason::CapEvict);
                }
            } else if self.moves[mi as usize].reason == MoveReason::CapSqueeze {
                // Turn this plan's 7 -> 5 into 7 -> 3: same op, fewer bytes written.
                let s5 = self.size(x.values, Tier::Warm5);
                self.bytes = self.bytes - s5 + self.size(x.values, Tier::Cold3);
                self.warm -= s5;
                let mv = &mut self.moves[mi as usize];
                mv.to = Tier::Cold3;
                mv.reason = MoveReason::CapEvict;
            }
        }
        self.lru = Some(lru);
    }

    /// Where a block entering warm lands: `Warm7` below the low watermark, `Warm5` within
    /// the cap, or `None`.
    fn landing(&self, x: Cand) -> Option<Tier> {
        if self.warm + self.size(x.values, Tier::Warm7) < self.low {
            Some(Tier::Warm7)
        } else if self.warm + self.size(x.values, Tier::Warm5) <= self.cap {
            Some(Tier::Warm5)
        } else {
            None
        }
    }

    /// Phase 4: hot -> warm, most recently used first, making room from less recently
    /// used warm blocks if needed.
    fn hot_down(&mut self, list: &mut [Cand]) {
        let mut lru: Option<Vec<Cand>> = None;
        let mut room_ok = true;
        let (mut cur7, mut cur5) = (0usize, 0usize);
        let mut victims: Vec<(Cand, Tier, MoveReason)> = Vec::new();
        self.in_order(list, |p, x| {
            if let Some(to) = p.landing(x) {
                p.push(x, to, MoveReason::Demote);
                return Step::Next;
            }
            if !room_ok {
                p.deferred += 1;
                return Step::Next;
            }
            let lru = lru.get_or_insert_with(|| p.lru());
            let recency = u32::MAX - x.key;
            let s5 = p.size(x.values, Tier::Warm5);
            let need = (p.warm + s5).saturating_sub(p.cap);
            let mut freed = 0u64;
            let mut cost = s5;
            victims.clear();
            let mut i7 = cur7;
            while freed < need && i7 < lru.len() && lru[i7].key < recency {
                let v = lru[i7];
                if v.tier == Tier::Warm7 && v.spaced && !p.is_moved(v.slot) {
                    let v5 = p.size(v.values, Tier::Warm5);
                    freed += p.size(v.values, Tier::Warm7) - v5;
                    cost += v5;
                    victims.push((v, Tier::Warm5, MoveReason::CapSqueeze));
                }
                i7 += 1;
            }
            let mut i5 = cur5;
            while freed < need && i5 < lru.len() && lru[i5].key < recency {
                let v = lru[i5];
                if v.tier == Tier::Warm5 && v.spaced && !p.is_moved(v.slot) {
                    freed += p.size(v.values, Tier::Warm5);
                    cost += p.size(v.values, Tier::Cold3);
                    victims.push((v, Tier::Cold3, MoveReason::CapEvict));
                }
                i5 += 1;
            }
            if freed < need || !p.fits(1 + victims.len() as u32, cost) {
                // Later candidates are less recent (fewer victims) and cost no less: stop
                // making room.
                room_ok = false;
                p.deferred += 1;
                return Step::Next;
            }
            for &(v, to, reason) in &victims {
                p.commit(v, to, reason);
            }
            p.commit(x, Tier::Warm5, MoveReason::Demote);
            cur7 = i7;
            cur5 = i5;
            Step::Next
        });
        if let Some(l) = lru {
            self.lru = Some(l);
        }
    }

    /// Whether the block in `slot` can go to Tier 0: zero fill allowed for `None`, or its
    /// reconstruction chain (through bases that are absent now or in this plan) stays
    /// within `max_reconstruct_depth`. A base the policy does not track counts as held.
    fn rebuildable(&self, slot: u32) -> bool {
        let cfg = &self.st.config;
        let mut depth = 1u32;
        let mut policy = self.st.meta[slot as usize].reconstruct;
        loop {
            let base = match policy {
                ReconstructPolicy::None => return depth == 1 && cfg.allow_zero_fill,
                ReconstructPolicy::Delta { base } => base,
                ReconstructPolicy::Factor { source } => source,
            };
            let Some(b) = self.st.slot_opt(base) else {
                return true;
            };
            let bm = &self.st.meta[b];
            let planned_absent = {
                let mi = self.moved[b];
                mi != NONE && self.moves[mi as usize].to == Tier::Absent
            };
            if bm.tier != Tier::Absent && !planned_absent {
                return true;
            }
            depth += 1;
            if depth > u32::from(cfg.max_reconstruct_depth) {
                return false;
            }
            policy = bm.reconstruct;
        }
    }

    /// Phase 7: a 5 -> 7 restore if warm bytes stay below the low watermark.
    fn restore(&mut self, x: Cand) -> Step {
        if self.warm >= self.low {
            return Step::Stop;
        }
        let grow = self.size(x.values, Tier::Warm7) - self.size(x.values, Tier::Warm5);
        if self.warm + grow < self.low {
            self.push(x, Tier::Warm7, MoveReason::CapRestore);
        }
        Step::Next
    }
}

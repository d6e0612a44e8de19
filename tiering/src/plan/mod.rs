//! Maintenance plans: scores turned into moves, within a budget, deterministically.
//!
//! [`plan`] reads the state and the time and returns the moves; [`apply`] records them once
//! the store has re-encoded the blocks. Planning is a pure function of the state and `now`:
//! candidates are sorted by explicit keys with the block id as the last tie-break, so
//! neither hash order nor registration order reaches the output.
//!
//! Phases, in budget priority order (each block moves at most once per plan):
//!
//! 1. **Warm -> Cold** (score below `warm_exit`), coldest first: frees warm bytes.
//! 2. **Warm -> Hot** (score at or above `hot_enter`), hottest first: frees warm bytes.
//! 3. **Cap relief**, only when warm bytes exceed `warm_byte_cap`: the least recently used
//!    `Warm7` blocks go to `Warm5` until under the cap; if every `Warm7` block is squeezed
//!    and warm is still over, the least recently used warm blocks go to `Cold3` (a squeeze
//!    of the same plan becomes `Warm7 -> Cold3`). Cap relief ignores `min_residency` and
//!    `cap_min_interval`: the cap is a limit. Warm bytes exceed it only after something
//!    outside the plans added warm data (registration, a write reviving a Tier 0 block, a
//!    lower cap), because no phase below lets warm bytes pass the cap.
//! 4. **Hot -> Warm** (score below `hot_exit`), most recently used first. A block lands at
//!    `Warm7` if warm bytes stay below `warm_low_watermark * cap`, else at `Warm5` if they
//!    stay within the cap, else it makes room by squeezing or evicting warm blocks used
//!    less recently than itself and last moved `cap_min_interval` ago or more (in the same
//!    budget), else it waits.
//! 5. **Cold -> Warm** (score at or above `warm_enter`), hottest first, landing as in 4 but
//!    never making room: a block does not push others out on its way up.
//! 6. **Cold -> Absent** (score below `absent_min_score`, idle `absent_age`, rebuildable
//!    within `max_reconstruct_depth` or zero fill allowed), least recently used first.
//! 7. **Warm5 -> Warm7 restores**, most recently used first, only for blocks read since
//!    their last move, `cap_min_interval` after it, with a score at or above `warm_enter`
//!    (a block about to cool down is not worth a re-encode), and only while warm bytes stay
//!    below the low watermark.
//!
//! With `promote_lossy` off, phases 2, 5 and 7 skip blocks without an exact source.
//!
//! Score-driven moves (1, 2, 4, 5, 6) need `min_residency` in the current tier, and cap
//! moves other than relief need `cap_min_interval` since the block's last move, so outside
//! relief consecutive moves of a block are at least `min(min_residency, cap_min_interval)`
//! apart.

use crate::clock::Tick;
use crate::error::TierError;
use crate::state::TierState;
use crate::tier::{BlockId, Tier};

mod planner;
#[cfg(test)]
mod tests;

/// What one maintenance pass may spend.
///
/// ```
/// use strata_tiering::Budget;
/// let b = Budget::new(64 << 20, 1_000);
/// assert_eq!(b.max_ops, 1_000);
/// assert_eq!(Budget::UNLIMITED.max_ops, u32::MAX);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes the store may write re-encoding blocks (each move costs the block's size at its
    /// new tier; a move to `Absent` costs 0).
    pub max_bytes_reencoded: u64,
    /// Moves (re-encodes and drops) per pass.
    pub max_ops: u32,
}

impl Budget {
    /// No limit.
    pub const UNLIMITED: Budget = Budget {
        max_bytes_reencoded: u64::MAX,
        max_ops: u32::MAX,
    };

    /// A budget of `max_bytes_reencoded` bytes and `max_ops` moves.
    pub const fn new(max_bytes_reencoded: u64, max_ops: u32) -> Self {
        Self {
            max_bytes_reencoded,
            max_ops,
        }
    }
}

/// Why a block moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoveReason {
    /// Its score crossed an entry threshold upward.
    Promote,
    /// Its score fell below an exit threshold.
    Demote,
    /// Warm bytes over the cap: 7 -> 5 bits.
    CapSqueeze,
    /// Warm bytes over the cap with no 7-bit block left to squeeze: warm -> cold.
    CapEvict,
    /// Warm bytes below the low watermark and the block was read: 5 -> 7 bits.
    CapRestore,
    /// Tier 0: idle, low score, rebuildable (or zero fill allowed).
    Absent,
}

/// One block's move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Move {
    /// The block.
    pub block: BlockId,
    /// Its tier now.
    pub from: Tier,
    /// Its tier after the move (one step away: [`Tier::is_one_step`]).
    pub to: Tier,
    /// Why.
    pub reason: MoveReason,
}

/// The moves of one maintenance pass, in priority order (a store that stops early should
/// apply a prefix).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The time the plan was made for; [`apply`] records it as the moves' time.
    pub now: Tick,
    /// The moves, at most one per block.
    pub moves: Vec<Move>,
    /// Bytes the moves write (sum of the new tiers' sizes).
    pub bytes_reencoded: u64,
    /// Warm bytes before the plan.
    pub warm_bytes_before: u64,
    /// Warm bytes once the plan is applied.
    pub warm_bytes_after: u64,
    /// Moves the policy wanted but left out (budget, or no room under the cap).
    pub deferred: u32,
}

impl Plan {
    /// Whether the plan moves nothing.
    pub fn is_empty(&self) -> bool {
        self.moves.is_empty()
    }
}

/// Makes the plan for `now`. See the [module docs](self) for the phases.
///
/// ```
/// use strata_tiering::{plan, apply, BlockSpec, Budget, Tier, TierConfig, TierState, HOUR};
/// let mut st = TierState::new(TierConfig::default())?;
/// for id in 0..3 {
///     st.register(BlockSpec::tiered(id, 4096, Tier::Hot8), 0)?;
/// }
/// let p = plan(&st, HOUR, Budget::new(u64::MAX, 2));
/// assert_eq!(p.moves.len(), 2); // the budget allows two of the three demotions
/// assert_eq!(p.deferred, 1);
/// assert_eq!(p, plan(&st, HOUR, Budget::new(u64::MAX, 2))); // deterministic
/// apply(&mut st, &p)?;
/// assert_eq!(st.warm_bytes(), p.warm_bytes_after);
/// # Ok::<(), strata_tiering::TierError>(())
/// ```
pub fn plan(state: &TierState, now: Tick, budget: Budget) -> Plan {
    planner::Planner::new(state, now, budget).run()
}

/// Records a plan's moves (after the store re-encoded the blocks), at `plan.now`.
///
/// # Errors
/// [`TierError::UnknownBlock`], [`TierError::StaleMove`] when a block is no longer at the
/// move's `from` tier, [`TierError::InvalidMove`] for a move the policy never makes or a
/// block listed twice. All moves are checked first: on error nothing is applied.
pub fn apply(state: &mut TierState, plan: &Plan) -> Result<(), TierError> {
    let mut slots = Vec::with_capacity(plan.moves.len());
    for mv in &plan.moves {
        let slot = state.slot(mv.block)?;
        check_move(state, slot, mv)?;
        slots.push(slot as u32);
    }
    let mut sorted = slots.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        let m = &state.meta[w[0] as usize];
        return Err(TierError::InvalidMove {
            block: m.id,
            from: m.tier,
            to: m.tier,
            reason: "block listed twice in one plan",
        });
    }
    for (mv, &slot) in plan.moves.iter().zip(&slots) {
        state.move_slot(slot as usize, mv.to, plan.now);
    }
    Ok(())
}

fn check_move(state: &TierState, slot: usize, mv: &Move) -> Result<(), TierError> {
    let m = &state.meta[slot];
    if m.tier != mv.from {
        return Err(TierError::StaleMove {
            block: mv.block,
            planned: mv.from,
            actual: m.tier,
        });
    }
    let invalid = |reason| {
        Err(TierError::InvalidMove {
            block: mv.block,
            from: mv.from,
            to: mv.to,
            reason,
        })
    };
    if !m.policy.is_tiered() {
        return invalid("block is not tiered");
    }
    if mv.from == Tier::Absent {
        return invalid("only a write brings a block back from Tier 0");
    }
    if mv.to == Tier::Exact || mv.from == Tier::Exact {
        return invalid("the policy never moves into or out of Exact");
    }
    if !mv.from.is_one_step(mv.to) {
        return invalid("not one step");
    }
    Ok(())
}

impl TierState {
    /// [`plan`] as a method.
    pub fn plan(&self, now: Tick, budget: Budget) -> Plan {
        plan(self, now, budget)
    }

    /// [`apply`] as a method.
    ///
    /// # Errors
    /// As [`apply`].
    pub fn apply(&mut self, plan: &Plan) -> Result<(), TierError> {
        apply(self, plan)
    }

    /// Plans and applies at once (for callers that re-encode synchronously, and for tests).
    ///
    /// # Errors
    /// None in practice: a fresh plan always applies. The `Result` is [`apply`]'s.
    pub fn maintain(&mut self, now: Tick, budget: Budget) -> Result<Plan, TierError> {
        let p = plan(self, now, budget);
        apply(self, &p)?;
        Ok(p)
    }
}

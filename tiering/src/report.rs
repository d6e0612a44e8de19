//! [`MaintainReport`]: what one maintenance pass of a store did, the same report for every
//! store of Strata.

use crate::plan::{Move, MoveReason, Plan};
use crate::state::TierState;

/// What one maintenance pass did: the moves by reason, the bytes written, warm bytes before
/// and after, and what was left for later. Every store of Strata returns it (strata-store's
/// `Store::maintain`, strata-wasm's `TieredStore::maintain`).
///
/// [`MaintainReport::from_plan`] fills in what the policy knows; the store adds what it
/// wrote. `converted` and `stats_saved` are the on-disk store's alone (lossless versions
/// converted to a tiered policy, read statistics written back) and 0 from a store that
/// does neither, such as the in-memory WASM store.
///
/// ```
/// use strata_tiering::{BlockSpec, Budget, MaintainReport, Tier, TierConfig, TierState, HOUR};
///
/// let mut st = TierState::new(TierConfig::default())?;
/// for id in 0..3 {
///     st.register(BlockSpec::tiered(id, 4096, Tier::Hot8), 0)?;
/// }
/// let plan = st.plan(HOUR, Budget::new(u64::MAX, 2));
/// st.apply(&plan)?; // after re-encoding both blocks
/// let mut report = MaintainReport::from_plan(&plan, &plan.moves, &st);
/// report.bytes_written += 2 * 3_000; // what the store wrote
/// assert_eq!((report.moves, report.demoted, report.deferred), (2, 2, 1));
/// assert_eq!(report.warm_bytes_after, st.warm_bytes());
/// # Ok::<(), strata_tiering::TierError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MaintainReport {
    /// Blocks moved between tiers (the sum of the six counts by reason below).
    pub moves: usize,
    /// Moves up because the score crossed an entry threshold ([`MoveReason::Promote`]).
    pub promoted: usize,
    /// Moves down because the score fell below an exit threshold ([`MoveReason::Demote`]).
    pub demoted: usize,
    /// 7 -> 5 bits under `warm_byte_cap` pressure ([`MoveReason::CapSqueeze`]).
    pub squeezed: usize,
    /// Warm -> cold under `warm_byte_cap` pressure ([`MoveReason::CapEvict`]).
    pub evicted: usize,
    /// 5 -> 7 bits below the low watermark ([`MoveReason::CapRestore`]).
    pub restored: usize,
    /// Cold -> Tier 0 ([`MoveReason::Absent`]).
    pub absent: usize,
    /// Bytes of the new segments (and residuals) the store wrote.
    pub bytes_written: u64,
    /// Warm bytes (7- and 5-bit blocks, by the policy's size model) before the pass.
    pub warm_bytes_before: u64,
    /// Warm bytes after the pass.
    pub warm_bytes_after: u64,
    /// Moves the policy wanted but left for a later pass (budget, no room under the cap,
    /// or a block the store could not move this time).
    pub deferred: u32,
    /// Lossless versions converted to their tiered policy's start tier. On-disk store
    /// only: 0 elsewhere.
    pub converted: usize,
    /// Blocks' read statistics written back. On-disk store only: 0 elsewhere.
    pub stats_saved: usize,
}

impl MaintainReport {
    /// The report of a pass that carried out the moves `applied` of `plan` (a prefix, or
    /// any subset a store managed to prepare) and then applied them to `state`: those moves
    /// counted by reason ([`MaintainReport::tally`]), warm bytes before from the plan and
    /// after from `state`, and as deferred the plan's own plus the planned moves not carried
    /// out. The store adds `bytes_written` (and, on disk, `converted` and `stats_saved`).
    pub fn from_plan(plan: &Plan, applied: &[Move], state: &TierState) -> Self {
        let skipped = plan.moves.len().saturating_sub(applied.len());
        let mut report = MaintainReport {
            warm_bytes_before: plan.warm_bytes_before,
            warm_bytes_after: state.warm_bytes(),
            deferred: plan
                .deferred
                .saturating_add(u32::try_from(skipped).unwrap_or(u32::MAX)),
            ..MaintainReport::default()
        };
        report.tally(applied);
        report
    }

    /// Counts `moves`: each adds one to `moves` and one to the count of its reason.
    pub fn tally(&mut self, moves: &[Move]) {
        for mv in moves {
            self.moves += 1;
            *self.count_mut(mv.reason) += 1;
        }
    }

    /// The moves of one reason.
    pub fn count(&self, reason: MoveReason) -> usize {
        match reason {
            MoveReason::Promote => self.promoted,
            MoveReason::Demote => self.demoted,
            MoveReason::CapSqueeze => self.squeezed,
            MoveReason::CapEvict => self.evicted,
            MoveReason::CapRestore => self.restored,
            MoveReason::Absent => self.absent,
        }
    }

    fn count_mut(&mut self, reason: MoveReason) -> &mut usize {
        match reason {
            MoveReason::Promote => &mut self.promoted,
            MoveReason::Demote => &mut self.demoted,
            MoveReason::CapSqueeze => &mut self.squeezed,
            MoveReason::CapEvict => &mut self.evicted,
            MoveReason::CapRestore => &mut self.restored,
            MoveReason::Absent => &mut self.absent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Tier, TierConfig};

    fn mv(block: u64, from: Tier, to: Tier, reason: MoveReason) -> Move {
        Move {
            block,
            from,
            to,
            reason,
        }
    }

    #[test]
    fn tallies_every_reason() {
        let moves = [
            mv(1, Tier::Warm7, Tier::Hot8, MoveReason::Promote),
            mv(2, Tier::Hot8, Tier::Warm7, MoveReason::Demote),
            mv(3, Tier::Hot8, Tier::Warm7, MoveReason::Demote),
            mv(4, Tier::Warm7, Tier::Warm5, MoveReason::CapSqueeze),
            mv(5, Tier::Warm5, Tier::Cold3, MoveReason::CapEvict),
            mv(6, Tier::Warm5, Tier::Warm7, MoveReason::CapRestore),
            mv(7, Tier::Cold3, Tier::Absent, MoveReason::Absent),
        ];
        let mut r = MaintainReport::default();
        r.tally(&moves);
        assert_eq!(r.moves, 7);
        assert_eq!(
            (r.promoted, r.demoted, r.squeezed, r.evicted, r.restored, r.absent),
            (1, 2, 1, 1, 1, 1)
        );
        for m in &moves {
            assert!(r.count(m.reason) >= 1);
        }
        assert_eq!(r.count(MoveReason::Demote), 2);
        r.tally(&moves[..1]);
        assert_eq!((r.moves, r.promoted), (8, 2));
    }

    #[test]
    fn from_a_plan_carried_out_in_part() {
        let st = TierState::new(TierConfig::default()).unwrap();
        let before = st.warm_bytes();
        let plan = Plan {
            now: 0,
            moves: vec![
                mv(1, Tier::Hot8, Tier::Warm7, MoveReason::Demote),
                mv(2, Tier::Hot8, Tier::Warm7, MoveReason::Demote),
                mv(3, Tier::Warm7, Tier::Warm5, MoveReason::CapSqueeze),
            ],
            bytes_reencoded: 0,
            warm_bytes_before: 123,
            warm_bytes_after: 456,
            deferred: 4,
        };
        let r = MaintainReport::from_plan(&plan, &plan.moves[..2], &st);
        assert_eq!((r.moves, r.demoted, r.squeezed), (2, 2, 0));
        assert_eq!(r.deferred, 5);
        assert_eq!(r.warm_bytes_before, 123);
        assert_eq!(r.warm_bytes_after, before);
        assert_eq!((r.bytes_written, r.converted, r.stats_saved), (0, 0, 0));
        // Not a prefix: the moves a store could prepare.
        let r = MaintainReport::from_plan(&plan, &[plan.moves[0], plan.moves[2]], &st);
        assert_eq!((r.moves, r.demoted, r.squeezed, r.deferred), (2, 1, 1, 5));
        assert_eq!(
            MaintainReport::from_plan(&plan, &plan.moves, &st).deferred,
            4
        );
    }
}

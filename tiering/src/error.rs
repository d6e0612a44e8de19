//! Errors of the tier policy.

use crate::{BlockId, Policy, Tier};

/// What went wrong, and for which block.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TierError {
    /// A setting is out of range.
    #[error("invalid tier config: {field} {reason}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// The block is not registered.
    #[error("block {block} is not registered")]
    UnknownBlock {
        /// The block.
        block: BlockId,
    },
    /// A [`crate::BlockHandle`] whose block was removed.
    #[error("stale block handle: the block was removed")]
    StaleHandle,
    /// The block is registered already.
    #[error("block {block} is registered already")]
    DuplicateBlock {
        /// The block.
        block: BlockId,
    },
    /// A block's policy, tier and precision do not fit together.
    #[error("block {block}: policy {policy:?} at tier {tier}: {reason}")]
    InvalidBlock {
        /// The block.
        block: BlockId,
        /// Its policy.
        policy: Policy,
        /// Its tier.
        tier: Tier,
        /// What is wrong.
        reason: &'static str,
    },
    /// A plan's move does not start from the block's current tier: the state changed since
    /// the plan was made. Nothing was applied.
    #[error("stale move for block {block}: planned from {planned}, block is at {actual}")]
    StaleMove {
        /// The block.
        block: BlockId,
        /// The tier the plan expected.
        planned: Tier,
        /// The tier the block is at.
        actual: Tier,
    },
    /// A move the policy never makes (more than one step, into or out of `Exact`, out of
    /// `Absent`, on a block that is not tiered, or a block moved twice). Nothing was applied.
    #[error("invalid move for block {block}: {from} -> {to}: {reason}")]
    InvalidMove {
        /// The block.
        block: BlockId,
        /// Tier moved from.
        from: Tier,
        /// Tier moved to.
        to: Tier,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Encoded [`crate::AccessStats`] that cannot be right.
    #[error("invalid access statistics: {reason}")]
    InvalidStats {
        /// What is wrong.
        reason: &'static str,
    },
    /// More blocks than a `u32` index can address.
    #[error("too many blocks: the policy tracks at most {max}")]
    TooManyBlocks {
        /// The limit.
        max: usize,
    },
}

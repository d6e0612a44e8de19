//! Tiers, per-block policies, Tier 0 reconstruct policies, and the bytes a block costs in
//! each tier (from strata-codec's formats).

use std::fmt;

use strata_codec::quant::{payload_size, QuantBits};
use strata_codec::segment::HEADER_LEN;

/// The key the store gives a block. Any `u64` works; the policy only compares and hashes it.
pub type BlockId = u64;

/// Where a block's data lives.
///
/// Tiers form a ladder of *levels*: `Absent` (0) < `Cold3` (1) < `Warm5` = `Warm7` (2) <
/// `Hot8` (3) < `Exact` (4). A planned move changes the level by at most one
/// ([`Tier::is_one_step`]); `Warm7 <-> Warm5` stays on the warm level (the `warm_byte_cap`
/// variant). The policy never moves a block into or out of `Exact`.
///
/// ```
/// use strata_tiering::Tier;
/// assert!(Tier::Hot8.is_one_step(Tier::Warm5));
/// assert!(!Tier::Hot8.is_one_step(Tier::Cold3));
/// assert_eq!(Tier::Warm7.bits(), Some(7));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Tier 0: no data, only metadata and a [`ReconstructPolicy`].
    Absent,
    /// Cold: 3-bit groups (two-level for heavy-tailed groups).
    Cold3,
    /// Warm under `warm_byte_cap` pressure: 5-bit groups.
    Warm5,
    /// Warm: 7-bit groups.
    Warm7,
    /// Hot: 8-bit groups.
    Hot8,
    /// Lossless (checkpoints, [`Policy::Exact`] blocks).
    Exact,
}

impl Tier {
    /// Every tier, `Absent` first.
    pub const ALL: [Tier; 6] = [
        Tier::Absent,
        Tier::Cold3,
        Tier::Warm5,
        Tier::Warm7,
        Tier::Hot8,
        Tier::Exact,
    ];

    /// Position in [`Tier::ALL`] (0..6), for per-tier tables.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Level on the tier ladder: Absent 0, Cold 1, Warm (5 or 7) 2, Hot 3, Exact 4.
    pub const fn level(self) -> u8 {
        match self {
            Tier::Absent => 0,
            Tier::Cold3 => 1,
            Tier::Warm5 | Tier::Warm7 => 2,
            Tier::Hot8 => 3,
            Tier::Exact => 4,
        }
    }

    /// Bits per value of a quantized tier; `None` for `Exact` and `Absent`.
    pub const fn bits(self) -> Option<u8> {
        match self {
            Tier::Cold3 => Some(3),
            Tier::Warm5 => Some(5),
            Tier::Warm7 => Some(7),
            Tier::Hot8 => Some(8),
            Tier::Exact | Tier::Absent => None,
        }
    }

    /// The codec width of a quantized tier.
    pub const fn quant_bits(self) -> Option<QuantBits> {
        match self {
            Tier::Cold3 => Some(QuantBits::B3),
            Tier::Warm5 => Some(QuantBits::B5),
            Tier::Warm7 => Some(QuantBits::B7),
            Tier::Hot8 => Some(QuantBits::B8),
            Tier::Exact | Tier::Absent => None,
        }
    }

    /// Rank used to tell a move's direction: Absent 0, then bits (3, 5, 7, 8), Exact 32.
    /// A move to a higher rank is a promotion.
    pub const fn rank(self) -> u8 {
        match self {
            Tier::Absent => 0,
            Tier::Cold3 => 3,
            Tier::Warm5 => 5,
            Tier::Warm7 => 7,
            Tier::Hot8 => 8,
            Tier::Exact => 32,
        }
    }

    /// Whether this is a warm tier (counts against `warm_byte_cap`).
    pub const fn is_warm(self) -> bool {
        matches!(self, Tier::Warm5 | Tier::Warm7)
    }

    /// Whether a move from `self` to `to` is one step: a different tier whose level differs
    /// by at most one (so `Warm7 <-> Warm5` and `Hot8 <-> Warm5` are single steps,
    /// `Hot8 -> Cold3` is not).
    pub const fn is_one_step(self, to: Tier) -> bool {
        let (a, b) = (self.level(), to.level());
        (self as u8) != (to as u8) && a.abs_diff(b) <= 1
    }

    /// Short lower-case name: `exact`, `hot8`, `warm7`, `warm5`, `cold3`, `absent`.
    pub const fn name(self) -> &'static str {
        match self {
            Tier::Absent => "absent",
            Tier::Cold3 => "cold3",
            Tier::Warm5 => "warm5",
            Tier::Warm7 => "warm7",
            Tier::Hot8 => "hot8",
            Tier::Exact => "exact",
        }
    }

    /// Bytes a block of `values` f32 values costs in this tier, as a strata-codec segment:
    /// the 48-byte header plus the payload in groups of `group_size` (see [`SizeModel`]).
    ///
    /// ```
    /// use strata_tiering::Tier;
    /// // 4096 values in groups of 64: 64 scales + codes, plus the segment header.
    /// assert_eq!(Tier::Hot8.block_bytes(4096, 64), 48 + 64 * 68);
    /// assert_eq!(Tier::Warm7.block_bytes(4096, 64), 48 + 64 * 60);
    /// assert_eq!(Tier::Absent.block_bytes(4096, 64), 0);
    /// ```
    pub fn block_bytes(self, values: u32, group_size: u32) -> u64 {
        SizeModel::new(group_size).block_bytes(self, values)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the policy may treat a block.
///
/// ```
/// use strata_tiering::{Policy, Tier};
/// let p = Policy::Tiered { start: Tier::Hot8 };
/// assert!(p.is_tiered());
/// assert!(!Policy::Pinned(Tier::Warm7).is_tiered());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Lossless forever (checkpoints; the default of `put`). Never moved.
    Exact,
    /// Follows its access score; new data starts at `start` (a quantized tier).
    Tiered {
        /// Tier a freshly written block is encoded at: `Hot8`, `Warm7`, `Warm5` or `Cold3`.
        start: Tier,
    },
    /// Stays at the given tier; never moved.
    Pinned(Tier),
}

impl Policy {
    /// Whether the planner may move blocks with this policy.
    pub const fn is_tiered(self) -> bool {
        matches!(self, Policy::Tiered { .. })
    }

    /// The tier new data is written at.
    pub const fn write_tier(self) -> Tier {
        match self {
            Policy::Exact => Tier::Exact,
            Policy::Tiered { start } => start,
            Policy::Pinned(t) => t,
        }
    }
}

/// How a Tier 0 (absent) block is rebuilt on read. Data only: the store applies it.
///
/// ```
/// use strata_tiering::ReconstructPolicy;
/// let r = ReconstructPolicy::Delta { base: 7 };
/// assert_eq!(r.source(), Some(7));
/// assert_eq!(ReconstructPolicy::None.source(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReconstructPolicy {
    /// Nothing to rebuild from: reads return zeros (or an error, as the store chooses).
    /// Such a block goes to Tier 0 only when [`crate::TierConfig::allow_zero_fill`] is set.
    #[default]
    None,
    /// Rebuilt as the `base` block plus a stored delta.
    Delta {
        /// Block the delta applies to.
        base: BlockId,
    },
    /// Rebuilt by a stored transformation (scale, permutation, projection) of `source`.
    Factor {
        /// Block the transformation reads.
        source: BlockId,
    },
}

impl ReconstructPolicy {
    /// The block a reconstruction reads, if any.
    pub const fn source(self) -> Option<BlockId> {
        match self {
            ReconstructPolicy::None => None,
            ReconstructPolicy::Delta { base } => Some(base),
            ReconstructPolicy::Factor { source } => Some(source),
        }
    }
}

/// Block sizes per tier for one quantization group size.
///
/// Quantized tiers cost exactly what strata-codec writes: `HEADER_LEN` (48) plus
/// [`payload_size`] with standard groups. `Cold3` assumes standard 3-bit groups; a
/// two-level group costs 4 bytes more plus one flag bit per value, which only the encoder
/// knows (cold is not capped, so the estimate never drives a cap decision). `Exact` is
/// given as the raw f32 size plus the header, a nominal figure: lossless sizes depend on
/// the data, and the policy never moves exact blocks.
///
/// ```
/// use strata_tiering::{SizeModel, Tier};
/// let m = SizeModel::new(64);
/// assert_eq!(m.block_bytes(Tier::Warm5, 64), 48 + 44);
/// assert_eq!(m.block_bytes(Tier::Cold3, 64), 48 + 28);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeModel {
    group_size: u32,
}

impl SizeModel {
    /// A model for groups of `group_size` values (0 is treated as 1).
    pub const fn new(group_size: u32) -> Self {
        Self {
            group_size: if group_size == 0 { 1 } else { group_size },
        }
    }

    /// Values per quantization group.
    pub const fn group_size(self) -> u32 {
        self.group_size
    }

    /// Bytes a block of `values` values costs in `tier`.
    pub fn block_bytes(self, tier: Tier, values: u32) -> u64 {
        let n = values as usize;
        let bytes = match tier {
            Tier::Absent => 0,
            Tier::Exact => HEADER_LEN + 4 * n,
            _ => match tier.quant_bits() {
                Some(bits) => HEADER_LEN + payload_size(bits, n, self.group_size, 0, 0),
                None => 0,
            },
        };
        bytes as u64
    }

    /// Bytes a block of `values` values costs in each tier, indexed by [`Tier::index`].
    pub fn table(self, values: u32) -> [u64; 6] {
        Tier::ALL.map(|t| self.block_bytes(t, values))
    }
}

impl Default for SizeModel {
    fn default() -> Self {
        Self::new(strata_codec::quant::DEFAULT_GROUP_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_codec::quant::group_storage_size;

    #[test]
    fn sizes_match_the_codec() {
        let m = SizeModel::new(64);
        for (tier, per_group) in [
            (Tier::Hot8, 68),
            (Tier::Warm7, 60),
            (Tier::Warm5, 44),
            (Tier::Cold3, 28),
        ] {
            let bits = tier.quant_bits().unwrap();
            assert_eq!(group_storage_size(bits, 64, false), per_group);
            assert_eq!(m.block_bytes(tier, 4096), 48 + 64 * per_group as u64);
        }
        // A partial last group: 100 values = one group of 64 and one of 36, codes packed
        // as one bitstream.
        assert_eq!(m.block_bytes(Tier::Warm7, 100), 48 + 8 + 88);
        assert_eq!(m.block_bytes(Tier::Exact, 10), 48 + 40);
        assert_eq!(m.block_bytes(Tier::Absent, 10), 0);
    }

    #[test]
    fn steps_and_levels() {
        use Tier::*;
        assert!(Hot8.is_one_step(Warm7));
        assert!(Warm7.is_one_step(Warm5));
        assert!(Warm5.is_one_step(Cold3));
        assert!(Cold3.is_one_step(Absent));
        assert!(!Warm7.is_one_step(Warm7));
        assert!(!Warm7.is_one_step(Absent));
        assert!(!Cold3.is_one_step(Hot8));
        assert!(Hot8.rank() > Warm7.rank() && Warm7.rank() > Warm5.rank());
        for (i, t) in Tier::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
    }
}

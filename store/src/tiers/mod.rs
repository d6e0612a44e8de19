//! Tiers in the store: per-tensor policies, quantized and Tier 0 blocks, access recording,
//! and [`crate::Store::maintain`], driven by `strata-tiering` (ADR 0007).
//!
//! - `policy`: the public [`crate::TierPolicy`] and its parts (residual, reconstruct).
//! - `rules`: rules by name pattern, pins, and how a name resolves to a policy.
//! - `set_policy`: [`crate::Store::set_policy`] and what a rule change does to stored versions.
//! - `runtime`: the in-memory tier state and read recording (no write per read).
//! - `maintain`: [`crate::Store::maintain`], plans applied in one transaction.
//! - `rebuild`: reading Tier 0 blocks through their reconstruct policy.
//! - `frames`: frame streams ([`crate::Store::append_frame`]).
//!
//! Quantized blocks themselves are encoded and decoded by the engine (`engine::lossy`).

pub(crate) mod frames;
mod maintain;
pub(crate) mod policy;
mod rebuild;
pub(crate) mod rules;
pub(crate) mod runtime;
mod set_policy;

/// The tier policy's view of a store: what [`crate::Store::tier_stats`] reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierStats {
    /// Blocks the policy tracks (blocks of tiered versions).
    pub blocks: usize,
    /// Lossless versions waiting to be converted to their tiered policy.
    pub pending_versions: usize,
    /// Bytes per tier name by the policy's size model (what `warm_byte_cap` counts).
    pub model_bytes: std::collections::BTreeMap<String, u64>,
    /// Warm bytes (7 and 5 bits) by the size model.
    pub warm_bytes: u64,
    /// Moves applied since the store was opened.
    pub moves: u64,
    /// Moves that reversed the direction of a block's previous move.
    pub flips: u64,
}

impl crate::Store {
    /// What the tier policy tracks now (in memory; no file access).
    pub fn tier_stats(&self) -> TierStats {
        let rt = self.tiers.lock();
        let bytes = rt.state.bytes_by_tier();
        let mut out = TierStats {
            blocks: rt.state.len(),
            pending_versions: rt.pending.len(),
            warm_bytes: rt.state.warm_bytes(),
            ..TierStats::default()
        };
        for t in strata_tiering::Tier::ALL {
            if bytes.get(t) > 0 {
                out.model_bytes.insert(t.name().to_string(), bytes.get(t));
            }
        }
        for b in rt.state.blocks() {
            out.moves += u64::from(b.moves);
            out.flips += u64::from(b.flips);
        }
        out
    }
}

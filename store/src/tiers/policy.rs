//! Per-tensor tier policies as a caller sets them: [`TierPolicy`] (how blocks may move), what
//! a tiered block keeps of what quantization loses ([`Residual`]) and how a Tier 0 block is
//! rebuilt ([`Reconstruct`]). Rules by name pattern are in `tiers::rules`; their on-disk
//! record in `record::policy`.

use strata_tiering::{Policy, Tier};

/// Longest row permutation a [`Reconstruct::Scaled`] may carry.
pub const MAX_PERMUTATION: usize = 1 << 24;

/// What a tiered block keeps of what quantization loses.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Residual {
    /// Nothing: the quantized data is all there is.
    #[default]
    None,
    /// An exact XOR residual against the quantized data (a lossless delta segment), so
    /// [`crate::Store::get_exact`] rebuilds the original bit for bit and re-encodes start
    /// from exact data.
    Exact,
    /// The `fraction` (0..=1) of elements with the largest quantization error, kept in f16
    /// (bf16 for bf16 tensors) in an HPΔKV sparse blob and applied on every read.
    TopK {
        /// Fraction of the block's elements kept.
        fraction: f32,
    },
}

/// Which version of a source tensor a Tier 0 block is rebuilt from, relative to the step
/// of the block's own version. Resolved when the block goes to Tier 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceStep {
    /// The source's latest version at or before the block's step.
    Same,
    /// The source's latest version strictly before the block's step (for the tensor itself:
    /// its previous version).
    Before,
    /// Exactly this step.
    At(u64),
}

/// A tensor a Tier 0 block is rebuilt from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Tensor name.
    pub tensor: String,
    /// Which version.
    pub step: SourceStep,
}

impl Source {
    /// `tensor` at the block's own step (or the latest before it).
    pub fn same_step(tensor: &str) -> Self {
        Source {
            tensor: tensor.to_string(),
            step: SourceStep::Same,
        }
    }

    /// `tensor`'s latest version before the block's step.
    pub fn before(tensor: &str) -> Self {
        Source {
            tensor: tensor.to_string(),
            step: SourceStep::Before,
        }
    }
}

/// How a block at Tier 0 (no data kept) is read.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Reconstruct {
    /// No way back: reads return zeros ([`crate::Fidelity::Zeros`]), or
    /// [`crate::TierFailure::ZeroNoPolicy`] with [`crate::TierOptions::fail_fast`].
    /// Such blocks go to Tier 0 only with `TierConfig::allow_zero_fill`.
    #[default]
    None,
    /// The same elements of `base` plus a sparse delta: when the block goes to Tier 0 the
    /// store keeps the `keep` fraction (0..=1) of elements that differ most from the base.
    Delta {
        /// The base.
        base: Source,
        /// Fraction of elements whose difference is kept.
        keep: f32,
    },
    /// The product `left @ right` of two 2-D tensors whose shapes multiply to this one's.
    LowRank {
        /// `rows x rank`.
        left: Source,
        /// `rank x cols`.
        right: Source,
    },
    /// `scale * source`, with rows permuted (`out row i = source row permutation[i]`).
    Scaled {
        /// Same shape and element count as this tensor.
        source: Source,
        /// Factor.
        scale: f32,
        /// Row permutation (of the first dimension), if any.
        permutation: Option<Vec<u32>>,
    },
}

impl Reconstruct {
    /// The tensors it reads.
    pub fn sources(&self) -> Vec<&Source> {
        match self {
            Reconstruct::None => vec![],
            Reconstruct::Delta { base, .. } => vec![base],
            Reconstruct::LowRank { left, right } => vec![left, right],
            Reconstruct::Scaled { source, .. } => vec![source],
        }
    }
}

/// A tensor's tier policy: how the tier policy may move its blocks, what is kept of what
/// quantization loses, and how Tier 0 blocks are rebuilt.
///
/// ```
/// use strata_store::{Reconstruct, Residual, Source, Tier, TierPolicy};
/// let p = TierPolicy::tiered(Tier::Hot8)
///     .with_residual(Residual::Exact)
///     .with_reconstruct(Reconstruct::Delta { base: Source::before("kv.0"), keep: 0.01 });
/// assert!(p.policy.is_tiered());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TierPolicy {
    /// Exact (lossless, never moved; the default), tiered from a start tier, or pinned.
    pub policy: Policy,
    /// What lossy blocks keep of their quantization error.
    pub residual: Residual,
    /// How Tier 0 blocks are read.
    pub reconstruct: Reconstruct,
}

impl Default for TierPolicy {
    fn default() -> Self {
        Self::exact()
    }
}

impl TierPolicy {
    /// Lossless and never moved: checkpoints, pinned tensors.
    pub fn exact() -> Self {
        TierPolicy {
            policy: Policy::Exact,
            residual: Residual::None,
            reconstruct: Reconstruct::None,
        }
    }

    /// Written at `start` (a quantized tier), then moved by reads.
    pub fn tiered(start: Tier) -> Self {
        TierPolicy {
            policy: Policy::Tiered { start },
            ..Self::exact()
        }
    }

    /// Held at `tier` (quantized) forever.
    pub fn pinned(tier: Tier) -> Self {
        TierPolicy {
            policy: Policy::Pinned(tier),
            ..Self::exact()
        }
    }

    /// Sets the residual kept by lossy blocks.
    pub fn with_residual(mut self, residual: Residual) -> Self {
        self.residual = residual;
        self
    }

    /// Sets how Tier 0 blocks are rebuilt.
    pub fn with_reconstruct(mut self, reconstruct: Reconstruct) -> Self {
        self.reconstruct = reconstruct;
        self
    }

    /// Whether blocks under this policy are stored quantized.
    pub fn is_lossy(&self) -> bool {
        !matches!(self.policy, Policy::Exact)
    }

    /// Checks the policy; `Err(reason)` names what is wrong.
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self.policy {
            Policy::Exact => {}
            Policy::Tiered { start } | Policy::Pinned(start) if start.bits().is_none() => {
                return Err(format!(
                    "a tiered or pinned policy needs a quantized tier (hot8, warm7, warm5, cold3), not {start}"
                ));
            }
            _ => {}
        }
        if let Residual::TopK { fraction } = self.residual {
            if !(fraction > 0.0 && fraction <= 1.0) {
                return Err(format!(
                    "top-k residual fraction {fraction} is not in (0, 1]"
                ));
            }
        }
        match &self.reconstruct {
            Reconstruct::Delta { keep, .. } if !(0.0..=1.0).contains(keep) => {
                return Err(format!("delta keep fraction {keep} is not in [0, 1]"));
            }
            Reconstruct::Scaled {
                scale, permutation, ..
            } => {
                if !scale.is_finite() {
                    return Err(format!("scale {scale} is not finite"));
                }
                if permutation
                    .as_ref()
                    .is_some_and(|p| p.len() > MAX_PERMUTATION)
                {
                    return Err(format!("a permutation of more than {MAX_PERMUTATION} rows"));
                }
            }
            _ => {}
        }
        for s in self.reconstruct.sources() {
            if s.tensor.is_empty() {
                return Err("a reconstruct source with an empty tensor name".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_problem() {
        assert!(TierPolicy::tiered(Tier::Exact).validate().is_err());
        assert!(TierPolicy::tiered(Tier::Hot8)
            .with_residual(Residual::TopK { fraction: 0.0 })
            .validate()
            .is_err());
        assert!(TierPolicy::tiered(Tier::Hot8).validate().is_ok());
    }
}

//! Per-tensor tier policies: what a caller sets, how a name resolves to one, and how rules
//! are stored.
//!
//! A rule is a name pattern (`*` any run of characters, `?` one character; a plain name
//! matches itself) with a [`TierPolicy`]. Pins ([`crate::Store::pin`]) beat every other
//! rule; among rules of the same kind the longest pattern wins (ties: byte order). A name no
//! rule matches is [`Policy::Exact`].
//!
//! Rule record (table `strata.policies`, key: the pattern's UTF-8 bytes):
//!
//! ```text
//! u8   record version (1)
//! u8   pin (0 or 1)
//! u8   policy kind: 0 exact, 1 tiered, 2 pinned;  u8 tier code (start or pinned tier)
//! u8   residual kind: 0 none, 1 exact, 2 top-k;  f32 fraction (top-k)
//! u8   reconstruct kind: 0 none, 1 delta, 2 low rank, 3 scaled; then per kind:
//!      delta: source, f32 keep;  low rank: source, source;
//!      scaled: source, f32 scale, u8 has permutation, u32 count + u32 x count
//! source: u32 length + tensor name, u8 step kind (0 same, 1 before, 2 at), u64 step
//! u64  xxh3-64 of the pattern and the bytes above (as every record value, crate docs)
//! ```

use strata_tiering::{Policy, Tier};
use wildmatch::WildMatch;

use crate::record::{put_string, tier_code, tier_from_code, Reader, RecordError};

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
    /// [`crate::StoreError::TierZeroNoPolicy`] with [`crate::TierOptions::fail_fast`].
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

/// A stored rule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rule {
    pub(crate) pattern: String,
    pub(crate) pin: bool,
    pub(crate) policy: TierPolicy,
}

/// Rules compiled for matching.
#[derive(Debug, Default)]
pub(crate) struct RuleSet {
    /// Sorted by priority: pins first, then longer patterns, then byte order.
    rules: Vec<(WildMatch, Rule)>,
}

impl RuleSet {
    pub(crate) fn new(mut rules: Vec<Rule>) -> Self {
        rules.sort_by(|a, b| {
            b.pin
                .cmp(&a.pin)
                .then(b.pattern.len().cmp(&a.pattern.len()))
                .then(a.pattern.cmp(&b.pattern))
        });
        RuleSet {
            rules: rules
                .into_iter()
                .map(|r| (WildMatch::new(&r.pattern), r))
                .collect(),
        }
    }

    /// The policy of tensor `name`.
    pub(crate) fn resolve(&self, name: &str) -> TierPolicy {
        self.rules
            .iter()
            .find(|(m, _)| m.matches(name))
            .map(|(_, r)| r.policy.clone())
            .unwrap_or_default()
    }

    /// The rules, by priority.
    pub(crate) fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().map(|(_, r)| r)
    }
}

const RULE_VERSION: u8 = 1;

fn put_src(out: &mut Vec<u8>, s: &Source) {
    put_string(out, &s.tensor);
    let (kind, step) = match s.step {
        SourceStep::Same => (0u8, 0u64),
        SourceStep::Before => (1, 0),
        SourceStep::At(s) => (2, s),
    };
    out.push(kind);
    out.extend_from_slice(&step.to_le_bytes());
}

fn read_src(r: &mut Reader<'_>) -> Result<Source, RecordError> {
    let tensor = r.string("source name")?.to_string();
    let kind = r.u8("source step kind")?;
    let step = r.u64("source step")?;
    let step = match kind {
        0 => SourceStep::Same,
        1 => SourceStep::Before,
        2 => SourceStep::At(step),
        k => {
            return Err(RecordError::BadValue {
                field: "source step kind",
                value: k.into(),
            })
        }
    };
    Ok(Source { tensor, step })
}

impl Rule {
    /// The stored value: the rule and a checksum over pattern and rule.
    pub(crate) fn encode_value(&self) -> Vec<u8> {
        crate::record::seal(self.pattern.as_bytes(), &self.encode_body())
    }

    fn encode_body(&self) -> Vec<u8> {
        let mut out = vec![RULE_VERSION, u8::from(self.pin)];
        let (kind, t) = match self.policy.policy {
            Policy::Exact => (0, Tier::Exact),
            Policy::Tiered { start } => (1, start),
            Policy::Pinned(t) => (2, t),
        };
        out.push(kind);
        out.push(tier_code(t));
        let (kind, fraction) = match self.policy.residual {
            Residual::None => (0u8, 0f32),
            Residual::Exact => (1, 0.0),
            Residual::TopK { fraction } => (2, fraction),
        };
        out.push(kind);
        out.extend_from_slice(&fraction.to_bits().to_le_bytes());
        match &self.policy.reconstruct {
            Reconstruct::None => out.push(0),
            Reconstruct::Delta { base, keep } => {
                out.push(1);
                put_src(&mut out, base);
                out.extend_from_slice(&keep.to_bits().to_le_bytes());
            }
            Reconstruct::LowRank { left, right } => {
                out.push(2);
                put_src(&mut out, left);
                put_src(&mut out, right);
            }
            Reconstruct::Scaled {
                source,
                scale,
                permutation,
            } => {
                out.push(3);
                put_src(&mut out, source);
                out.extend_from_slice(&scale.to_bits().to_le_bytes());
                match permutation {
                    None => out.push(0),
                    Some(p) => {
                        out.push(1);
                        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
                        for v in p {
                            out.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
        }
        out
    }

    pub(crate) fn decode(pattern: &[u8], stored: &[u8]) -> Result<Rule, RecordError> {
        let value = crate::record::unseal(pattern, stored)?;
        let pattern = std::str::from_utf8(pattern)
            .map_err(|_| RecordError::Utf8 { field: "pattern" })?
            .to_string();
        let mut r = Reader::new(value);
        let version = r.u8("rule version")?;
        if version != RULE_VERSION {
            return Err(RecordError::Version {
                found: version,
                supported: RULE_VERSION,
            });
        }
        let pin = match r.u8("pin")? {
            0 => false,
            1 => true,
            v => {
                return Err(RecordError::BadValue {
                    field: "pin",
                    value: v.into(),
                })
            }
        };
        let kind = r.u8("policy kind")?;
        let t = tier_from_code("policy tier", r.u8("policy tier")?)?;
        let policy = match kind {
            0 => Policy::Exact,
            1 => Policy::Tiered { start: t },
            2 => Policy::Pinned(t),
            k => {
                return Err(RecordError::BadValue {
                    field: "policy kind",
                    value: k.into(),
                })
            }
        };
        let kind = r.u8("residual kind")?;
        let fraction = f32::from_bits(r.u32("residual fraction")?);
        let residual = match kind {
            0 => Residual::None,
            1 => Residual::Exact,
            2 => Residual::TopK { fraction },
            k => {
                return Err(RecordError::BadValue {
                    field: "residual kind",
                    value: k.into(),
                })
            }
        };
        let reconstruct = match r.u8("reconstruct kind")? {
            0 => Reconstruct::None,
            1 => {
                let base = read_src(&mut r)?;
                let keep = f32::from_bits(r.u32("keep")?);
                Reconstruct::Delta { base, keep }
            }
            2 => Reconstruct::LowRank {
                left: read_src(&mut r)?,
                right: read_src(&mut r)?,
            },
            3 => {
                let source = read_src(&mut r)?;
                let scale = f32::from_bits(r.u32("scale")?);
                let permutation = match r.u8("has permutation")? {
                    0 => None,
                    1 => {
                        let n = r.u32("permutation length")? as usize;
                        if n > MAX_PERMUTATION || n.saturating_mul(4) > r.remaining() {
                            return Err(RecordError::BadValue {
                                field: "permutation length",
                                value: n as u64,
                            });
                        }
                        let mut p = Vec::with_capacity(n);
                        for _ in 0..n {
                            p.push(r.u32("permutation")?);
                        }
                        Some(p)
                    }
                    v => {
                        return Err(RecordError::BadValue {
                            field: "has permutation",
                            value: v.into(),
                        })
                    }
                };
                Reconstruct::Scaled {
                    source,
                    scale,
                    permutation,
                }
            }
            k => {
                return Err(RecordError::BadValue {
                    field: "reconstruct kind",
                    value: k.into(),
                })
            }
        };
        r.finish()?;
        let policy = TierPolicy {
            policy,
            residual,
            reconstruct,
        };
        policy.validate().map_err(|_| RecordError::BadValue {
            field: "policy",
            value: 0,
        })?;
        Ok(Rule {
            pattern,
            pin,
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str, pin: bool, policy: TierPolicy) -> Rule {
        Rule {
            pattern: pattern.into(),
            pin,
            policy,
        }
    }

    #[test]
    fn pins_beat_longer_patterns_and_longer_beat_shorter() {
        let set = RuleSet::new(vec![
            rule("kv.*", false, TierPolicy::tiered(Tier::Hot8)),
            rule("kv.layer0.*", false, TierPolicy::tiered(Tier::Warm7)),
            rule("*norm*", true, TierPolicy::exact()),
        ]);
        assert_eq!(
            set.resolve("kv.layer1.k").policy,
            Policy::Tiered { start: Tier::Hot8 }
        );
        assert_eq!(
            set.resolve("kv.layer0.k").policy,
            Policy::Tiered { start: Tier::Warm7 }
        );
        assert_eq!(set.resolve("kv.layer0.norm").policy, Policy::Exact);
        assert_eq!(set.resolve("other").policy, Policy::Exact);
    }

    #[test]
    fn rules_round_trip_and_truncation_fails() {
        let rules = [
            rule("a", false, TierPolicy::exact()),
            rule(
                "kv.*",
                false,
                TierPolicy::tiered(Tier::Hot8)
                    .with_residual(Residual::TopK { fraction: 0.01 })
                    .with_reconstruct(Reconstruct::Delta {
                        base: Source::before("kv.0"),
                        keep: 0.1,
                    }),
            ),
            rule(
                "x",
                true,
                TierPolicy::pinned(Tier::Cold3).with_reconstruct(Reconstruct::LowRank {
                    left: Source::same_step("l"),
                    right: Source {
                        tensor: "r".into(),
                        step: SourceStep::At(4),
                    },
                }),
            ),
            rule(
                "y",
                false,
                TierPolicy::tiered(Tier::Warm5)
                    .with_residual(Residual::Exact)
                    .with_reconstruct(Reconstruct::Scaled {
                        source: Source::same_step("s"),
                        scale: 2.0,
                        permutation: Some(vec![1, 0]),
                    }),
            ),
        ];
        for r in rules {
            let v = r.encode_value();
            assert_eq!(Rule::decode(r.pattern.as_bytes(), &v), Ok(r.clone()));
            for cut in 0..v.len() {
                assert!(Rule::decode(r.pattern.as_bytes(), &v[..cut]).is_err());
            }
        }
    }

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

//! The tier policy rule record (table `strata.policies`): a name pattern's [`TierPolicy`].
//!
//! Key: the pattern's UTF-8 bytes. Value:
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

use super::{put_string, seal, tier_code, tier_from_code, unseal, Reader, RecordError};
use crate::tiers::policy::{
    Reconstruct, Residual, Source, SourceStep, TierPolicy, MAX_PERMUTATION,
};

/// A stored rule: a pattern, whether it is a pin, and its policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rule {
    pub(crate) pattern: String,
    pub(crate) pin: bool,
    pub(crate) policy: TierPolicy,
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
        seal(self.pattern.as_bytes(), &self.encode_body())
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
        let value = unseal(pattern, stored)?;
        let pattern = std::str::from_utf8(pattern)
            .map_err(|_| RecordError::Utf8 { field: "pattern" })?
            .to_string();
        let mut r = Reader::new(value);
        r.version("rule version", RULE_VERSION)?;
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
}

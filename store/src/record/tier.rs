//! Tier rows (one per block of a tiered version) and policy rules.
//!
//! ```text
//! tier row (table strata.tiers, key: version key ++ u32 BE block index)
//! u8      row version (1)
//! u64     block id (the tier policy's key for the block)
//! u8      tier code: 0 absent, 1 cold3, 2 warm5, 3 warm7, 4 hot8, 5 exact (a lossless block
//!         waiting to be converted to its policy's start tier)
//! u8      policy kind: 0 exact, 1 tiered, 2 pinned;  u8 its tier code (start or pinned)
//! u64     since: the tick of the block's last write or move (its residency starts there)
//! u8      precision kind: 0 exact, 1 lossy, 2 no data;  u8 min bits;  f64 bound (LE bits)
//! u8      residual kind: 0 none, 1 exact XOR, 2 sparse;  u128 address;  u32 length
//! u8      rebuild kind: 0 none, 1 delta, 2 low rank, 3 scaled (Tier 0 only; see Rebuild)
//!         then per kind: sources (u32 length + name, u64 step), f32 scale, u128 address +
//!         u32 length of a blob in the segment store (sparse delta, or row permutation as
//!         u32 LE values; address 0 and length 0 for no permutation)
//! u8      stats present;  STATS_BYTES read statistics (strata_tiering::AccessStats)
//! ```

use strata_tiering::{AccessStats, Policy, Precision, Tier, STATS_BYTES};

use super::{put_string, Reader, RecordError};

const ROW_VERSION: u8 = 1;

/// Tier code of a [`Tier`] in records.
pub(crate) fn tier_code(t: Tier) -> u8 {
    t.index() as u8
}

/// The [`Tier`] of a tier code.
pub(crate) fn tier_from_code(field: &'static str, code: u8) -> Result<Tier, RecordError> {
    Tier::ALL
        .get(usize::from(code))
        .copied()
        .ok_or(RecordError::BadValue {
            field,
            value: code.into(),
        })
}

/// Where residual bytes are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResidualRef {
    /// An exact XOR residual: a lossless delta segment against the block's lossy bytes.
    Exact { address: u128, len: u32 },
    /// A sparse top-k residual (HPΔKV blob).
    Sparse { address: u128, len: u32 },
}

impl ResidualRef {
    pub(crate) fn address(&self) -> (u128, u32) {
        match *self {
            ResidualRef::Exact { address, len } | ResidualRef::Sparse { address, len } => {
                (address, len)
            }
        }
    }
}

/// A version of another tensor (or of the same one) frozen when a block went to Tier 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceAt {
    pub(crate) tensor: String,
    pub(crate) step: u64,
}

/// How a Tier 0 block is rebuilt, frozen when it went to Tier 0.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rebuild {
    /// Nothing: zeros (or an error in fail-fast mode).
    None,
    /// The same elements of `base` plus a sparse delta (HPΔKV blob).
    Delta {
        base: SourceAt,
        address: u128,
        len: u32,
    },
    /// The matching rows of `left @ right`.
    LowRank { left: SourceAt, right: SourceAt },
    /// `scale * source`, rows permuted (`out row i = source row perm[i]`) when a
    /// permutation blob is given.
    Scaled {
        source: SourceAt,
        scale: f32,
        permutation: Option<(u128, u32)>,
    },
}

/// The tier state of one block of a tiered version.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TierRow {
    pub(crate) id: u64,
    pub(crate) tier: Tier,
    pub(crate) policy: Policy,
    /// Tick of the last write or move.
    pub(crate) since: u64,
    pub(crate) precision: Precision,
    pub(crate) residual: Option<ResidualRef>,
    pub(crate) rebuild: Rebuild,
    pub(crate) stats: Option<AccessStats>,
}

fn put_source(out: &mut Vec<u8>, s: &SourceAt) {
    put_string(out, &s.tensor);
    out.extend_from_slice(&s.step.to_le_bytes());
}

fn read_source(r: &mut Reader<'_>) -> Result<SourceAt, RecordError> {
    let tensor = r.string("rebuild source name")?.to_string();
    let step = r.u64("rebuild source step")?;
    Ok(SourceAt { tensor, step })
}

impl TierRow {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + STATS_BYTES);
        out.push(ROW_VERSION);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.push(tier_code(self.tier));
        let (kind, t) = match self.policy {
            Policy::Exact => (0, Tier::Exact),
            Policy::Tiered { start } => (1, start),
            Policy::Pinned(t) => (2, t),
        };
        out.push(kind);
        out.push(tier_code(t));
        out.extend_from_slice(&self.since.to_le_bytes());
        let (kind, bits, bound) = match self.precision {
            Precision::Exact => (0u8, 0u8, 0.0f64),
            Precision::Lossy {
                min_bits,
                bound_rel,
            } => (1, min_bits, bound_rel),
            Precision::NoData => (2, 0, 0.0),
        };
        out.push(kind);
        out.push(bits);
        out.extend_from_slice(&bound.to_bits().to_le_bytes());
        let (kind, address, len) = match self.residual {
            None => (0u8, 0u128, 0u32),
            Some(ResidualRef::Exact { address, len }) => (1, address, len),
            Some(ResidualRef::Sparse { address, len }) => (2, address, len),
        };
        out.push(kind);
        out.extend_from_slice(&address.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        match &self.rebuild {
            Rebuild::None => out.push(0),
            Rebuild::Delta { base, address, len } => {
                out.push(1);
                put_source(&mut out, base);
                out.extend_from_slice(&address.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            Rebuild::LowRank { left, right } => {
                out.push(2);
                put_source(&mut out, left);
                put_source(&mut out, right);
            }
            Rebuild::Scaled {
                source,
                scale,
                permutation,
            } => {
                out.push(3);
                put_source(&mut out, source);
                out.extend_from_slice(&scale.to_bits().to_le_bytes());
                let (address, len) = permutation.unwrap_or((0, 0));
                out.extend_from_slice(&address.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
        }
        match &self.stats {
            Some(s) => {
                out.push(1);
                out.extend_from_slice(&s.to_bytes());
            }
            None => out.push(0),
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader::new(bytes);
        r.version("tier row version", ROW_VERSION)?;
        let id = r.u64("block id")?;
        let tier = tier_from_code("tier", r.u8("tier")?)?;
        let kind = r.u8("policy kind")?;
        let pt = tier_from_code("policy tier", r.u8("policy tier")?)?;
        let policy = match kind {
            0 => Policy::Exact,
            1 => Policy::Tiered { start: pt },
            2 => Policy::Pinned(pt),
            k => {
                return Err(RecordError::BadValue {
                    field: "policy kind",
                    value: k.into(),
                })
            }
        };
        let since = r.u64("since")?;
        let kind = r.u8("precision kind")?;
        let bits = r.u8("precision bits")?;
        let bound = f64::from_bits(r.u64("precision bound")?);
        let precision = match kind {
            0 => Precision::Exact,
            1 if (1..=8).contains(&bits) && bound.is_finite() && bound >= 0.0 => Precision::Lossy {
                min_bits: bits,
                bound_rel: bound,
            },
            2 => Precision::NoData,
            k => {
                return Err(RecordError::BadValue {
                    field: "precision",
                    value: k.into(),
                })
            }
        };
        let kind = r.u8("residual kind")?;
        let address = r.u128("residual address")?;
        let len = r.u32("residual length")?;
        let residual = match kind {
            0 => None,
            1 => Some(ResidualRef::Exact { address, len }),
            2 => Some(ResidualRef::Sparse { address, len }),
            k => {
                return Err(RecordError::BadValue {
                    field: "residual kind",
                    value: k.into(),
                })
            }
        };
        let rebuild = match r.u8("rebuild kind")? {
            0 => Rebuild::None,
            1 => {
                let base = read_source(&mut r)?;
                let address = r.u128("sparse delta address")?;
                let len = r.u32("sparse delta length")?;
                Rebuild::Delta { base, address, len }
            }
            2 => {
                let left = read_source(&mut r)?;
                let right = read_source(&mut r)?;
                Rebuild::LowRank { left, right }
            }
            3 => {
                let source = read_source(&mut r)?;
                let scale = f32::from_bits(r.u32("scale")?);
                let address = r.u128("permutation address")?;
                let len = r.u32("permutation length")?;
                let permutation = (address != 0 || len != 0).then_some((address, len));
                Rebuild::Scaled {
                    source,
                    scale,
                    permutation,
                }
            }
            k => {
                return Err(RecordError::BadValue {
                    field: "rebuild kind",
                    value: k.into(),
                })
            }
        };
        let stats = match r.u8("stats present")? {
            0 => None,
            1 => {
                let raw: [u8; STATS_BYTES] = r.array("stats")?;
                Some(
                    AccessStats::from_bytes(&raw).map_err(|_| RecordError::BadValue {
                        field: "stats",
                        value: 0,
                    })?,
                )
            }
            k => {
                return Err(RecordError::BadValue {
                    field: "stats present",
                    value: k.into(),
                })
            }
        };
        r.finish()?;
        Ok(TierRow {
            id,
            tier,
            policy,
            since,
            precision,
            residual,
            rebuild,
            stats,
        })
    }
}

/// The key of the tier row of block `block` of a version (`version_key ++ u32 BE block`).
pub(crate) fn tier_key(version_key: &[u8], block: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(version_key.len() + 4);
    k.extend_from_slice(version_key);
    k.extend_from_slice(&block.to_be_bytes());
    k
}

/// Splits a tier key into version key and block index.
pub(crate) fn split_tier_key(key: &[u8]) -> Option<(&[u8], u32)> {
    let at = key.len().checked_sub(4)?;
    let block = u32::from_be_bytes(key[at..].try_into().ok()?);
    Some((&key[..at], block))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<TierRow> {
        let base = TierRow {
            id: 7,
            tier: Tier::Warm5,
            policy: Policy::Tiered { start: Tier::Hot8 },
            since: 77,
            precision: Precision::fresh(Tier::Hot8).after_encode(Tier::Warm5),
            residual: Some(ResidualRef::Exact {
                address: 99,
                len: 10,
            }),
            rebuild: Rebuild::None,
            stats: Some(AccessStats::new(5)),
        };
        vec![
            base.clone(),
            TierRow {
                tier: Tier::Absent,
                precision: Precision::NoData,
                residual: None,
                rebuild: Rebuild::Delta {
                    base: SourceAt {
                        tensor: "a".into(),
                        step: 3,
                    },
                    address: 5,
                    len: 6,
                },
                stats: None,
                ..base.clone()
            },
            TierRow {
                rebuild: Rebuild::LowRank {
                    left: SourceAt {
                        tensor: "l".into(),
                        step: 1,
                    },
                    right: SourceAt {
                        tensor: "r".into(),
                        step: 2,
                    },
                },
                ..base.clone()
            },
            TierRow {
                policy: Policy::Pinned(Tier::Cold3),
                rebuild: Rebuild::Scaled {
                    source: SourceAt {
                        tensor: "s".into(),
                        step: 9,
                    },
                    scale: 0.5,
                    permutation: Some((12, 12)),
                },
                ..base
            },
        ]
    }

    #[test]
    fn rows_round_trip_and_truncation_fails() {
        for row in rows() {
            let bytes = row.encode();
            assert_eq!(TierRow::decode(&bytes), Ok(row));
            for cut in 0..bytes.len() {
                assert!(TierRow::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert!(TierRow::decode(&long).is_err());
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let mut bytes = rows()[0].encode();
        bytes[9] = 6; // tier code
        assert_eq!(
            TierRow::decode(&bytes),
            Err(RecordError::BadValue {
                field: "tier",
                value: 6
            })
        );
        let key = tier_key(b"abc", 258);
        assert_eq!(split_tier_key(&key), Some((&b"abc"[..], 258)));
    }
}

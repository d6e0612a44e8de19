//! Honest precision bookkeeping: what a block's data is still worth after the lossy
//! encodings it went through since its last exact write.

use crate::Tier;

/// The precision of the data a block holds.
///
/// Re-encoding never adds information: a block demoted to 3 bits and promoted back to 8
/// bits holds 3-bit data stored in an 8-bit format. So `min_bits` only falls, and the error
/// bound only grows, until an exact write resets it.
///
/// The bound is relative to the largest magnitude of the value's quantization group in
/// the last exact data, and it *adds up* the bound of every lossy encoding since then:
/// re-quantizing already-quantized values at a grid that does not nest in the old one
/// (8-bit steps `max/127`, 7-bit steps `max/63`) can add a full new rounding error to the
/// old one. One encoding at `b` bits gives `1 / (2 * qmax(b))` (ADR 0003); 8 then 7 bits
/// give `1/254 + 1/126`. (Each re-encode may also raise the group maximum by one ulp of
/// f32, a relative 2^-23, which the bound ignores.)
///
/// ```
/// use strata_tiering::{Precision, Tier};
/// let p = Precision::Exact.after_encode(Tier::Hot8).after_encode(Tier::Cold3);
/// let back_up = p.after_encode(Tier::Hot8);
/// assert_eq!(back_up.bits(), Some(3)); // promotion does not bring precision back
/// assert!(back_up.error_bound_rel() > p.error_bound_rel());
/// assert_eq!(Precision::Exact.error_bound_rel(), 0.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Precision {
    /// Bit-exact data: no lossy encoding since the last exact write.
    Exact,
    /// Quantized data.
    Lossy {
        /// Fewest bits per value of any encoding since the last exact write.
        min_bits: u8,
        /// Worst-case `|x - x̂| / max_abs(group)` accumulated over those encodings.
        bound_rel: f64,
    },
    /// No data held (Tier 0): reads return zeros or a reconstruction, with no bound.
    NoData,
}

impl Precision {
    /// The precision after re-encoding this data at `tier`: `Exact` keeps exact data
    /// exact, a quantized tier adds its bound, `Absent` drops the data.
    pub fn after_encode(self, tier: Tier) -> Precision {
        match (tier.quant_bits(), tier) {
            (_, Tier::Absent) => Precision::NoData,
            (_, Tier::Exact) => self,
            (Some(q), _) => {
                let step = q.relative_error_bound();
                match self {
                    Precision::Exact => Precision::Lossy {
                        min_bits: q.bits(),
                        bound_rel: step,
                    },
                    Precision::Lossy {
                        min_bits,
                        bound_rel,
                    } => Precision::Lossy {
                        min_bits: min_bits.min(q.bits()),
                        bound_rel: bound_rel + step,
                    },
                    Precision::NoData => Precision::NoData,
                }
            }
            (None, _) => self,
        }
    }

    /// The precision of fresh exact data written at `tier`.
    pub fn fresh(tier: Tier) -> Precision {
        Precision::Exact.after_encode(tier)
    }

    /// Fewest bits per value since the last exact write: `None` for exact data,
    /// `Some(0)` when no data is held.
    pub fn bits(self) -> Option<u8> {
        match self {
            Precision::Exact => None,
            Precision::Lossy { min_bits, .. } => Some(min_bits),
            Precision::NoData => Some(0),
        }
    }

    /// Worst-case error relative to the group maximum: 0 for exact data, infinity when no
    /// data is held.
    pub fn error_bound_rel(self) -> f64 {
        match self {
            Precision::Exact => 0.0,
            Precision::Lossy { bound_rel, .. } => bound_rel,
            Precision::NoData => f64::INFINITY,
        }
    }

    /// Whether `self` is at most as precise as `earlier` on both counts (fewer or equal
    /// bits, larger or equal bound): what every move must preserve.
    pub fn is_no_better_than(self, earlier: Precision) -> bool {
        let bits_ok = match (self.bits(), earlier.bits()) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a <= b,
        };
        bits_ok && self.error_bound_rel() >= earlier.error_bound_rel()
    }

    /// Whether a block in `tier` can hold data of this precision: exact data only in
    /// `Exact`, quantized data in `Exact` or a quantized tier at least `min_bits` wide (a
    /// 3-bit tier cannot hold 8-bit data), no data only in `Absent`.
    pub(crate) fn fits_tier(self, tier: Tier) -> bool {
        match (self, tier) {
            (Precision::NoData, t) => t == Tier::Absent,
            (_, Tier::Absent) => false,
            (Precision::Exact, t) => t == Tier::Exact,
            (Precision::Lossy { min_bits, .. }, t) => match t.bits() {
                Some(b) => min_bits <= b,
                None => t == Tier::Exact,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_encoding_matches_adr_0003() {
        assert_eq!(Precision::fresh(Tier::Hot8).error_bound_rel(), 1.0 / 254.0);
        assert_eq!(Precision::fresh(Tier::Warm7).error_bound_rel(), 1.0 / 126.0);
        assert_eq!(Precision::fresh(Tier::Warm5).error_bound_rel(), 1.0 / 30.0);
        assert_eq!(Precision::fresh(Tier::Cold3).error_bound_rel(), 1.0 / 6.0);
        assert_eq!(Precision::fresh(Tier::Exact), Precision::Exact);
        assert_eq!(Precision::fresh(Tier::Absent), Precision::NoData);
    }

    #[test]
    fn chains_accumulate_and_never_improve() {
        let p = Precision::fresh(Tier::Hot8).after_encode(Tier::Warm7);
        assert_eq!(p.bits(), Some(7));
        assert!((p.error_bound_rel() - (1.0 / 254.0 + 1.0 / 126.0)).abs() < 1e-15);
        let q = p.after_encode(Tier::Hot8);
        assert!(q.is_no_better_than(p));
        assert_eq!(q.bits(), Some(7));
        let gone = q.after_encode(Tier::Absent);
        assert_eq!(gone.bits(), Some(0));
        assert!(gone.is_no_better_than(q));
        assert_eq!(gone.after_encode(Tier::Hot8), Precision::NoData);
    }

    #[test]
    fn fits() {
        assert!(!Precision::Exact.fits_tier(Tier::Hot8));
        assert!(Precision::Exact.fits_tier(Tier::Exact));
        assert!(Precision::fresh(Tier::Cold3).fits_tier(Tier::Exact));
        assert!(Precision::fresh(Tier::Cold3).fits_tier(Tier::Hot8));
        assert!(!Precision::fresh(Tier::Hot8).fits_tier(Tier::Cold3));
        assert!(Precision::NoData.fits_tier(Tier::Absent));
        assert!(!Precision::Exact.fits_tier(Tier::Absent));
    }
}

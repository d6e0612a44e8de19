//! The policy's settings, with the defaults ADR 0005 justifies.

use crate::clock::{Tick, HOUR, MINUTE};
use crate::error::TierError;
use crate::score::ScoreConfig;
use strata_codec::quant::{DEFAULT_GROUP_SIZE, MAX_GROUP_SIZE};

/// Settings of the tier policy. Scores are in reads per hour ([`crate::AccessStats`]).
///
/// The hysteresis bands: a hot block leaves hot below `hot_exit` and a warm block enters hot
/// at `hot_enter`; a warm block leaves for cold below `warm_exit` and a cold block enters
/// warm at `warm_enter`. Every score-driven move also needs `min_residency` in the current
/// tier.
///
/// ```
/// use strata_tiering::{TierConfig, HOUR};
/// let cfg = TierConfig { warm_byte_cap: 1 << 20, ..TierConfig::default() };
/// cfg.validate()?;
/// assert_eq!(cfg.absent_age, 24 * HOUR);
/// # Ok::<(), strata_tiering::TierError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierConfig {
    /// How reads become scores.
    pub score: ScoreConfig,
    /// Score (reads/hour) at or above which a warm block is promoted to hot. Default 60.
    pub hot_enter: f64,
    /// Score below which a hot block is demoted to warm. Default 30.
    pub hot_exit: f64,
    /// Score at or above which a cold block is promoted to warm. Default 6.
    pub warm_enter: f64,
    /// Score below which a warm block is demoted to cold. Default 1.5.
    pub warm_exit: f64,
    /// Minimum time in a tier before a score-driven move. Default 10 minutes.
    pub min_residency: Tick,
    /// Bytes the warm tier (7- and 5-bit blocks) may hold. Default 64 MiB (ADR-019).
    pub warm_byte_cap: u64,
    /// Fraction of the cap below which 7-bit warm data may be added again (5 -> 7 restores,
    /// new warm blocks at 7 bits). Default 0.8.
    pub warm_low_watermark: f64,
    /// Minimum time since a block's last move before a 5 -> 7 restore. Default 1 minute.
    pub cap_min_interval: Tick,
    /// Score below which a cold block may go to Tier 0. Default 1 (ADR-019).
    pub absent_min_score: f64,
    /// Time since the last read or write after which a cold block may go to Tier 0.
    /// Default 24 hours (ADR-019).
    pub absent_age: Tick,
    /// Whether a block with [`crate::ReconstructPolicy::None`] may go to Tier 0 (its reads
    /// would return zeros). Default false.
    pub allow_zero_fill: bool,
    /// Most blocks a Tier 0 read may have to rebuild in a chain (the block itself and
    /// absent bases). Default 3 (ADR-019's maximum reconstruction depth).
    pub max_reconstruct_depth: u8,
    /// Values per quantization group, for block sizes. Default 64.
    pub group_size: u32,
    /// Whether blocks without an exact source are promoted (hot, warm, 5 -> 7 bits). Their
    /// data keeps its precision, so a promotion costs bytes for the sake of later writes
    /// only; set false for immutable blocks. Default true (ADR-019's behaviour).
    pub promote_lossy: bool,
}

impl Default for TierConfig {
    fn default() -> Self {
        Self {
            score: ScoreConfig::default(),
            hot_enter: 60.0,
            hot_exit: 30.0,
            warm_enter: 6.0,
            warm_exit: 1.5,
            min_residency: 10 * MINUTE,
            warm_byte_cap: 64 << 20,
            warm_low_watermark: 0.8,
            cap_min_interval: MINUTE,
            absent_min_score: 1.0,
            absent_age: 24 * HOUR,
            allow_zero_fill: false,
            max_reconstruct_depth: 3,
            group_size: DEFAULT_GROUP_SIZE,
            promote_lossy: true,
        }
    }
}

impl TierConfig {
    /// Checks that thresholds are finite, non-negative and ordered
    /// (`warm_exit <= warm_enter <= hot_enter`, `warm_exit <= hot_exit <= hot_enter`), that
    /// the watermark is in `(0, 1]`, the half-life positive, the group size valid and the
    /// reconstruct depth at least 1.
    ///
    /// # Errors
    /// [`TierError::InvalidConfig`] naming the first bad field.
    pub fn validate(&self) -> Result<(), TierError> {
        let bad = |field: &'static str, reason: &'static str| {
            Err(TierError::InvalidConfig { field, reason })
        };
        for (field, v) in [
            ("hot_enter", self.hot_enter),
            ("hot_exit", self.hot_exit),
            ("warm_enter", self.warm_enter),
            ("warm_exit", self.warm_exit),
            ("absent_min_score", self.absent_min_score),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(field, "must be finite and >= 0");
            }
        }
        if self.hot_exit > self.hot_enter {
            return bad("hot_exit", "must be <= hot_enter");
        }
        if self.warm_exit > self.warm_enter {
            return bad("warm_exit", "must be <= warm_enter");
        }
        if self.warm_enter > self.hot_enter {
            return bad("warm_enter", "must be <= hot_enter");
        }
        if self.warm_exit > self.hot_exit {
            return bad("warm_exit", "must be <= hot_exit");
        }
        if !(self.warm_low_watermark > 0.0 && self.warm_low_watermark <= 1.0) {
            return bad("warm_low_watermark", "must be in (0, 1]");
        }
        if self.score.half_life == 0 {
            return bad("score.half_life", "must be > 0");
        }
        if self.group_size == 0 || self.group_size > MAX_GROUP_SIZE {
            return bad("group_size", "must be in 1..=2^20");
        }
        if self.max_reconstruct_depth == 0 {
            return bad("max_reconstruct_depth", "must be >= 1");
        }
        Ok(())
    }

    /// `warm_low_watermark * warm_byte_cap` in bytes: 7-bit warm data is added only while
    /// warm bytes stay strictly below it.
    pub fn warm_low_bytes(&self) -> u64 {
        (self.warm_byte_cap as f64 * self.warm_low_watermark) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        TierConfig::default().validate().unwrap();
        assert_eq!(
            TierConfig::default().warm_low_bytes(),
            (64u64 << 20) * 4 / 5
        );
    }

    #[test]
    fn bad_configs_name_the_field() {
        let c = TierConfig {
            hot_exit: 100.0,
            ..TierConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(TierError::InvalidConfig {
                field: "hot_exit",
                ..
            })
        ));
        let c = TierConfig {
            warm_enter: f64::NAN,
            ..TierConfig::default()
        };
        assert!(c.validate().is_err());
        let c = TierConfig {
            warm_low_watermark: 0.0,
            ..TierConfig::default()
        };
        assert!(c.validate().is_err());
        let c = TierConfig {
            group_size: 0,
            ..TierConfig::default()
        };
        assert!(c.validate().is_err());
    }
}

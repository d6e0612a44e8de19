//! Quantization parameters: bit width, group size, two-level 3-bit settings.

use super::QuantError;

/// Default number of values per quantization group (ADR-019's block size).
pub const DEFAULT_GROUP_SIZE: u32 = 64;
/// Largest group size a segment may declare.
pub const MAX_GROUP_SIZE: u32 = 1 << 20;

/// A quantized tier's bit width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuantBits {
    /// 3 bits, qmax 3 (cold tier; two-level groups allowed).
    B3,
    /// 5 bits, qmax 15 (warm tier over `warm_byte_cap`).
    B5,
    /// 7 bits, qmax 63 (warm tier).
    B7,
    /// 8 bits, qmax 127 (hot tier).
    B8,
}

impl QuantBits {
    /// Every width, narrowest first.
    pub const ALL: [QuantBits; 4] = [QuantBits::B3, QuantBits::B5, QuantBits::B7, QuantBits::B8];

    /// Bits per code.
    pub const fn bits(self) -> u8 {
        match self {
            QuantBits::B3 => 3,
            QuantBits::B5 => 5,
            QuantBits::B7 => 7,
            QuantBits::B8 => 8,
        }
    }

    /// Largest code magnitude, `2^(bits-1) - 1`.
    pub const fn qmax(self) -> i8 {
        match self {
            QuantBits::B3 => 3,
            QuantBits::B5 => 15,
            QuantBits::B7 => 63,
            QuantBits::B8 => 127,
        }
    }

    /// The width for a bit count, or `None` if it is not a tier width.
    pub fn from_bits(bits: u8) -> Option<QuantBits> {
        QuantBits::ALL.into_iter().find(|b| b.bits() == bits)
    }

    /// Worst-case error per element relative to its group's `max_abs`: `1 / (2 * qmax)`.
    ///
    /// 8 bits: 1/254 (0.394 %); 7: 1/126; 5: 1/30; 3: 1/6. ADR-019 writes the 8-bit
    /// bound as `scale / 254`; it is `max_abs / 254`, i.e. `scale / 2` (see ADR 0003).
    pub fn relative_error_bound(self) -> f64 {
        1.0 / (2.0 * f64::from(self.qmax()))
    }
}

/// Settings of the two-level 3-bit mode (ADR-019 section 3.4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoLevel {
    /// A group is two-level when `max_abs / median_abs` exceeds this (default 5.0).
    pub threshold: f32,
    /// Fraction of a group's values taken as outliers (default 0.05).
    pub outlier_fraction: f32,
}

impl Default for TwoLevel {
    fn default() -> Self {
        TwoLevel {
            threshold: 5.0,
            outlier_fraction: 0.05,
        }
    }
}

/// How to quantize: width, group size, and the two-level mode for 3 bits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuantParams {
    /// Bit width.
    pub bits: QuantBits,
    /// Values per group, each group with its own scale (1..=[`MAX_GROUP_SIZE`]).
    pub group_size: u32,
    /// Two-level settings; used only at 3 bits. `None` keeps every group standard.
    pub two_level: Option<TwoLevel>,
}

impl QuantParams {
    /// The defaults for a width: groups of 64, two-level on at 3 bits.
    pub fn new(bits: QuantBits) -> Self {
        QuantParams {
            bits,
            group_size: DEFAULT_GROUP_SIZE,
            two_level: (bits == QuantBits::B3).then(TwoLevel::default),
        }
    }

    /// The same parameters with another group size.
    pub fn with_group_size(self, group_size: u32) -> Self {
        QuantParams { group_size, ..self }
    }

    pub(crate) fn validate(&self) -> Result<(), QuantError> {
        if !(1..=MAX_GROUP_SIZE).contains(&self.group_size) {
            return Err(QuantError::InvalidGroupSize {
                group_size: self.group_size,
            });
        }
        if let Some(t) = self.two_level {
            let ok = t.threshold.is_finite()
                && t.threshold > 1.0
                && t.outlier_fraction > 0.0
                && t.outlier_fraction < 0.5;
            if !ok {
                return Err(QuantError::InvalidTwoLevel {
                    threshold: t.threshold,
                    outlier_fraction: t.outlier_fraction,
                });
            }
        }
        Ok(())
    }

    /// The two-level settings in force: only at 3 bits.
    pub(crate) fn active_two_level(&self) -> Option<TwoLevel> {
        self.two_level.filter(|_| self.bits == QuantBits::B3)
    }
}

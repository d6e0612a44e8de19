//! Tiers in the store: per-tensor policies, quantized and Tier 0 blocks, access recording,
//! and [`crate::Store::maintain`], driven by `strata-tiering` (ADR 0007).
//!
//! - [`policy`]: [`TierPolicy`] rules by name pattern, pins.
//! - `lossy`: float blocks to and from quantized segments, residuals.
//! - `runtime`: the in-memory tier state and read recording (no write per read).
//! - `maintain`: plans applied in one transaction.
//! - `rebuild`: reading Tier 0 blocks through their reconstruct policy.

pub(crate) mod frames;
pub(crate) mod lossy;
pub(crate) mod maintain;
pub(crate) mod policies;
pub(crate) mod policy;
pub(crate) mod rebuild;
pub(crate) mod rows;
pub(crate) mod runtime;
pub(crate) mod write;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use strata_tiering::{Budget, Tick, TierConfig};

/// What a read returned, for the worst block of the tensor or range read.
///
/// Ordered from best to worst: `Exact < Bounded < Reconstructed < Zeros`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fidelity {
    /// Bit-exact data.
    Exact,
    /// Quantized data: every element is within `max_rel_error x max_abs(group)` of what
    /// was written, the group being the element's quantization group (64 values by
    /// default) in the data as written.
    Bounded {
        /// Fewest bits per value any encoding of the data used since it was written.
        bits: u8,
        /// The bound, relative to the group's largest magnitude; it includes the rounding
        /// to the tensor's dtype (bf16, f16) on the way out.
        max_rel_error: f64,
    },
    /// A Tier 0 block rebuilt through its reconstruct policy, through `depth` tensors.
    /// No bound is claimed.
    Reconstructed {
        /// Blocks rebuilt in the chain (1 when the sources were held).
        depth: u8,
    },
    /// A Tier 0 block with no reconstruct policy: the data returned is zeros.
    Zeros,
}

impl Fidelity {
    fn rank(&self) -> u8 {
        match self {
            Fidelity::Exact => 0,
            Fidelity::Bounded { .. } => 1,
            Fidelity::Reconstructed { .. } => 2,
            Fidelity::Zeros => 3,
        }
    }

    /// The worse of two (for two bounds: fewer bits, larger bound; for two
    /// reconstructions: the deeper).
    pub fn worst(self, other: Fidelity) -> Fidelity {
        match (self, other) {
            (
                Fidelity::Bounded {
                    bits: a,
                    max_rel_error: x,
                },
                Fidelity::Bounded {
                    bits: b,
                    max_rel_error: y,
                },
            ) => Fidelity::Bounded {
                bits: a.min(b),
                max_rel_error: x.max(y),
            },
            (Fidelity::Reconstructed { depth: a }, Fidelity::Reconstructed { depth: b }) => {
                Fidelity::Reconstructed { depth: a.max(b) }
            }
            (a, b) => {
                if b.rank() > a.rank() {
                    b
                } else {
                    a
                }
            }
        }
    }

    /// Whether the data is bit-exact.
    pub fn is_exact(&self) -> bool {
        matches!(self, Fidelity::Exact)
    }
}

/// The time source reads are recorded with (milliseconds; the tier policy uses only
/// differences). [`crate::Store::maintain`] takes its time from the caller.
#[derive(Debug, Clone, Default)]
pub enum ReadClock {
    /// Milliseconds since the Unix epoch.
    #[default]
    System,
    /// A clock the caller sets: tests and simulations.
    Manual(Arc<AtomicU64>),
}

impl ReadClock {
    /// A manual clock standing at `start`, and the handle that moves it.
    pub fn manual(start: Tick) -> (ReadClock, Arc<AtomicU64>) {
        let t = Arc::new(AtomicU64::new(start));
        (ReadClock::Manual(t.clone()), t)
    }

    /// The current time.
    pub fn now(&self) -> Tick {
        match self {
            ReadClock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as Tick)
                .unwrap_or(0),
            ReadClock::Manual(t) => t.load(Ordering::Relaxed),
        }
    }
}

impl PartialEq for ReadClock {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ReadClock::System, ReadClock::System) => true,
            (ReadClock::Manual(a), ReadClock::Manual(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Settings of tiering in a store handle.
#[derive(Debug, Clone, PartialEq)]
pub struct TierOptions {
    /// The tier policy's settings (thresholds, hysteresis, `warm_byte_cap`, Tier 0).
    pub config: TierConfig,
    /// What one [`crate::Store::maintain`] pass may re-encode.
    pub budget: Budget,
    /// The clock reads are recorded with.
    pub clock: ReadClock,
    /// Reads of a Tier 0 block without a reconstruct policy fail with
    /// [`crate::StoreError::TierZeroNoPolicy`] instead of returning zeros.
    pub fail_fast: bool,
    /// Frame streams ([`crate::Store::append_frame`]).
    pub frames: frames::FrameOptions,
}

impl Default for TierOptions {
    fn default() -> Self {
        TierOptions {
            config: TierConfig::default(),
            budget: Budget::new(256 << 20, 100_000),
            clock: ReadClock::System,
            fail_fast: false,
            frames: frames::FrameOptions::default(),
        }
    }
}

/// What one [`crate::Store::maintain`] pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MaintainReport {
    /// Blocks moved between tiers.
    pub moves: usize,
    /// Lossless versions converted to their tiered policy's start tier.
    pub converted: usize,
    /// Bytes of new segments written.
    pub bytes_written: u64,
    /// Warm bytes (7- and 5-bit blocks, the policy's size model) before and after.
    pub warm_bytes_before: u64,
    /// Warm bytes after the pass.
    pub warm_bytes_after: u64,
    /// Moves the policy wanted but left for a later pass (budget, cap).
    pub deferred: u32,
    /// Read statistics written back.
    pub stats_saved: usize,
}

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

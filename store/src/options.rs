//! Settings of a store handle and of single writes.

use strata_codec::lossless::LosslessOptions;

use crate::error::{Result, StoreError};
use crate::record::MAX_BLOCK_BYTES;
use crate::tiers::TierOptions;

/// How a new version chooses the base its blocks are XORed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeltaPolicy {
    /// Delta against the previous version. When the chain of segments to decode would
    /// exceed [`Options::max_chain`], a delta against the lineage's keyframe (depth 2)
    /// instead, from which the chain continues; a new keyframe only when that delta is no
    /// smaller than the keyframe. Best ratio when versions drift slowly.
    #[default]
    Chain,
    /// Delta against the block's last keyframe (reads decode at most two segments); a new
    /// keyframe after [`Options::max_chain`] versions.
    Star,
}

/// Settings of a [`crate::Store`] handle. Blocks already written keep the cut and chain they
/// were written with; these settings apply to new writes and to reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Raw bytes per block (rounded down to whole elements, at least one). Default 1 MiB.
    pub block_bytes: u64,
    /// Most segments decoded to read one block, and for [`DeltaPolicy::Star`] the most
    /// versions between keyframes. 1 stores every block as a keyframe. Default 6 (ADR 0006).
    pub max_chain: u8,
    /// How bases are chosen. Default [`DeltaPolicy::Chain`].
    pub policy: DeltaPolicy,
    /// Bytes of decoded blocks kept in memory for reads and delta encoding. 0 disables the
    /// cache. Default 256 MiB.
    pub cache_bytes: usize,
    /// Settings of the lossless codec.
    pub lossless: LosslessOptions,
    /// Bytes of redb's own page cache. Default 64 MiB.
    pub db_cache_bytes: usize,
    /// Tiering: the tier policy's settings, the maintenance budget, the read clock.
    pub tiering: TierOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_bytes: 1 << 20,
            max_chain: 6,
            policy: DeltaPolicy::Chain,
            cache_bytes: 256 << 20,
            lossless: LosslessOptions::default(),
            db_cache_bytes: 64 << 20,
            tiering: TierOptions::default(),
        }
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        let fail = |reason: String| Err(StoreError::InvalidOptions { reason });
        if self.block_bytes == 0 || self.block_bytes > MAX_BLOCK_BYTES {
            return fail(format!(
                "block_bytes {} must be in 1..={MAX_BLOCK_BYTES}",
                self.block_bytes
            ));
        }
        if self.max_chain == 0 {
            return fail("max_chain must be at least 1".into());
        }
        if let Err(e) = self.tiering.config.validate() {
            return fail(format!("tiering.config: {e}"));
        }
        Ok(())
    }

    /// Elements per block for a dtype of `size` bytes.
    pub(crate) fn block_elems(&self, size: usize) -> u64 {
        (self.block_bytes / size as u64).max(1)
    }
}

/// Settings of one [`crate::Store::put_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PutOptions {
    /// Replace the version if the step exists (versions based on it are re-based in the same
    /// transaction). Default `false`: an existing step is [`StoreError::StepExists`].
    pub overwrite: bool,
}

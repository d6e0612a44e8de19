//! Settings of a store handle ([`Options`], with its tiering part [`TierOptions`] and frame
//! streams' settings) and of single writes ([`PutOptions`]).

pub use strata_codec::chain::DeltaPolicy;
use strata_codec::chain::DEFAULT_MAX_CHAIN;
use strata_codec::lossless::LosslessOptions;
use strata_tiering::{Budget, Clock, TierConfig};

use crate::error::{InvalidInput, Result, StoreError};
use crate::record::MAX_BLOCK_BYTES;

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
    /// Under [`DeltaPolicy::Chain`], keep the newest version of a tensor as the keyframe of
    /// its lineage where that costs about nothing (ADR 0006): a write appending a version
    /// stores its blocks as keyframes and re-encodes the previous newest's against them, so
    /// the newest checkpoint reads without a chain and older ones read through at most
    /// `max_chain` segments as before. A block whose delta is much smaller than a keyframe
    /// (slowly drifting weights) keeps forward chains. Default `true`.
    pub newest_keyframe: bool,
    /// Bytes of decoded blocks kept in memory for reads and delta encoding. 0 disables the
    /// cache. Default 256 MiB. A write keeps only what later writes read: the newest version
    /// of each block it writes and the keyframes under them (ADR 0030).
    pub cache_bytes: usize,
    /// Settings of the lossless codec.
    pub lossless: LosslessOptions,
    /// Bytes of redb's own page cache. Default 64 MiB; [`Options::for_reading`] (what
    /// [`crate::Store::open_read_only`] uses) 2 MiB. redb keeps at most half of it in dirty
    /// pages of a write; the rest goes to the file before the commit. Only single pages are
    /// cached (the trees); the larger ones, segment chunks, are read from the file each time
    /// (ADR 0042).
    pub db_cache_bytes: usize,
    /// Raw bytes of tensor data a write encodes at once (ADR 0014): a checkpoint, an import or
    /// a single tensor larger than this is read, encoded and inserted a window at a time, so a
    /// write holds about three windows (data, bases, segments) whatever its size. Tensors of at
    /// most an eighth of this are gathered into one window. Default 128 MiB.
    pub window_bytes: u64,
    /// Tiering: the tier policy's settings, the maintenance budget, the read clock.
    pub tiering: TierOptions,
    /// Push each committed checkpoint to this remote in the background ([`crate::Store::flush`]
    /// waits for it). Default none.
    #[cfg(feature = "remote")]
    pub upload: Option<crate::remote::UploadOptions>,
    /// Closing a writer's handle trims the file: it cuts the free pages off its end (the room
    /// redb grew it by, which the writer's choice of the lowest free pages keeps there: ADR
    /// 0040) so that `ls -l` tells its size (ADR 0028), and compacts it when the pages this
    /// handle's deletions freed exceed a tenth of it (ADR 0038); [`crate::Store::trim`] has the
    /// whole rule. A read in progress skips the compaction. Default `true`; `strata import
    /// --no-compact` turns it off (redb's own close still cuts the free end).
    pub trim_on_close: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_bytes: 1 << 20,
            max_chain: DEFAULT_MAX_CHAIN,
            policy: DeltaPolicy::Chain,
            newest_keyframe: true,
            cache_bytes: 256 << 20,
            lossless: LosslessOptions::default(),
            db_cache_bytes: 64 << 20,
            window_bytes: 128 << 20,
            tiering: TierOptions::default(),
            #[cfg(feature = "remote")]
            upload: None,
            trim_on_close: true,
        }
    }
}

/// redb's page cache of a handle that only reads ([`Options::for_reading`], ADR 0031).
pub const READ_DB_CACHE_BYTES: usize = 2 << 20;

impl Options {
    /// The defaults of a handle that only reads ([`crate::Store::open_read_only`]): redb's page
    /// cache is [`READ_DB_CACHE_BYTES`] instead of 64 MiB. A reader visits each page of the
    /// version index and of the segments it decodes about once (decoded blocks are kept in
    /// Strata's own cache, `cache_bytes`); a large page cache only grows the process. A
    /// writer keeps 64 MiB: deletions walk and rewrite the version index, whose pages it reads
    /// many times (`retain` of 1000 checkpoints is 20 % slower with 8 MiB, ADR 0031).
    pub fn for_reading() -> Options {
        Options {
            db_cache_bytes: READ_DB_CACHE_BYTES,
            ..Options::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let fail = |reason: String| Err(StoreError::Invalid(InvalidInput::Options { reason }));
        if self.block_bytes == 0 || self.block_bytes > MAX_BLOCK_BYTES {
            return fail(format!(
                "block_bytes {} must be in 1..={MAX_BLOCK_BYTES}",
                self.block_bytes
            ));
        }
        if self.window_bytes == 0 {
            return fail("window_bytes must be at least 1".into());
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
    /// transaction). Default `false`: an existing step is [`crate::InvalidInput::StepExists`].
    pub overwrite: bool,
}

/// Settings of tiering in a store handle.
#[derive(Debug, Clone, PartialEq)]
pub struct TierOptions {
    /// The tier policy's settings (thresholds, hysteresis, `warm_byte_cap`, Tier 0).
    pub config: TierConfig,
    /// What one [`crate::Store::maintain`] pass may re-encode.
    pub budget: Budget,
    /// The clock reads are recorded with (milliseconds; the tier policy uses only
    /// differences). [`crate::Store::maintain`] takes its time from the caller.
    pub clock: Clock,
    /// Reads of a Tier 0 block without a reconstruct policy fail with
    /// [`crate::TierFailure::ZeroNoPolicy`] instead of returning zeros.
    pub fail_fast: bool,
    /// Frame streams ([`crate::Store::append_frame`]).
    pub frames: FrameOptions,
}

impl Default for TierOptions {
    fn default() -> Self {
        TierOptions {
            config: TierConfig::default(),
            budget: Budget::new(256 << 20, 100_000),
            clock: Clock::System,
            fail_fast: false,
            frames: FrameOptions::default(),
        }
    }
}

/// Settings of frame streams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameOptions {
    /// Drift tolerance: a frame reuses the epoch's scales while each group's largest
    /// magnitude is within a factor `1 + drift` of the epoch's (up or down). Default 0.1.
    pub drift: f32,
    /// Frames per multi-frame segment. Default 16.
    pub max_frames: u32,
}

impl Default for FrameOptions {
    fn default() -> Self {
        FrameOptions {
            drift: 0.1,
            max_frames: 16,
        }
    }
}

//! The policy's state: every registered block's tier, policy, precision and read
//! statistics, and the bytes held per tier.
//!
//! Storage: per-block state lives in two dense `Vec`s indexed by a slot: read statistics
//! in one 64-byte, cache-line-aligned record per block (so recording a read touches one
//! line), everything else apart. A `HashMap<BlockId, u32>` finds a block's slot; it uses a
//! fixed integer mixer (the splitmix64 finalizer) instead of SipHash, since block ids come
//! from the store, not from an adversary. [`TierState::register`] also returns a
//! [`BlockHandle`] (slot and generation) with which [`TierState::record_access_handle`]
//! skips the map: the store keeps it next to its own per-block data. Removed slots go to a
//! free list and are reused; the generation tells a stale handle from the slot's new
//! owner. Create the state with [`TierState::with_capacity`] and registering up to that
//! many blocks allocates once; recording reads never allocates. Nothing the policy outputs
//! depends on slot order (plans sort by block id).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::clock::Tick;
use crate::config::TierConfig;
use crate::error::TierError;
use crate::precision::Precision;
use crate::score::AccessStats;
use crate::tier::{BlockId, Policy, ReconstructPolicy, SizeModel, Tier};

/// A hasher for `u64` keys: the splitmix64 finalizer. Deterministic, fast, well mixed in
/// every bit (hashbrown uses both the top and the bottom bits).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }
}

type IdMap = HashMap<BlockId, u32, BuildHasherDefault<IdHasher>>;

/// A registered block's slot and generation: a direct way to its state that skips the
/// id lookup ([`TierState::record_access_handle`]). Valid until the block is removed.
///
/// ```
/// use strata_tiering::{BlockSpec, Tier, TierConfig, TierState, MINUTE};
/// let mut st = TierState::new(TierConfig::default())?;
/// let h = st.register(BlockSpec::tiered(5, 4096, Tier::Cold3), 0)?;
/// st.record_access_handle(h, MINUTE)?;
/// assert_eq!(st.handle(5), Some(h));
/// st.remove(5)?;
/// assert!(st.record_access_handle(h, 2 * MINUTE).is_err());
/// # Ok::<(), strata_tiering::TierError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHandle {
    slot: u32,
    gen: u32,
}

/// Read statistics of one slot, on a cache line of its own, with the slot's generation.
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(64))]
pub(crate) struct SlotStats {
    pub(crate) stats: AccessStats,
    gen: u32,
}

/// What the store tells the policy about a block when it registers it.
///
/// ```
/// use strata_tiering::{BlockSpec, Policy, ReconstructPolicy, Tier};
/// let fresh = BlockSpec::tiered(1, 4096, Tier::Hot8);
/// assert_eq!(fresh.policy, Policy::Tiered { start: Tier::Hot8 });
/// // Reopening a store: the block is already cold and can be rebuilt from block 9.
/// let reopened = BlockSpec::tiered(2, 4096, Tier::Hot8)
///     .at_tier(Tier::Cold3)
///     .with_reconstruct(ReconstructPolicy::Delta { base: 9 });
/// assert_eq!(reopened.tier, Some(Tier::Cold3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockSpec {
    /// The block's key.
    pub id: BlockId,
    /// Number of values in the block (>= 1).
    pub values: u32,
    /// How the policy may treat it.
    pub policy: Policy,
    /// How to rebuild it at Tier 0.
    pub reconstruct: ReconstructPolicy,
    /// Tier it is stored at now; `None` means the policy's write tier (fresh data).
    pub tier: Option<Tier>,
    /// Precision of the data it holds; `None` means one encoding of exact data at `tier`.
    pub precision: Option<Precision>,
    /// Read statistics kept from an earlier session; `None` starts empty at registration.
    pub stats: Option<AccessStats>,
    /// Whether the store keeps this block's exact data elsewhere (lossless history) and
    /// re-encodes from it: every move then yields one fresh encoding, and promotions regain
    /// precision. Default false: a move re-encodes the data the block holds.
    pub exact_source: bool,
}

impl BlockSpec {
    /// A block with `policy`, freshly written.
    pub fn new(id: BlockId, values: u32, policy: Policy) -> Self {
        Self {
            id,
            values,
            policy,
            reconstruct: ReconstructPolicy::None,
            tier: None,
            precision: None,
            stats: None,
            exact_source: false,
        }
    }

    /// A block the policy moves, freshly written at `start`.
    pub fn tiered(id: BlockId, values: u32, start: Tier) -> Self {
        Self::new(id, values, Policy::Tiered { start })
    }

    /// A lossless block the policy never moves.
    pub fn exact(id: BlockId, values: u32) -> Self {
        Self::new(id, values, Policy::Exact)
    }

    /// A block held at `tier` forever.
    pub fn pinned(id: BlockId, values: u32, tier: Tier) -> Self {
        Self::new(id, values, Policy::Pinned(tier))
    }

    /// Sets the Tier 0 reconstruct policy.
    pub fn with_reconstruct(mut self, reconstruct: ReconstructPolicy) -> Self {
        self.reconstruct = reconstruct;
        self
    }

    /// Sets the tier the block is stored at now (a reopened store).
    pub fn at_tier(mut self, tier: Tier) -> Self {
        self.tier = Some(tier);
        self
    }

    /// Sets the precision of the data it holds (a reopened store).
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = Some(precision);
        self
    }

    /// Marks the block as having an exact source the store re-encodes from.
    pub fn with_exact_source(mut self) -> Self {
        self.exact_source = true;
        self
    }

    /// Sets the read statistics saved in an earlier session ([`AccessStats::to_bytes`]).
    pub fn with_stats(mut self, stats: AccessStats) -> Self {
        self.stats = Some(stats);
        self
    }
}

/// Per-block state other than read statistics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockMeta {
    pub(crate) id: BlockId,
    pub(crate) values: u32,
    pub(crate) tier: Tier,
    pub(crate) policy: Policy,
    pub(crate) reconstruct: ReconstructPolicy,
    pub(crate) precision: Precision,
    /// Registration, last planned move, or revival by a write.
    pub(crate) last_move: Tick,
    /// Registration or last exact write.
    pub(crate) last_write: Tick,
    pub(crate) moves: u32,
    pub(crate) flips: u32,
    /// Direction of the last planned move: -1 down, 1 up, 0 none yet.
    pub(crate) last_dir: i8,
    /// False for a free slot (removed block).
    pub(crate) live: bool,
    /// The store re-encodes from an exact copy.
    pub(crate) exact_source: bool,
}

/// A snapshot of one block, for the store's reports and for tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockView {
    /// The block.
    pub id: BlockId,
    /// Number of values.
    pub values: u32,
    /// Current tier.
    pub tier: Tier,
    /// Policy.
    pub policy: Policy,
    /// Tier 0 reconstruct policy.
    pub reconstruct: ReconstructPolicy,
    /// Precision of the data held.
    pub precision: Precision,
    /// Last counted read, if any.
    pub last_read: Option<Tick>,
    /// Registration or last exact write.
    pub last_write: Tick,
    /// Registration, last move, or revival by a write.
    pub last_move: Tick,
    /// Counted reads.
    pub reads: u32,
    /// Moves applied from plans.
    pub moves: u32,
    /// Moves that reversed the direction of the previous move (up after down, or down
    /// after up): the flapping hysteresis is there to prevent.
    pub flips: u32,
    /// Whether the store re-encodes it from an exact copy ([`BlockSpec::exact_source`]).
    pub exact_source: bool,
}

/// Bytes held per tier.
///
/// ```
/// use strata_tiering::{BlockSpec, Tier, TierConfig, TierState};
/// let mut st = TierState::new(TierConfig::default())?;
/// st.register(BlockSpec::tiered(1, 64, Tier::Warm7), 0)?;
/// assert_eq!(st.bytes_by_tier().get(Tier::Warm7), 48 + 60);
/// assert_eq!(st.bytes_by_tier().warm(), st.warm_bytes());
/// # Ok::<(), strata_tiering::TierError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierBytes([u64; 6]);

impl TierBytes {
    /// Bytes in `tier`.
    pub fn get(&self, tier: Tier) -> u64 {
        self.0[tier.index()]
    }

    /// Bytes in the warm tiers (7 and 5 bits).
    pub fn warm(&self) -> u64 {
        self.get(Tier::Warm7) + self.get(Tier::Warm5)
    }

    /// Bytes in all tiers.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    fn add(&mut self, tier: Tier, bytes: u64) {
        self.0[tier.index()] += bytes;
    }

    fn sub(&mut self, tier: Tier, bytes: u64) {
        self.0[tier.index()] -= bytes;
    }
}

/// Every registered block and its tier state. See the [crate docs](crate) for an example.
#[derive(Debug, Clone)]
pub struct TierState {
    pub(crate) config: TierConfig,
    pub(crate) sizes: SizeModel,
    index: IdMap,
    pub(crate) meta: Vec<BlockMeta>,
    pub(crate) access: Vec<SlotStats>,
    free: Vec<u32>,
    bytes: TierBytes,
}

impl TierState {
    /// An empty state.
    ///
    /// # Errors
    /// [`TierError::InvalidConfig`] if `config` does not validate.
    pub fn new(config: TierConfig) -> Result<Self, TierError> {
        Self::with_capacity(config, 0)
    }

    /// An empty state with room for `blocks` blocks without reallocating.
    ///
    /// # Errors
    /// [`TierError::InvalidConfig`] if `config` does not validate.
    pub fn with_capacity(config: TierConfig, blocks: usize) -> Result<Self, TierError> {
        config.validate()?;
        Ok(Self {
            config,
            sizes: SizeModel::new(config.group_size),
            index: IdMap::with_capacity_and_hasher(blocks, BuildHasherDefault::default()),
            meta: Vec::with_capacity(blocks),
            access: Vec::with_capacity(blocks),
            free: Vec::new(),
            bytes: TierBytes::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &TierConfig {
        &self.config
    }

    /// Replaces the settings (a new `warm_byte_cap` takes effect at the next plan).
    ///
    /// # Errors
    /// [`TierError::InvalidConfig`] if `config` does not validate; nothing changes then.
    pub fn set_config(&mut self, config: TierConfig) -> Result<(), TierError> {
        config.validate()?;
        self.config = config;
        if self.sizes.group_size() != config.group_size {
            self.sizes = SizeModel::new(config.group_size);
            let mut bytes = TierBytes::default();
            for m in self.meta.iter().filter(|m| m.live) {
                bytes.add(m.tier, self.sizes.block_bytes(m.tier, m.values));
            }
            self.bytes = bytes;
        }
        Ok(())
    }

    /// The size model in use (from `config.group_size`).
    pub fn sizes(&self) -> SizeModel {
        self.sizes
    }

    /// Number of registered blocks.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no block is registered.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Number of slots, live or free (planning scans them all).
    pub(crate) fn slots(&self) -> usize {
        self.meta.len()
    }

    /// Bytes held per tier, by the [`SizeModel`].
    pub fn bytes_by_tier(&self) -> TierBytes {
        self.bytes
    }

    /// Bytes held in the warm tiers, the figure `warm_byte_cap` limits.
    pub fn warm_bytes(&self) -> u64 {
        self.bytes.warm()
    }

    /// Registers a block at `now` (its residency and idle time start then) and returns its
    /// handle.
    ///
    /// # Errors
    /// [`TierError::DuplicateBlock`]; [`TierError::InvalidBlock`] if `values` is 0, a
    /// tiered block's start tier is not quantized, an exact block is not at `Exact`, a
    /// pinned block is not at its tier, a tiered block is at `Exact`, or the precision
    /// claims more than the tier can hold; [`TierError::TooManyBlocks`].
    pub fn register(&mut self, spec: BlockSpec, now: Tick) -> Result<BlockHandle, TierError> {
        if self.index.contains_key(&spec.id) {
            return Err(TierError::DuplicateBlock { block: spec.id });
        }
        let tier = spec.tier.unwrap_or(spec.policy.write_tier());
        let precision = spec.precision.unwrap_or(Precision::fresh(tier));
        let invalid = |reason| TierError::InvalidBlock {
            block: spec.id,
            policy: spec.policy,
            tier,
            reason,
        };
        if spec.values == 0 {
            return Err(invalid("a block holds at least one value"));
        }
        match spec.policy {
            Policy::Exact if tier != Tier::Exact => {
                return Err(invalid("an exact block is stored at Exact"));
            }
            Policy::Pinned(t) if tier != t => {
                return Err(invalid("a pinned block is stored at its tier"));
            }
            Policy::Tiered { start } => {
                if start.bits().is_none() {
                    return Err(invalid("a tiered block starts at a quantized tier"));
                }
                if tier == Tier::Exact {
                    return Err(invalid("a tiered block is never at Exact"));
                }
            }
            _ => {}
        }
        if !precision.fits_tier(tier) {
            return Err(invalid("precision claims more than the tier holds"));
        }
        let meta = BlockMeta {
            id: spec.id,
            values: spec.values,
            tier,
            policy: spec.policy,
            reconstruct: spec.reconstruct,
            precision,
            last_move: now,
            last_write: now,
            moves: 0,
            flips: 0,
            last_dir: 0,
            live: true,
            exact_source: spec.exact_source,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.meta[slot as usize] = meta;
                slot
            }
            None => {
                let slot = u32::try_from(self.meta.len())
                    .ok()
                    .filter(|&s| s != u32::MAX)
                    .ok_or(TierError::TooManyBlocks {
                        max: u32::MAX as usize - 1,
                    })?;
                self.meta.push(meta);
                self.access.push(SlotStats::default());
                slot
            }
        };
        self.access[slot as usize].stats = spec.stats.unwrap_or(AccessStats::new(now));
        self.index.insert(spec.id, slot);
        self.bytes
            .add(tier, self.sizes.block_bytes(tier, spec.values));
        Ok(BlockHandle {
            slot,
            gen: self.access[slot as usize].gen,
        })
    }

    /// Forgets a block (the store deleted it). Its handle becomes invalid.
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn remove(&mut self, id: BlockId) -> Result<(), TierError> {
        let slot = self
            .index
            .remove(&id)
            .ok_or(TierError::UnknownBlock { block: id })?;
        let m = &mut self.meta[slot as usize];
        m.live = false;
        self.bytes
            .sub(m.tier, self.sizes.block_bytes(m.tier, m.values));
        let a = &mut self.access[slot as usize];
        a.gen = a.gen.wrapping_add(1);
        self.free.push(slot);
        Ok(())
    }

    /// The handle of `id`, if registered.
    pub fn handle(&self, id: BlockId) -> Option<BlockHandle> {
        self.slot_opt(id).map(|slot| BlockHandle {
            slot: slot as u32,
            gen: self.access[slot].gen,
        })
    }

    #[inline]
    pub(crate) fn slot(&self, id: BlockId) -> Result<usize, TierError> {
        self.index
            .get(&id)
            .map(|&s| s as usize)
            .ok_or(TierError::UnknownBlock { block: id })
    }

    pub(crate) fn slot_opt(&self, id: BlockId) -> Option<usize> {
        self.index.get(&id).map(|&s| s as usize)
    }

    /// Records a read of `id` at `now`: one hash lookup and an update of a fixed-size
    /// record, no allocation. Reads within `config.score.correlation` of the block's
    /// previous counted read are merged into it.
    ///
    /// ```
    /// use strata_tiering::{BlockSpec, Tier, TierConfig, TierState, MINUTE};
    /// let mut st = TierState::new(TierConfig::default())?;
    /// st.register(BlockSpec::tiered(5, 4096, Tier::Cold3), 0)?;
    /// for i in 1..=8 {
    ///     st.record_access(5, i * MINUTE)?;
    /// }
    /// assert!(st.score(5, 8 * MINUTE)? >= 60.0);
    /// # Ok::<(), strata_tiering::TierError>(())
    /// ```
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    #[inline]
    pub fn record_access(&mut self, id: BlockId, now: Tick) -> Result<(), TierError> {
        let slot = self.slot(id)?;
        self.access[slot].stats.record(now, &self.config.score);
        Ok(())
    }

    /// [`TierState::record_access`] by handle: no hash lookup, one cache line touched.
    ///
    /// # Errors
    /// [`TierError::StaleHandle`] if the block was removed.
    #[inline]
    pub fn record_access_handle(
        &mut self,
        handle: BlockHandle,
        now: Tick,
    ) -> Result<(), TierError> {
        match self.access.get_mut(handle.slot as usize) {
            Some(a) if a.gen == handle.gen && self.meta[handle.slot as usize].live => {
                a.stats.record(now, &self.config.score);
                Ok(())
            }
            _ => Err(TierError::StaleHandle),
        }
    }

    /// Records an exact write of new data into `id` at `now` and returns the tier the
    /// store encodes it at: the block's tier, or its policy's write tier when it was
    /// absent (a write brings a Tier 0 block back; that is not a planned move and counts
    /// as neither a move nor a flip). The precision becomes one encoding of exact data.
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn record_write(&mut self, id: BlockId, now: Tick) -> Result<Tier, TierError> {
        let slot = self.slot(id)?;
        let sizes = self.sizes;
        let m = &mut self.meta[slot];
        m.last_write = m.last_write.max(now);
        if m.tier == Tier::Absent {
            let to = m.policy.write_tier();
            if to != Tier::Absent {
                self.bytes.add(to, sizes.block_bytes(to, m.values));
                m.tier = to;
                m.last_move = now;
                m.last_dir = 0;
            }
        }
        m.precision = Precision::fresh(m.tier);
        Ok(m.tier)
    }

    /// Changes how `id` is rebuilt at Tier 0.
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn set_reconstruct(
        &mut self,
        id: BlockId,
        reconstruct: ReconstructPolicy,
    ) -> Result<(), TierError> {
        let slot = self.slot(id)?;
        self.meta[slot].reconstruct = reconstruct;
        Ok(())
    }

    /// The access score of `id` at `now`, in reads per hour.
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn score(&self, id: BlockId, now: Tick) -> Result<f64, TierError> {
        let slot = self.slot(id)?;
        Ok(self.access[slot].stats.score(now, &self.config.score))
    }

    /// The tier of `id`.
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn tier(&self, id: BlockId) -> Result<Tier, TierError> {
        Ok(self.meta[self.slot(id)?].tier)
    }

    /// The read statistics of `id` (to save across restarts: [`AccessStats::to_bytes`]).
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn stats(&self, id: BlockId) -> Result<AccessStats, TierError> {
        Ok(self.access[self.slot(id)?].stats)
    }

    /// The precision of the data `id` holds.
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn precision(&self, id: BlockId) -> Result<Precision, TierError> {
        Ok(self.meta[self.slot(id)?].precision)
    }

    /// Fewest bits per value among the encodings `id` went through since its last exact
    /// write: `None` when it holds exact data, `Some(0)` when it holds none (Tier 0).
    ///
    /// ```
    /// use strata_tiering::{BlockSpec, Budget, Tier, TierConfig, TierState, HOUR};
    /// let mut st = TierState::new(TierConfig::default())?;
    /// st.register(BlockSpec::tiered(1, 4096, Tier::Hot8), 0)?;
    /// assert_eq!(st.effective_bits(1)?, Some(8));
    /// st.maintain(HOUR, Budget::UNLIMITED)?; // never read: hot -> warm
    /// assert_eq!(st.tier(1)?, Tier::Warm7);
    /// assert_eq!(st.effective_bits(1)?, Some(7));
    /// assert!(st.error_bound_rel(1)? > 1.0 / 126.0); // 8 then 7 bits
    /// # Ok::<(), strata_tiering::TierError>(())
    /// ```
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn effective_bits(&self, id: BlockId) -> Result<Option<u8>, TierError> {
        Ok(self.precision(id)?.bits())
    }

    /// Worst-case error of `id`'s values relative to their group maximum in the last
    /// exact data (see [`Precision`]): 0 for exact data, infinity for Tier 0.
    ///
    /// # Errors
    /// [`TierError::UnknownBlock`].
    pub fn error_bound_rel(&self, id: BlockId) -> Result<f64, TierError> {
        Ok(self.precision(id)?.error_bound_rel())
    }

    /// A snapshot of `id`, or `None` if it is not registered.
    pub fn block(&self, id: BlockId) -> Option<BlockView> {
        self.slot_opt(id).map(|s| self.view(s))
    }

    /// Snapshots of every block, in storage order (not sorted; sort by `id` if order
    /// matters).
    pub fn blocks(&self) -> impl Iterator<Item = BlockView> + '_ {
        (0..self.meta.len())
            .filter(|&s| self.meta[s].live)
            .map(|s| self.view(s))
    }

    fn view(&self, slot: usize) -> BlockView {
        let m = &self.meta[slot];
        let a = &self.access[slot].stats;
        BlockView {
            id: m.id,
            values: m.values,
            tier: m.tier,
            policy: m.policy,
            reconstruct: m.reconstruct,
            precision: m.precision,
            last_read: a.last_read(),
            last_write: m.last_write,
            last_move: m.last_move,
            reads: a.reads(),
            moves: m.moves,
            flips: m.flips,
            exact_source: m.exact_source,
        }
    }

    /// Last read or write of the block in `slot` (registration counts as a write): the
    /// recency that orders warm blocks for the cap and measures idleness for Tier 0.
    #[inline]
    pub(crate) fn recency(&self, slot: usize) -> Tick {
        let w = self.meta[slot].last_write;
        match self.access[slot].stats.last_read() {
            Some(r) => r.max(w),
            None => w,
        }
    }

    /// Moves the block in `slot` to `to` at `now`; the caller has validated the move.
    pub(crate) fn move_slot(&mut self, slot: usize, to: Tier, now: Tick) {
        let sizes = self.sizes;
        let m = &mut self.meta[slot];
        let from = m.tier;
        self.bytes.sub(from, sizes.block_bytes(from, m.values));
        self.bytes.add(to, sizes.block_bytes(to, m.values));
        m.tier = to;
        m.precision = if m.exact_source {
            Precision::fresh(to)
        } else {
            m.precision.after_encode(to)
        };
        let dir: i8 = if to.rank() > from.rank() { 1 } else { -1 };
        if m.last_dir != 0 && m.last_dir != dir {
            m.flips += 1;
        }
        m.last_dir = dir;
        m.moves += 1;
        m.last_move = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MINUTE;

    fn state() -> TierState {
        TierState::new(TierConfig::default()).unwrap()
    }

    #[test]
    fn register_validates() {
        let mut st = state();
        st.register(BlockSpec::tiered(1, 10, Tier::Hot8), 0)
            .unwrap();
        assert_eq!(
            st.register(BlockSpec::tiered(1, 10, Tier::Hot8), 0),
            Err(TierError::DuplicateBlock { block: 1 })
        );
        for bad in [
            BlockSpec::tiered(2, 0, Tier::Hot8),
            BlockSpec::tiered(2, 10, Tier::Exact),
            BlockSpec::tiered(2, 10, Tier::Absent),
            BlockSpec::tiered(2, 10, Tier::Hot8).at_tier(Tier::Exact),
            BlockSpec::exact(2, 10).at_tier(Tier::Hot8),
            BlockSpec::pinned(2, 10, Tier::Warm7).at_tier(Tier::Warm5),
            BlockSpec::tiered(2, 10, Tier::Hot8)
                .at_tier(Tier::Cold3)
                .with_precision(Precision::fresh(Tier::Hot8)),
            BlockSpec::tiered(2, 10, Tier::Hot8).with_precision(Precision::Exact),
        ] {
            assert!(
                matches!(st.register(bad, 0), Err(TierError::InvalidBlock { .. })),
                "{bad:?}"
            );
        }
        st.register(BlockSpec::exact(3, 10), 0).unwrap();
        st.register(BlockSpec::pinned(4, 10, Tier::Absent), 0)
            .unwrap();
        assert_eq!(st.effective_bits(3).unwrap(), None);
        assert_eq!(st.effective_bits(4).unwrap(), Some(0));
        assert_eq!(st.len(), 3);
    }

    #[test]
    fn bytes_follow_register_and_remove() {
        let mut st = state();
        for id in 0..10 {
            st.register(BlockSpec::tiered(id, 4096, Tier::Warm7), 0)
                .unwrap();
        }
        let per = Tier::Warm7.block_bytes(4096, 64);
        assert_eq!(st.warm_bytes(), 10 * per);
        st.remove(3).unwrap();
        st.remove(9).unwrap();
        assert_eq!(st.warm_bytes(), 8 * per);
        assert_eq!(st.remove(3), Err(TierError::UnknownBlock { block: 3 }));
        // The block moved into slot 3 is still found.
        for id in [0, 1, 2, 4, 5, 6, 7, 8] {
            assert_eq!(st.tier(id).unwrap(), Tier::Warm7);
        }
        st.record_access(8, MINUTE).unwrap();
        assert_eq!(st.block(8).unwrap().reads, 1);
    }

    #[test]
    fn removed_slots_are_reused_and_old_handles_refused() {
        let mut st = state();
        let h1 = st
            .register(BlockSpec::tiered(1, 64, Tier::Hot8), 0)
            .unwrap();
        let h2 = st
            .register(BlockSpec::tiered(2, 64, Tier::Hot8), 0)
            .unwrap();
        st.record_access_handle(h1, MINUTE).unwrap();
        st.remove(1).unwrap();
        assert_eq!(
            st.record_access_handle(h1, MINUTE),
            Err(TierError::StaleHandle)
        );
        assert_eq!(st.len(), 1);
        assert_eq!(st.blocks().count(), 1);
        let h3 = st
            .register(BlockSpec::tiered(3, 64, Tier::Cold3), 0)
            .unwrap();
        assert_ne!(h1, h3);
        assert_eq!(st.slots(), 2, "slot of block 1 reused");
        assert_eq!(
            st.record_access_handle(h1, MINUTE),
            Err(TierError::StaleHandle)
        );
        // The new owner starts with fresh statistics.
        assert_eq!(st.block(3).unwrap().reads, 0);
        st.record_access_handle(h3, 2 * MINUTE).unwrap();
        st.record_access_handle(h2, 2 * MINUTE).unwrap();
        assert_eq!(st.block(3).unwrap().reads, 1);
        assert_eq!(
            st.bytes_by_tier().total(),
            Tier::Hot8.block_bytes(64, 64) + Tier::Cold3.block_bytes(64, 64)
        );
    }

    #[test]
    fn write_revives_absent_and_resets_precision() {
        let mut st = state();
        st.register(
            BlockSpec::tiered(1, 64, Tier::Hot8)
                .at_tier(Tier::Cold3)
                .with_precision(Precision::fresh(Tier::Hot8).after_encode(Tier::Cold3)),
            0,
        )
        .unwrap();
        assert_eq!(st.record_write(1, 5).unwrap(), Tier::Cold3);
        assert_eq!(st.error_bound_rel(1).unwrap(), 1.0 / 6.0);
        let slot = st.slot(1).unwrap();
        st.move_slot(slot, Tier::Absent, 10);
        assert_eq!(st.bytes_by_tier().get(Tier::Cold3), 0);
        assert_eq!(st.error_bound_rel(1).unwrap(), f64::INFINITY);
        assert_eq!(st.record_write(1, 20).unwrap(), Tier::Hot8);
        assert_eq!(st.effective_bits(1).unwrap(), Some(8));
        assert_eq!(st.bytes_by_tier().get(Tier::Hot8), 48 + 68);
    }

    #[test]
    fn read_statistics_fill_one_cache_line() {
        assert_eq!(std::mem::size_of::<SlotStats>(), 64);
        assert_eq!(std::mem::align_of::<SlotStats>(), 64);
    }

    #[test]
    fn hasher_spreads_sequential_ids() {
        let mut seen = std::collections::HashSet::new();
        for id in 0u64..1000 {
            let mut h = IdHasher::default();
            h.write_u64(id);
            seen.insert(h.finish() >> 57);
        }
        assert_eq!(seen.len(), 128);
    }
}

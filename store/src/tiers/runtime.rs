//! The in-memory side of tiering: the policy's [`TierState`] for every block of every tiered
//! version, the handles reads record accesses through, and the versions waiting to be
//! converted from lossless to their tiered policy.
//!
//! Reads record accesses here under a mutex, with no write transaction; `maintain` writes
//! the statistics of versions read since the last pass back to the tier rows, so scores
//! survive a reopen. The state is rebuilt from the tier rows when the store opens.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use redb::ReadableTable;
use strata_codec::frames::FrameStreamEncoder;
use strata_tiering::{
    BlockHandle, BlockId, BlockSpec, ReconstructPolicy, Tick, Tier, TierConfig, TierError,
    TierState,
};

use crate::engine::{ReadTxn, TierChanges, VersionId, View};
use crate::error::{Corruption, DbContext, Result, StoreError, TierFailure};
use crate::record::{
    decode_version_key, split_tier_key, RecordError, ResidualRef, Stored, TierRow, VersionRecord,
};
use crate::tiers::policy::Reconstruct;
/// The blocks of a version: their ids and handles, in block order.
type BlockHandles = Vec<(BlockId, BlockHandle)>;

/// The tiering state of an open store.
#[derive(Debug)]
pub(crate) struct Runtime {
    pub(crate) state: TierState,
    /// Per tensor and step of a tiered version, the handle of each block (in block order):
    /// looked up by `&str` on every read, without allocating.
    handles: HashMap<Arc<str>, HashMap<u64, BlockHandles>>,
    /// Where each registered block lives: version and block index.
    pub(crate) location: HashMap<BlockId, (VersionId, u32)>,
    /// Lossless versions whose policy became tiered: `maintain` converts them.
    pub(crate) pending: BTreeSet<VersionId>,
    /// Versions read since the last `maintain`: their statistics are saved then.
    pub(crate) read_since_save: HashSet<VersionId>,
    /// Open frame streams by tensor name (resumed from the file when missing).
    pub(crate) streams: HashMap<Arc<str>, Stream>,
}

/// An open frame stream: its encoder and the steps of the open epoch's frames.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) encoder: FrameStreamEncoder,
    /// Address of the open epoch's segment as last written.
    pub(crate) address: u128,
    /// Steps of the frames of the open epoch, in order.
    pub(crate) steps: Vec<u64>,
}

/// The tiering policy's reconstruct policy for a block whose tensor has `r`: a source the
/// policy does not track counts as held (ADR 0007), so Tier 0 eligibility only needs to
/// know whether there is one.
pub(crate) fn tiering_reconstruct(r: &Reconstruct) -> ReconstructPolicy {
    match r {
        Reconstruct::None => ReconstructPolicy::None,
        _ => ReconstructPolicy::Factor { source: u64::MAX },
    }
}

/// What the policy is told about a block from its row.
pub(crate) fn spec_of(row: &TierRow, values: u32, reconstruct: ReconstructPolicy) -> BlockSpec {
    let mut spec = BlockSpec::new(row.id, values, row.policy)
        .at_tier(row.tier)
        .with_precision(row.precision)
        .with_reconstruct(reconstruct);
    if let Some(s) = row.stats {
        spec = spec.with_stats(s);
    }
    if matches!(row.residual, Some(ResidualRef::Exact { .. })) {
        spec = spec.with_exact_source();
    }
    spec
}

impl Runtime {
    pub(crate) fn new(config: TierConfig) -> Result<Runtime> {
        Ok(Runtime {
            state: TierState::new(config).map_err(tier_error)?,
            handles: HashMap::new(),
            location: HashMap::new(),
            pending: BTreeSet::new(),
            read_since_save: HashSet::new(),
            streams: HashMap::new(),
        })
    }

    /// Rebuilds the state from the tier rows of a store.
    pub(crate) fn load(
        config: TierConfig,
        r: &ReadTxn,
        reconstruct_of: impl Fn(&str) -> ReconstructPolicy,
        now: Tick,
    ) -> Result<Runtime> {
        let mut rt = Runtime::new(config)?;
        let mut current: Option<(VersionId, Arc<VersionRecord>)> = None;
        for entry in r.tiers.iter().ctx("loading tier rows")? {
            let (k, v) = entry.ctx("loading tier rows")?;
            let bad_key = || {
                StoreError::Corrupt(Corruption::Record {
                    what: "a tier row key".into(),
                    source: RecordError::BadValue {
                        field: "tier key",
                        value: k.value().len() as u64,
                    },
                })
            };
            let (vkey, block) = split_tier_key(k.value()).ok_or_else(bad_key)?;
            let (name, step) = decode_version_key(vkey).ok_or_else(bad_key)?;
            let row = TierRow::from_stored(k.value(), v.value()).map_err(|source| {
                StoreError::Corrupt(Corruption::Record {
                    what: format!("tier row of tensor {name:?} step {step} block {block}"),
                    source,
                })
            })?;
            let same = matches!(&current, Some(((n, s), _)) if &**n == name && *s == step);
            if !same {
                let rec = r.version(name, step)?.ok_or_else(|| {
                    StoreError::Corrupt(Corruption::TierRowOrphan {
                        tensor: name.to_string(),
                        step,
                        block: u64::from(block),
                    })
                })?;
                current = Some(((Arc::from(name), step), Arc::new(rec)));
            }
            let Some((vid, rec)) = &current else {
                continue;
            };
            if row.tier == Tier::Exact {
                rt.pending.insert(vid.clone());
                continue;
            }
            let values = rec.block_len(u64::from(block));
            let values = u32::try_from(values).map_err(|_| {
                StoreError::Corrupt(Corruption::TierRowOrphan {
                    tensor: name.to_string(),
                    step,
                    block: u64::from(block),
                })
            })?;
            let spec = spec_of(&row, values, reconstruct_of(name));
            // Residency and idle time go on from the row's last write or move.
            rt.register(vid.clone(), block, spec, row.since.min(now))?;
        }
        Ok(rt)
    }

    /// Registers block `block` of version `vid`.
    pub(crate) fn register(
        &mut self,
        vid: VersionId,
        block: u32,
        spec: BlockSpec,
        now: Tick,
    ) -> Result<()> {
        let id = spec.id;
        let h = self.state.register(spec, now).map_err(tier_error)?;
        let list = self
            .handles
            .entry(vid.0.clone())
            .or_default()
            .entry(vid.1)
            .or_default();
        list.push((id, h));
        self.location.insert(id, (vid, block));
        Ok(())
    }

    /// Forgets every block of a version (deleted or overwritten).
    pub(crate) fn forget(&mut self, vid: &VersionId) {
        self.pending.remove(vid);
        self.read_since_save.remove(vid);
        let Some(steps) = self.handles.get_mut(&vid.0) else {
            return;
        };
        if let Some(list) = steps.remove(&vid.1) {
            for (id, _) in list {
                // Registered above, so known; a failure would only mean it is gone already.
                let _ = self.state.remove(id);
                self.location.remove(&id);
            }
        }
        if steps.is_empty() {
            self.handles.remove(&vid.0);
        }
    }

    /// Records a read of blocks `blocks` of a version at the time `now` gives; versions
    /// that are not tiered cost one hash lookup (and no clock read).
    pub(crate) fn record_read(
        &mut self,
        name: &str,
        step: u64,
        blocks: std::ops::Range<u64>,
        now: impl FnOnce() -> Tick,
    ) {
        let Some((tensor, steps)) = self.handles.get_key_value(name) else {
            return;
        };
        let Some(list) = steps.get(&step) else {
            return;
        };
        let now = now();
        let lo = usize::try_from(blocks.start).unwrap_or(usize::MAX);
        let hi = usize::try_from(blocks.end).unwrap_or(usize::MAX);
        for (_, h) in list.iter().take(hi).skip(lo) {
            // A stale handle cannot happen (forget removes the list with its blocks).
            let _ = self.state.record_access_handle(*h, now);
        }
        self.read_since_save.insert((tensor.clone(), step));
    }

    /// The blocks of a version, in block order.
    pub(crate) fn blocks_of(&self, vid: &VersionId) -> &[(BlockId, BlockHandle)] {
        self.handles
            .get(&vid.0)
            .and_then(|s| s.get(&vid.1))
            .map_or(&[], Vec::as_slice)
    }

    /// Whether any block is registered or pending.
    pub(crate) fn is_idle(&self) -> bool {
        self.state.is_empty() && self.pending.is_empty()
    }
}

pub(crate) fn tier_error(e: TierError) -> StoreError {
    StoreError::Tier(TierFailure::Policy {
        source: Box::new(e),
    })
}

impl Runtime {
    /// Takes in the changes a committed write transaction made.
    pub(crate) fn apply(&mut self, changes: TierChanges, now: Tick) -> Result<()> {
        let rt = self;
        let TierChanges {
            forgotten,
            registered,
            pending,
        } = changes;
        // Any change to a tensor's versions ends its in-memory stream: the next append
        // resumes from the file.
        for v in forgotten.iter().chain(pending.iter()) {
            rt.streams.remove(&v.0);
        }
        for (v, _, _) in &registered {
            rt.streams.remove(&v.0);
        }
        for v in &forgotten {
            rt.forget(v);
        }
        for v in pending {
            rt.pending.insert(v);
        }
        for (vid, block, spec) in registered {
            rt.register(vid, block, spec, now)?;
        }
        Ok(())
    }
}

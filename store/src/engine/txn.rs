//! Transactions and the tables they open: one read set ([`ReadTxn`]), one write set
//! ([`WriteTxn`]), and the [`View`] through which the read path (block fetches, lookups)
//! works on either, so that a write can read what it is changing.

use std::sync::Arc;

use redb::{ReadOnlyTable, ReadableTable, Table, WriteTransaction};
use strata_tiering::BlockSpec;

use super::cache::{PartCache, PartMemo};
use super::handle::Handle;
use super::packs;
use super::segments::{self, fetch_error, FetchError, SegmentWriter};
use super::tables::{
    CHECKPOINTS, CHUNKS, FORMAT_KEY, MEMBERS, META, NEXT_BLOCK_ID_KEY, POLICIES, SEGMENTS, TAGS,
    TAILS, TIERS, VERSIONS,
};
use super::versions;
use super::view::View;
use crate::error::{Corruption, DbContext, Result, StoreError};
use crate::record::{
    version_key, CheckpointRecord, FormatRecord, RecordError, Stored, TierRow, VersionRecord,
};

/// A version: tensor name and step.
pub(crate) type VersionId = (Arc<str>, u64);

/// The tables of a read transaction (which they keep alive): one committed snapshot.
pub(crate) struct ReadTxn {
    pub(crate) versions: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(crate) segments: ReadOnlyTable<u128, &'static [u8]>,
    pub(crate) chunks: ReadOnlyTable<[u8; 12], &'static [u8]>,
    pub(crate) tails: ReadOnlyTable<[u8; 12], &'static [u8]>,
    pub(crate) tiers: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(crate) checkpoints: ReadOnlyTable<u64, &'static [u8]>,
    pub(crate) tags: ReadOnlyTable<&'static [u8], u64>,
    pub(crate) policies: ReadOnlyTable<&'static [u8], &'static [u8]>,
    /// The member index (ADR 0041); `None` in a store written before it.
    pub(crate) members: Option<ReadOnlyTable<&'static [u8], &'static [u8]>>,
    /// Pack parts decoded by this read.
    pub(crate) parts: PartMemo,
}

impl ReadTxn {
    /// Opens a read transaction and its tables; pack parts decode through `parts`.
    pub(crate) fn begin(db: &Handle, parts: PartCache) -> Result<ReadTxn> {
        let op = "starting a read";
        let txn = db.begin_read().ctx(op)?;
        Ok(ReadTxn {
            versions: txn.open_table(VERSIONS).ctx(op)?,
            segments: txn.open_table(SEGMENTS).ctx(op)?,
            chunks: txn.open_table(CHUNKS).ctx(op)?,
            tails: txn.open_table(TAILS).ctx(op)?,
            tiers: txn.open_table(TIERS).ctx(op)?,
            checkpoints: txn.open_table(CHECKPOINTS).ctx(op)?,
            tags: txn.open_table(TAGS).ctx(op)?,
            policies: txn.open_table(POLICIES).ctx(op)?,
            members: match txn.open_table(MEMBERS) {
                Ok(t) => Some(t),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(StoreError::db(op)(e.into())),
            },
            parts: PartMemo::new(parts),
        })
    }

    /// The member index, if the store has one.
    fn member_table(&self) -> Option<&ReadOnlyTable<&'static [u8], &'static [u8]>> {
        self.members.as_ref()
    }
}

/// The tables of a write transaction, and what the in-memory tier state must learn once it
/// commits.
pub(crate) struct WriteTxn<'txn> {
    pub(crate) versions: Table<'txn, &'static [u8], &'static [u8]>,
    pub(crate) segments: Table<'txn, u128, &'static [u8]>,
    pub(crate) chunks: Table<'txn, [u8; 12], &'static [u8]>,
    pub(crate) tails: Table<'txn, [u8; 12], &'static [u8]>,
    pub(crate) tiers: Table<'txn, &'static [u8], &'static [u8]>,
    pub(crate) checkpoints: Table<'txn, u64, &'static [u8]>,
    pub(crate) tags: Table<'txn, &'static [u8], u64>,
    pub(crate) policies: Table<'txn, &'static [u8], &'static [u8]>,
    pub(crate) meta: Table<'txn, &'static [u8], &'static [u8]>,
    /// The member index (ADR 0041), created when missing.
    pub(crate) members: Table<'txn, &'static [u8], &'static [u8]>,
    /// Pack parts decoded by this write.
    pub(crate) parts: PartMemo,
    /// Applied to the tier state after the commit.
    pub(crate) tier_changes: TierChanges,
}

/// Changes to the tier state made by a write transaction, applied once it commits.
#[derive(Debug, Default)]
pub(crate) struct TierChanges {
    /// Versions deleted or overwritten.
    pub(crate) forgotten: Vec<VersionId>,
    /// Blocks written or re-registered (after `forgotten`).
    pub(crate) registered: Vec<(VersionId, u32, BlockSpec)>,
    /// Lossless versions to convert at the next `maintain`.
    pub(crate) pending: Vec<VersionId>,
}

impl<'txn> WriteTxn<'txn> {
    /// Opens the tables of `txn`; pack parts decode through `parts`.
    pub(crate) fn open(txn: &'txn WriteTransaction, parts: PartCache) -> Result<Self> {
        let op = "opening tables";
        Ok(WriteTxn {
            versions: txn.open_table(VERSIONS).ctx(op)?,
            segments: txn.open_table(SEGMENTS).ctx(op)?,
            chunks: txn.open_table(CHUNKS).ctx(op)?,
            tails: txn.open_table(TAILS).ctx(op)?,
            tiers: txn.open_table(TIERS).ctx(op)?,
            checkpoints: txn.open_table(CHECKPOINTS).ctx(op)?,
            tags: txn.open_table(TAGS).ctx(op)?,
            policies: txn.open_table(POLICIES).ctx(op)?,
            meta: txn.open_table(META).ctx(op)?,
            members: txn.open_table(MEMBERS).ctx(op)?,
            parts: PartMemo::new(parts),
            tier_changes: TierChanges::default(),
        })
    }

    /// Takes `count` new tier block ids; returns the first.
    pub(crate) fn take_block_ids(&mut self, count: u64) -> Result<u64> {
        let op = "allocating tier block ids";
        let bad = |value| {
            StoreError::Corrupt(Corruption::Record {
                what: "next tier block id".into(),
                source: RecordError::BadValue {
                    field: "next_block_id",
                    value,
                },
            })
        };
        let next = match self.meta.get(NEXT_BLOCK_ID_KEY).ctx(op)? {
            Some(v) => {
                let b: [u8; 8] = v
                    .value()
                    .try_into()
                    .map_err(|_| bad(v.value().len() as u64))?;
                u64::from_le_bytes(b)
            }
            None => 1,
        };
        let after = next.checked_add(count).ok_or_else(|| bad(next))?;
        self.meta
            .insert(NEXT_BLOCK_ID_KEY, after.to_le_bytes().as_slice())
            .ctx(op)?;
        Ok(next)
    }

    fn segment_writer(&mut self) -> SegmentWriter<'_, 'txn> {
        SegmentWriter {
            meta: &mut self.meta,
            segments: &mut self.segments,
            chunks: &mut self.chunks,
            tails: &mut self.tails,
        }
    }

    /// Adds a reference to a segment (storing it if new), naming the block on failure.
    pub(crate) fn add_ref(
        &mut self,
        name: &str,
        step: u64,
        block: u64,
        address: u128,
        bytes: Option<&[u8]>,
    ) -> Result<()> {
        self.segment_writer()
            .add_ref(address, bytes)
            .map(|_| ())
            .map_err(|e| fetch_error(e, name, step, block, address))
    }

    /// Drops a reference to a segment, naming the block on failure.
    pub(crate) fn release(
        &mut self,
        name: &str,
        step: u64,
        block: u64,
        address: u128,
    ) -> Result<()> {
        self.segment_writer()
            .release(address)
            .map_err(|e| fetch_error(e, name, step, block, address))
    }

    /// Whether a segment is stored at `address`.
    #[cfg(feature = "remote")]
    pub(crate) fn has_segment(&mut self, address: u128) -> Result<bool> {
        match segments::info(&self.segments, address) {
            Ok(found) => Ok(found.is_some()),
            Err(e) => Err(fetch_error(e, "(a segment)", 0, 0, address)),
        }
    }

    /// Writes a version record.
    pub(crate) fn put_version(&mut self, name: &str, step: u64, rec: &VersionRecord) -> Result<()> {
        let key = version_key(name, step);
        self.versions
            .insert(key.as_slice(), rec.to_stored(&key).as_slice())
            .ctx("writing a version record")?;
        Ok(())
    }

    /// Writes a checkpoint record.
    pub(crate) fn put_checkpoint(&mut self, step: u64, cp: &CheckpointRecord) -> Result<()> {
        self.parts.checkpoint.lock().take();
        self.checkpoints
            .insert(
                step,
                cp.to_stored(&crate::record::checkpoint_key(step))
                    .as_slice(),
            )
            .ctx("writing a checkpoint")?;
        Ok(())
    }

    /// Makes the store's format record say format 3 (a format 2 store's first packed
    /// checkpoint, ADR 0041): builds that read only format 2 then refuse the file.
    pub(crate) fn require_packed_format(&mut self) -> Result<()> {
        let op = "upgrading the format record";
        let current = FormatRecord::current();
        let found = match self.meta.get(FORMAT_KEY).ctx(op)? {
            Some(v) => FormatRecord::decode(v.value()).ok().flatten(),
            None => None,
        };
        if found != Some(current) {
            self.meta
                .insert(FORMAT_KEY, current.encode().as_slice())
                .ctx(op)?;
        }
        Ok(())
    }

    /// Lists `name` as packed in the checkpoint at `step` (ADR 0041).
    pub(crate) fn add_member(&mut self, name: &str, step: u64) -> Result<()> {
        packs::add_member(&mut self.members, name, step)
    }

    /// Takes `name` out of the member index at `step`; whether it was listed.
    pub(crate) fn remove_member(&mut self, name: &str, step: u64) -> Result<bool> {
        packs::remove_member(&mut self.members, name, step)
    }

    /// The member index, as a read sees it.
    fn member_table(&self) -> Option<&Table<'txn, &'static [u8], &'static [u8]>> {
        Some(&self.members)
    }

    /// Removes the checkpoint at `step` and the tags naming it.
    pub(crate) fn remove_checkpoint(&mut self, step: u64) -> Result<()> {
        self.parts.checkpoint.lock().take();
        self.checkpoints.remove(step).ctx("removing a checkpoint")?;
        self.tags
            .retain(|_, s| s != step)
            .ctx("removing the tags of a checkpoint")?;
        Ok(())
    }
}

/// Implements [`View`] for a transaction type by the lookups of [`versions`] and [`packs`]
/// on its tables.
macro_rules! view_over_tables {
    ($t:ty) => {
        impl View for $t {
            fn stored_version(&self, name: &str, step: u64) -> Result<Option<VersionRecord>> {
                versions::load_version(&self.versions, name, step)
            }
            fn stored_at_or_before(
                &self,
                name: &str,
                step: u64,
            ) -> Result<Option<(u64, VersionRecord)>> {
                versions::at_or_before(&self.versions, name, step)
            }
            fn stored_versions_of(&self, name: &str) -> Result<Vec<(u64, VersionRecord)>> {
                versions::versions_of(&self.versions, name)
            }
            fn stored_has_versions(&self, name: &str) -> Result<bool> {
                versions::has_versions(&self.versions, name)
            }
            fn stored_has_version_after(&self, name: &str, step: u64) -> Result<bool> {
                versions::has_version_after(&self.versions, name, step)
            }
            fn is_member(&self, name: &str, step: u64) -> Result<bool> {
                packs::is_member(self.member_table(), name, step)
            }
            fn member_at_or_before(&self, name: &str, step: u64) -> Result<Option<u64>> {
                packs::member_at_or_before(self.member_table(), name, step)
            }
            fn member_steps(&self, name: &str) -> Result<Vec<u64>> {
                packs::member_steps(self.member_table(), name)
            }
            fn has_members(&self, name: &str) -> Result<bool> {
                packs::has_members(self.member_table(), name)
            }
            fn has_member_after(&self, name: &str, step: u64) -> Result<bool> {
                packs::has_member_after(self.member_table(), name, step)
            }
            fn member_version(&self, name: &str, step: u64) -> Result<Option<VersionRecord>> {
                packs::member_version(self, name, step)
            }
            fn part_memo(&self) -> &PartMemo {
                &self.parts
            }
            fn as_dyn(&self) -> &dyn View {
                self
            }
            fn tier_row(&self, name: &str, step: u64, block: u64) -> Result<Option<TierRow>> {
                versions::load_row(&self.tiers, name, step, block)
            }
            fn tier_rows(&self, name: &str, step: u64) -> Result<Vec<(u32, TierRow)>> {
                versions::load_rows(&self.tiers, name, step)
            }
            fn checkpoint(&self, step: u64) -> Result<Option<CheckpointRecord>> {
                versions::load_checkpoint(&self.checkpoints, step)
            }
            fn shared_checkpoint(&self, step: u64) -> Result<Option<Arc<CheckpointRecord>>> {
                versions::load_checkpoint_shared(&self.checkpoints, step, &self.parts.cache)
            }
            fn segment_bytes(&self, address: u128) -> Result<Vec<u8>, FetchError> {
                segments::fetch(&self.segments, &self.chunks, &self.tails, address)
            }
        }
    };
}

view_over_tables!(ReadTxn);
view_over_tables!(WriteTxn<'_>);

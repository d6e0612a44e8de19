//! The [`View`] through which the read path (block fetches, lookups) works on a read or a
//! write transaction, so that a write can read what it is changing.

use std::sync::Arc;

use super::cache::PartMemo;
use super::quantized;
use super::segments::{fetch_error, FetchError};
use crate::error::{Corruption, Result, StoreError};
use crate::record::{CheckpointRecord, TierRow, VersionRecord};

/// What the read path needs from a transaction, read or write.
///
/// The version lookups (`version`, `at_or_before`, `versions_of`, `has_versions`,
/// `has_version_after`) see both the version records and the tensors packed in checkpoints
/// (ADR 0041), which read as inline versions; the `stored_` ones see the records alone.
pub(crate) trait View {
    /// The record of version `step` of `name` in the version table, if any.
    fn stored_version(&self, name: &str, step: u64) -> Result<Option<VersionRecord>>;
    /// The latest version of `name` at or before `step` in the version table.
    fn stored_at_or_before(&self, name: &str, step: u64) -> Result<Option<(u64, VersionRecord)>>;
    /// Every version of `name` in the version table, in step order.
    fn stored_versions_of(&self, name: &str) -> Result<Vec<(u64, VersionRecord)>>;
    /// Whether `name` has a version record.
    fn stored_has_versions(&self, name: &str) -> Result<bool>;
    /// Whether `name` has a version record after `step` (no record is decoded).
    fn stored_has_version_after(&self, name: &str, step: u64) -> Result<bool>;
    /// Whether `name` is packed in the checkpoint at `step`.
    fn is_member(&self, name: &str, step: u64) -> Result<bool>;
    /// The latest step at or before `step` at which `name` is packed.
    fn member_at_or_before(&self, name: &str, step: u64) -> Result<Option<u64>>;
    /// Every step at which `name` is packed, ascending.
    fn member_steps(&self, name: &str) -> Result<Vec<u64>>;
    /// Whether `name` is packed at any step.
    fn has_members(&self, name: &str) -> Result<bool>;
    /// Whether `name` is packed at a step after `step`.
    fn has_member_after(&self, name: &str, step: u64) -> Result<bool>;
    /// Packed version `step` of `name` as an inline version, if the member index lists it.
    fn member_version(&self, name: &str, step: u64) -> Result<Option<VersionRecord>>;
    /// The pack parts this transaction decoded.
    fn part_memo(&self) -> &PartMemo;
    /// This view as a trait object.
    fn as_dyn(&self) -> &dyn View;
    /// The tier row of a block, if any.
    fn tier_row(&self, name: &str, step: u64, block: u64) -> Result<Option<TierRow>>;
    /// Every tier row of a version, as (block, row), in block order.
    fn tier_rows(&self, name: &str, step: u64) -> Result<Vec<(u32, TierRow)>>;
    /// The checkpoint record at `step`, if any.
    fn checkpoint(&self, step: u64) -> Result<Option<CheckpointRecord>>;
    /// The checkpoint record at `step`, decoded once for every transaction of the store that
    /// reads the same stored bytes (the store's part cache).
    fn shared_checkpoint(&self, step: u64) -> Result<Option<Arc<CheckpointRecord>>>;
    /// The bytes stored at a content address, their hash checked.
    fn segment_bytes(&self, address: u128) -> Result<Vec<u8>, FetchError>;

    /// Version `step` of `name`: its record, or a packed version as an inline one.
    fn version(&self, name: &str, step: u64) -> Result<Option<VersionRecord>> {
        match self.stored_version(name, step)? {
            Some(rec) => Ok(Some(rec)),
            None => self.member_version(name, step),
        }
    }

    /// The latest version of `name` at or before `step`.
    fn at_or_before(&self, name: &str, step: u64) -> Result<Option<(u64, VersionRecord)>> {
        let stored = self.stored_at_or_before(name, step)?;
        let packed = self.member_at_or_before(name, step)?;
        match (stored, packed) {
            (Some(found), None) => Ok(Some(found)),
            (Some((s, rec)), Some(p)) if p < s => Ok(Some((s, rec))),
            (_, Some(p)) => Ok(self.member_version(name, p)?.map(|rec| (p, rec))),
            (None, None) => Ok(None),
        }
    }

    /// Every version of `name`, in step order.
    fn versions_of(&self, name: &str) -> Result<Vec<(u64, VersionRecord)>> {
        let mut all = self.stored_versions_of(name)?;
        let packed = self.member_steps(name)?;
        if packed.is_empty() {
            return Ok(all);
        }
        for step in packed {
            if let Some(rec) = self.member_version(name, step)? {
                all.push((step, rec));
            }
        }
        all.sort_by_key(|(s, _)| *s);
        Ok(all)
    }

    /// Whether `name` has any version.
    fn has_versions(&self, name: &str) -> Result<bool> {
        Ok(self.stored_has_versions(name)? || self.has_members(name)?)
    }

    /// Whether `name` has a version after `step`.
    fn has_version_after(&self, name: &str, step: u64) -> Result<bool> {
        Ok(self.stored_has_version_after(name, step)? || self.has_member_after(name, step)?)
    }

    /// The latest version of `name` strictly before `step`.
    fn predecessor(&self, name: &str, step: u64) -> Result<Option<(u64, VersionRecord)>> {
        match step.checked_sub(1) {
            Some(before) => self.at_or_before(name, before),
            None => Ok(None),
        }
    }

    /// The tier rows of a version's `count` blocks, by block index (`None`: no row, a
    /// lossless block).
    fn tier_rows_by_block(
        &self,
        name: &str,
        step: u64,
        count: usize,
    ) -> Result<Vec<Option<TierRow>>> {
        let mut out: Vec<Option<TierRow>> = (0..count).map(|_| None).collect();
        for (block, row) in self.tier_rows(name, step)? {
            if let Some(slot) = out.get_mut(block as usize) {
                *slot = Some(row);
            }
        }
        Ok(out)
    }

    /// The tier row of a quantized or Tier 0 block, which must exist.
    fn required_tier_row(&self, name: &str, step: u64, block: u64) -> Result<TierRow> {
        self.tier_row(name, step, block)?.ok_or_else(|| {
            StoreError::Corrupt(Corruption::TierRowMissing {
                tensor: name.to_string(),
                step,
                block,
            })
        })
    }

    /// The bytes stored at `address` (a segment or a blob held for block `block` of
    /// `(name, step)`), their content hash checked; errors name the block.
    fn fetch_segment(&self, name: &str, step: u64, block: u64, address: u128) -> Result<Vec<u8>> {
        self.segment_bytes(address)
            .map_err(|e| fetch_error(e, name, step, block, address))
    }

    /// The exact bytes of a quantized block from its decoded `lossy` bytes and the exact
    /// residual stored at `address`.
    fn apply_exact_residual(
        &self,
        name: &str,
        step: u64,
        block: u64,
        address: u128,
        lossy: &[u8],
    ) -> Result<Vec<u8>> {
        let residual = self.fetch_segment(name, step, block, address)?;
        quantized::apply_exact_residual(lossy, &residual, lossy.len()).map_err(|source| {
            StoreError::Corrupt(Corruption::Residual {
                tensor: name.to_string(),
                step,
                block,
                source: Box::new(source),
            })
        })
    }
}

//! The write API of [`Store`]: `put`, `save_checkpoint`, `delete`, tags. Every write plans and
//! encodes in a read transaction (in parallel, under the writer lock, so the plan still holds),
//! then inserts everything in one write transaction.

use std::collections::HashSet;
use std::sync::Arc;

use strata_tiering::Precision;

use crate::engine::{
    check_name, delete_version, plan, put_row, store_residual, NewVersion, PlannedVersion,
    ResidualBytes, View, WriteTxn,
};
use crate::error::{DbContext, InvalidInput, NotFound, Result, StoreError};
use crate::options::PutOptions;
use crate::record::{CheckpointRecord, Rebuild, TierRow};
use crate::store::Store;
use crate::tensor::TensorRef;
use crate::tiers::policy::TierPolicy;
use crate::tiers::runtime::{spec_of, tiering_reconstruct};

/// Longest metadata text accepted with a checkpoint, in bytes.
const MAX_METADATA_BYTES: usize = 64 << 20;

impl Store {
    /// Writes version `step` of tensor `name`.
    ///
    /// # Errors
    /// [`crate::InvalidInput::StepExists`] if the version exists (see [`Store::put_with`]),
    /// [`crate::InvalidInput::DataLength`], [`crate::InvalidInput::Shape`], [`crate::InvalidInput::Name`].
    pub fn put(&self, name: &str, step: u64, tensor: &TensorRef<'_>) -> Result<()> {
        self.put_with(name, step, tensor, &PutOptions::default())
    }

    /// Writes version `step` of tensor `name` with options (e.g. overwrite).
    ///
    /// # Errors
    /// Those of [`Store::put`].
    pub fn put_with(
        &self,
        name: &str,
        step: u64,
        tensor: &TensorRef<'_>,
        opts: &PutOptions,
    ) -> Result<()> {
        let item = NewVersion {
            name: Arc::from(name),
            step,
            tensor: *tensor,
        };
        self.write_versions(std::slice::from_ref(&item), opts.overwrite, None)
    }

    /// Writes every tensor of a checkpoint at `step` in one transaction: after a crash
    /// either all of them are there or none. `metadata` is stored as given (JSON or any text).
    ///
    /// # Errors
    /// [`crate::InvalidInput::CheckpointExists`], [`crate::InvalidInput::DuplicateTensor`],
    /// [`crate::InvalidInput::StepExists`] if one of the tensors already has a version at `step`,
    /// and the input errors of [`Store::put`].
    pub fn save_checkpoint(
        &self,
        step: u64,
        tensors: &[(&str, TensorRef<'_>)],
        metadata: &str,
    ) -> Result<()> {
        if metadata.len() > MAX_METADATA_BYTES {
            return Err(StoreError::Invalid(InvalidInput::Options {
                reason: format!(
                    "checkpoint metadata is {} bytes, over the {MAX_METADATA_BYTES}-byte limit",
                    metadata.len()
                ),
            }));
        }
        let mut seen = HashSet::with_capacity(tensors.len());
        let mut items = Vec::with_capacity(tensors.len());
        for (name, t) in tensors {
            if !seen.insert(*name) {
                return Err(StoreError::Invalid(InvalidInput::DuplicateTensor {
                    step,
                    tensor: name.to_string(),
                }));
            }
            items.push(NewVersion {
                name: Arc::from(*name),
                step,
                tensor: *t,
            });
        }
        let record = CheckpointRecord {
            metadata: metadata.to_string(),
            tensors: tensors.iter().map(|(n, _)| n.to_string()).collect(),
        };
        self.write_versions(&items, false, Some((step, record)))
    }

    /// Deletes version `step` of `name`. Versions whose blocks are deltas against it are
    /// re-encoded in the same transaction; the tensor leaves the checkpoint at `step`, if any
    /// (an emptied checkpoint is removed with its tags).
    ///
    /// # Errors
    /// [`crate::NotFound::Tensor`], [`crate::NotFound::Version`], and block errors
    /// if a dependent cannot be decoded.
    pub fn delete(&self, name: &str, step: u64) -> Result<()> {
        check_name(name)?;
        let _writer = self.writer.lock();
        self.write(|wt| delete_version(wt, &self.cache, &self.opts, name, step, true))
    }

    /// Names the checkpoint at `step` `tag` (moving the tag if it exists).
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`], [`crate::InvalidInput::Name`] for an empty tag.
    pub fn tag(&self, tag: &str, step: u64) -> Result<()> {
        check_name(tag)?;
        let _writer = self.writer.lock();
        self.write(|wt| {
            if wt.checkpoint(step)?.is_none() {
                return Err(StoreError::NotFound(NotFound::Checkpoint { step }));
            }
            wt.tags.insert(tag.as_bytes(), step).ctx("writing a tag")?;
            Ok(())
        })
    }

    /// Removes a tag.
    ///
    /// # Errors
    /// [`crate::NotFound::Tag`].
    pub fn untag(&self, tag: &str) -> Result<()> {
        let _writer = self.writer.lock();
        self.write(|wt| {
            if wt
                .tags
                .remove(tag.as_bytes())
                .ctx("removing a tag")?
                .is_none()
            {
                return Err(StoreError::NotFound(NotFound::Tag {
                    tag: tag.to_string(),
                }));
            }
            Ok(())
        })
    }

    /// Writes `items` (and the checkpoint record, if any) atomically.
    pub(crate) fn write_versions(
        &self,
        items: &[NewVersion<'_>],
        overwrite: bool,
        checkpoint: Option<(u64, CheckpointRecord)>,
    ) -> Result<()> {
        let _writer = self.writer.lock();
        let planned = {
            let r = self.read()?;
            if let Some((step, _)) = &checkpoint {
                if r.checkpoint(*step)?.is_some() {
                    return Err(StoreError::Invalid(InvalidInput::CheckpointExists {
                        step: *step,
                    }));
                }
            }
            let rules = self.rules.read();
            plan(&r, &self.cache, &self.opts, items, overwrite, &rules)?
        };
        self.write(|wt| {
            for v in &planned {
                if v.replaces {
                    delete_version(wt, &self.cache, &self.opts, &v.name, v.step, false)?;
                }
                for (b, seg) in v.segments.iter().enumerate() {
                    let block = v.record.blocks[b];
                    wt.add_ref(&v.name, v.step, b as u64, block.address, seg.as_deref())?;
                }
                wt.put_version(&v.name, v.step, &v.record)?;
                if let Some((policy, residuals)) = &v.tiered {
                    add_tier_rows(wt, v, policy, residuals, self.opts.tiering.clock.now())?;
                }
            }
            if let Some((step, cp)) = &checkpoint {
                if wt.checkpoint(*step)?.is_some() {
                    return Err(StoreError::Invalid(InvalidInput::CheckpointExists {
                        step: *step,
                    }));
                }
                wt.put_checkpoint(*step, cp)?;
            }
            Ok(())
        })
    }
}

/// Writes the tier rows of a freshly written quantized version and registers its blocks
/// with the tier state once the transaction commits.
pub(crate) fn add_tier_rows(
    wt: &mut WriteTxn<'_>,
    v: &PlannedVersion,
    policy: &TierPolicy,
    residuals: &[Option<ResidualBytes>],
    now: u64,
) -> Result<()> {
    let count = v.record.blocks.len() as u64;
    let first = wt.take_block_ids(count)?;
    let tier = policy.policy.write_tier();
    let vid: (Arc<str>, u64) = (v.name.clone(), v.step);
    for b in 0..count {
        let residual = match residuals.get(b as usize).and_then(Option::as_ref) {
            Some(r) => Some(store_residual(wt, &v.name, v.step, b, r)?),
            None => None,
        };
        let row = TierRow {
            id: first + b,
            tier,
            policy: policy.policy,
            since: now,
            precision: Precision::fresh(tier),
            residual,
            rebuild: Rebuild::None,
            stats: None,
        };
        put_row(wt, &v.name, v.step, b as u32, &row)?;
        let values = v.record.block_len(b) as u32;
        let spec = spec_of(&row, values, tiering_reconstruct(&policy.reconstruct));
        wt.tier_changes
            .registered
            .push((vid.clone(), b as u32, spec));
    }
    Ok(())
}

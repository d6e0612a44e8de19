//! Checkpoints (sets of versions written atomically at one step) and tags naming them.

use std::collections::HashSet;
use std::sync::Arc;

use redb::ReadableTable;

use crate::error::{DbContext, Result, StoreError};
use crate::plan::{check_name, NewVersion};
use crate::reader::{block_bytes, decode_all, Fetcher, Job};
use crate::rebase::load_checkpoint_record;
use crate::record::{CheckpointRecord, Form};
use crate::store::Store;
use crate::tensor::{Checkpoint, CheckpointInfo, Tensor, TensorRef};
use crate::tiers::Fidelity;

/// Longest metadata text accepted with a checkpoint, in bytes.
const MAX_METADATA_BYTES: usize = 64 << 20;
/// Decoded bytes of one parallel batch of [`Store::load_checkpoint`].
const BATCH_BYTES: usize = 64 << 20;

impl Store {
    /// Writes every tensor of a checkpoint at `step` in one transaction: after a crash
    /// either all of them are there or none. `metadata` is stored as given (JSON or any text).
    ///
    /// # Errors
    /// [`StoreError::CheckpointExists`], [`StoreError::DuplicateTensor`],
    /// [`StoreError::StepExists`] if one of the tensors already has a version at `step`,
    /// and the input errors of [`Store::put`].
    pub fn save_checkpoint(
        &self,
        step: u64,
        tensors: &[(&str, TensorRef<'_>)],
        metadata: &str,
    ) -> Result<()> {
        if metadata.len() > MAX_METADATA_BYTES {
            return Err(StoreError::InvalidOptions {
                reason: format!(
                    "checkpoint metadata is {} bytes, over the {MAX_METADATA_BYTES}-byte limit",
                    metadata.len()
                ),
            });
        }
        let mut seen = HashSet::with_capacity(tensors.len());
        let mut items = Vec::with_capacity(tensors.len());
        for (name, t) in tensors {
            if !seen.insert(*name) {
                return Err(StoreError::DuplicateTensor {
                    step,
                    tensor: name.to_string(),
                });
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

    /// Reads back every tensor of the checkpoint at `step`, all from one snapshot.
    ///
    /// # Errors
    /// [`StoreError::CheckpointNotFound`], and the errors of [`Store::get`].
    pub fn load_checkpoint(&self, step: u64) -> Result<Checkpoint> {
        let r = self.read()?;
        let cp = load_checkpoint_record(&r.checkpoints, step)?
            .ok_or(StoreError::CheckpointNotFound { step })?;
        let mut fetcher = Fetcher::new(&r.t, &self.cache);
        let mut tensors: Vec<(String, Tensor)> = Vec::with_capacity(cp.tensors.len());
        // Fetch the blocks of many tensors, then decode them together in parallel; a batch
        // holds at most BATCH_BYTES of decoded data.
        let mut batch: Vec<(usize, Job)> = Vec::new();
        let mut batch_bytes = 0usize;
        for name in &cp.tensors {
            let rec = self.version_record(&r, name, step)?;
            if rec.blocks.iter().any(|b| b.form != Form::Lossless) {
                // Quantized or Tier 0 blocks: read on their own (fidelity, rebuilds).
                let t = self.read_tensor(&r, name, step, &rec)?;
                tensors.push((name.clone(), t));
                continue;
            }
            let index = tensors.len();
            tensors.push((
                name.clone(),
                Tensor {
                    dtype: rec.dtype,
                    shape: rec.shape.clone(),
                    data: Vec::with_capacity(rec.raw_bytes().min(BATCH_BYTES as u64) as usize),
                    fidelity: Fidelity::Exact,
                },
            ));
            let name_arc: Arc<str> = Arc::from(name.as_str());
            for b in 0..rec.blocks.len() as u64 {
                batch.push((index, fetcher.fetch(&name_arc, step, &rec, b)?));
                batch_bytes += block_bytes(&rec, b);
                if batch_bytes >= BATCH_BYTES {
                    self.flush(&mut batch, &mut tensors)?;
                    batch_bytes = 0;
                }
            }
        }
        self.flush(&mut batch, &mut tensors)?;
        Ok(Checkpoint {
            step,
            tensors,
            metadata: cp.metadata,
        })
    }

    /// Decodes a batch of blocks and appends each to its tensor (jobs are in block order).
    fn flush(&self, batch: &mut Vec<(usize, Job)>, tensors: &mut [(String, Tensor)]) -> Result<()> {
        let (owners, jobs): (Vec<usize>, Vec<Job>) = batch.drain(..).unzip();
        for (i, block) in owners.into_iter().zip(decode_all(jobs, &self.cache)) {
            tensors[i].1.data.extend_from_slice(&block?);
        }
        Ok(())
    }

    /// Steps of every checkpoint, ascending.
    ///
    /// # Errors
    /// Database errors only.
    pub fn checkpoints(&self) -> Result<Vec<u64>> {
        let r = self.read()?;
        let mut out = Vec::new();
        for e in r.checkpoints.iter().ctx("listing checkpoints")? {
            out.push(e.ctx("listing checkpoints")?.0.value());
        }
        Ok(out)
    }

    /// The metadata text of the checkpoint at `step`.
    ///
    /// # Errors
    /// [`StoreError::CheckpointNotFound`].
    pub fn checkpoint_metadata(&self, step: u64) -> Result<String> {
        let r = self.read()?;
        load_checkpoint_record(&r.checkpoints, step)?
            .map(|cp| cp.metadata)
            .ok_or(StoreError::CheckpointNotFound { step })
    }

    /// The tensor names and metadata of the checkpoint at `step`, without reading its data.
    ///
    /// # Errors
    /// [`StoreError::CheckpointNotFound`].
    pub fn checkpoint_info(&self, step: u64) -> Result<CheckpointInfo> {
        let r = self.read()?;
        load_checkpoint_record(&r.checkpoints, step)?
            .map(|cp| CheckpointInfo {
                step,
                tensors: cp.tensors,
                metadata: cp.metadata,
            })
            .ok_or(StoreError::CheckpointNotFound { step })
    }

    /// Names the checkpoint at `step` `tag` (moving the tag if it exists).
    ///
    /// # Errors
    /// [`StoreError::CheckpointNotFound`], [`StoreError::InvalidName`] for an empty tag.
    pub fn tag(&self, tag: &str, step: u64) -> Result<()> {
        check_name(tag)?;
        let _writer = self.writer.lock();
        self.write(|wt| {
            if wt
                .checkpoints
                .get(step)
                .ctx("reading checkpoints")?
                .is_none()
            {
                return Err(StoreError::CheckpointNotFound { step });
            }
            wt.tags.insert(tag.as_bytes(), step).ctx("writing a tag")?;
            Ok(())
        })
    }

    /// Every tag and the checkpoint step it names, sorted by tag.
    ///
    /// # Errors
    /// Database errors; a tag name that is not UTF-8 is a [`StoreError::Record`].
    pub fn tags(&self) -> Result<Vec<(String, u64)>> {
        let r = self.read()?;
        let mut out = Vec::new();
        for e in r.tags.iter().ctx("listing tags")? {
            let (k, v) = e.ctx("listing tags")?;
            let name = std::str::from_utf8(k.value()).map_err(|_| StoreError::Record {
                what: "a tag name".into(),
                source: crate::record::RecordError::Utf8 { field: "tag name" },
            })?;
            out.push((name.to_string(), v.value()));
        }
        Ok(out)
    }

    /// Removes a tag.
    ///
    /// # Errors
    /// [`StoreError::TagNotFound`].
    pub fn untag(&self, tag: &str) -> Result<()> {
        let _writer = self.writer.lock();
        self.write(|wt| {
            if wt
                .tags
                .remove(tag.as_bytes())
                .ctx("removing a tag")?
                .is_none()
            {
                return Err(StoreError::TagNotFound {
                    tag: tag.to_string(),
                });
            }
            Ok(())
        })
    }
}

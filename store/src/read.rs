//! The read API of [`Store`]: tensors (`get`, `get_at`, partial reads, `get_exact`, version
//! lists) and checkpoints (`load_checkpoint`, lists, tags). Every call reads one committed
//! snapshot.

use std::ops::Range;
use std::sync::Arc;

use strata_tiering::Tier;

use crate::engine::{
    checkpoint_steps, is_part_name, lossy, packed_at, part_name, read_blocks, tag_list,
    tensor_names, BlockCache, Fetcher, ReadTxn, Span, View,
};
use crate::error::{InvalidInput, NotFound, Result, StoreError, TierFailure};
use crate::record::{BlockRecord, Form, Packed, ResidualRef, VersionRecord, CHECKSUM_LEN};
use crate::store::{contain, Store};
use crate::tensor::{BlockEncoding, CheckpointInfo, Fidelity, Tensor, TensorSlice, VersionInfo};
use crate::DType;

/// Bytes reserved up front for a read; larger tensors grow as their blocks decode, so a
/// damaged record cannot make the store reserve memory its data does not fill.
pub(crate) const RESERVE_LIMIT: u64 = 64 << 20;

impl Store {
    /// Reads version `step` of tensor `name`, bit-exact.
    ///
    /// # Errors
    /// [`crate::NotFound::Tensor`], [`crate::NotFound::Version`], and for a damaged
    /// store [`crate::Corruption::Segment`] and the other block errors, naming the block.
    pub fn get(&self, name: &str, step: u64) -> Result<Tensor> {
        contain(&self.path, "reading a tensor", || {
            let r = self.read()?;
            let rec = self.version_record(&r, name, step)?;
            self.read_tensor(&r, name, step, &rec)
        })
    }

    /// Reads version `step` of `name` bit-exact: lossless blocks as stored, quantized blocks
    /// through their exact residual ([`crate::Residual::Exact`]).
    ///
    /// # Errors
    /// [`crate::TierFailure::NotExact`] naming the first block that holds only lossy (or no) data,
    /// and the errors of [`Store::get`].
    pub fn get_exact(&self, name: &str, step: u64) -> Result<Tensor> {
        contain(&self.path, "reading a tensor", || {
            let r = self.read()?;
            let rec = self.version_record(&r, name, step)?;
            let mut t = self.read_tensor(&r, name, step, &rec)?;
            if t.fidelity.is_exact() {
                return Ok(t);
            }
            if rec.aged.is_some() {
                // An aged version keeps no exact data (ADR 0020).
                let block = rec.blocks.iter().position(|b| b.form == Form::Aged);
                return Err(StoreError::Tier(TierFailure::NotExact {
                    tensor: name.to_string(),
                    step,
                    block: block.unwrap_or(0) as u64,
                    fidelity: t.fidelity,
                }));
            }
            let size = rec.dtype.size() as u64;
            for (b, block) in rec.blocks.iter().enumerate() {
                let b = b as u64;
                if block.is_exact() {
                    continue;
                }
                let row = r.required_tier_row(name, step, b)?;
                let Some(ResidualRef::Exact { address, .. }) = row.residual else {
                    return Err(StoreError::Tier(TierFailure::NotExact {
                        tensor: name.to_string(),
                        step,
                        block: b,
                        fidelity: lossy::fidelity_of(row.precision, rec.dtype),
                    }));
                };
                let lo = (b * rec.block_elems * size) as usize;
                let hi = lo + (rec.block_len(b) * size) as usize;
                let exact = r.apply_exact_residual(name, step, b, address, &t.data[lo..hi])?;
                t.data[lo..hi].copy_from_slice(&exact);
            }
            t.fidelity = Fidelity::Exact;
            Ok(t)
        })
    }

    /// Reads the latest version of `name` at or before `step`; returns its step too.
    ///
    /// # Errors
    /// [`crate::NotFound::AtOrBefore`] (or [`crate::NotFound::Tensor`]), and the
    /// block errors of [`Store::get`].
    pub fn get_at(&self, name: &str, step: u64) -> Result<(u64, Tensor)> {
        contain(&self.path, "reading a tensor", || {
            let r = self.read()?;
            let Some((s, rec)) = r.at_or_before(name, step)? else {
                return Err(self.missing(
                    &r,
                    name,
                    StoreError::NotFound(NotFound::AtOrBefore {
                        tensor: name.to_string(),
                        step,
                    }),
                )?);
            };
            Ok((s, self.read_tensor(&r, name, s, &rec)?))
        })
    }

    /// The step of the latest version of `name` at or before `step`, without reading it.
    ///
    /// # Errors
    /// Those of [`Store::get_at`] but block errors.
    pub fn step_at_or_before(&self, name: &str, step: u64) -> Result<u64> {
        contain(&self.path, "looking up a version", || {
            let r = self.read()?;
            match r.at_or_before(name, step)? {
                Some((s, _)) => Ok(s),
                None => Err(self.missing(
                    &r,
                    name,
                    StoreError::NotFound(NotFound::AtOrBefore {
                        tensor: name.to_string(),
                        step,
                    }),
                )?),
            }
        })
    }

    /// Reads the latest version of `name`; returns its step too.
    ///
    /// # Errors
    /// [`crate::NotFound::Tensor`], and the block errors of [`Store::get`].
    pub fn latest(&self, name: &str) -> Result<(u64, Tensor)> {
        self.get_at(name, u64::MAX).map_err(|e| match e {
            StoreError::NotFound(NotFound::AtOrBefore { tensor, .. }) => {
                StoreError::NotFound(NotFound::Tensor { tensor })
            }
            e => e,
        })
    }

    /// Reads elements `elems` (flat, row-major) of version `step`, decoding only the blocks
    /// that overlap them, and the last of those only up to `elems.end` (ADR 0022).
    ///
    /// # Errors
    /// [`crate::InvalidInput::Range`], and those of [`Store::get`].
    pub fn get_range(&self, name: &str, step: u64, elems: Range<u64>) -> Result<TensorSlice> {
        contain(&self.path, "reading part of a tensor", || {
            let r = self.read()?;
            let rec = self.version_record(&r, name, step)?;
            if elems.start > elems.end || elems.end > rec.elements {
                return Err(StoreError::Invalid(InvalidInput::Range {
                    tensor: name.to_string(),
                    step,
                    start: elems.start,
                    end: elems.end,
                    elements: rec.elements,
                }));
            }
            let (data, fidelity) = self.read_elems(&r, name, step, &rec, elems.clone(), 0)?;
            if elems.start < elems.end {
                let first = elems.start / rec.block_elems;
                let last = (elems.end - 1) / rec.block_elems;
                self.record_read(name, step, first..last + 1);
            }
            Ok(TensorSlice {
                dtype: rec.dtype,
                shape: rec.shape,
                elems,
                data,
                fidelity,
            })
        })
    }

    /// Version `step` of `name` without its data: dtype, shape, sizes, block encodings.
    ///
    /// # Errors
    /// [`crate::NotFound::Tensor`], [`crate::NotFound::Version`].
    pub fn version_info(&self, name: &str, step: u64) -> Result<VersionInfo> {
        contain(&self.path, "reading a version record", || {
            let r = self.read()?;
            let rec = self.version_record(&r, name, step)?;
            info_with_tiers(&r, name, step, &rec)
        })
    }

    /// Every version of `name`, in step order.
    ///
    /// # Errors
    /// [`crate::NotFound::Tensor`].
    pub fn versions(&self, name: &str) -> Result<Vec<VersionInfo>> {
        contain(&self.path, "listing versions", || {
            let r = self.read()?;
            let all = r.versions_of(name)?;
            if all.is_empty() {
                return Err(StoreError::NotFound(NotFound::Tensor {
                    tensor: name.to_string(),
                }));
            }
            all.into_iter()
                .map(|(step, rec)| info_with_tiers(&r, name, step, &rec))
                .collect::<Result<Vec<_>>>()
        })
    }

    /// Names of every tensor with at least one version, sorted.
    ///
    /// # Errors
    /// Database errors only.
    pub fn tensors(&self) -> Result<Vec<String>> {
        contain(&self.path, "listing tensors", || {
            let r = self.read()?;
            let mut names = tensor_names(&r.versions, "versions")?;
            names.retain(|n| !is_part_name(n));
            if let Some(members) = &r.members {
                names.extend(tensor_names(members, "members")?);
            }
            names.sort();
            names.dedup();
            Ok(names)
        })
    }

    /// Steps of every checkpoint, ascending.
    ///
    /// # Errors
    /// Database errors only.
    pub fn checkpoints(&self) -> Result<Vec<u64>> {
        contain(&self.path, "listing checkpoints", || {
            checkpoint_steps(&self.read()?.checkpoints)
        })
    }

    /// The metadata text of the checkpoint at `step`.
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`].
    pub fn checkpoint_metadata(&self, step: u64) -> Result<String> {
        contain(&self.path, "reading checkpoint metadata", || {
            self.read()?
                .checkpoint(step)?
                .map(|cp| cp.metadata)
                .ok_or(StoreError::NotFound(NotFound::Checkpoint { step }))
        })
    }

    /// The tensor names and metadata of the checkpoint at `step`, without reading its data.
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`].
    pub fn checkpoint_info(&self, step: u64) -> Result<CheckpointInfo> {
        contain(&self.path, "reading a checkpoint record", || {
            self.read()?
                .checkpoint(step)?
                .map(|cp| CheckpointInfo {
                    step,
                    tensors: cp.tensors,
                    metadata: cp.metadata,
                })
                .ok_or(StoreError::NotFound(NotFound::Checkpoint { step }))
        })
    }

    /// Every tag and the checkpoint step it names, sorted by tag.
    ///
    /// # Errors
    /// Database errors; a tag name that is not UTF-8 is a [`crate::Corruption::Record`].
    pub fn tags(&self) -> Result<Vec<(String, u64)>> {
        contain(&self.path, "listing tags", || tag_list(&self.read()?.tags))
    }

    /// The record of a version, or the right not-found error.
    pub(crate) fn version_record(
        &self,
        r: &ReadTxn,
        name: &str,
        step: u64,
    ) -> Result<VersionRecord> {
        match r.version(name, step)? {
            Some(rec) => Ok(rec),
            None => Err(self.missing(
                r,
                name,
                StoreError::NotFound(NotFound::Version {
                    tensor: name.to_string(),
                    step,
                }),
            )?),
        }
    }

    /// `TensorNotFound` if `name` has no version at all, else `otherwise`.
    fn missing(&self, r: &ReadTxn, name: &str, otherwise: StoreError) -> Result<StoreError> {
        Ok(if r.has_versions(name)? {
            otherwise
        } else {
            StoreError::NotFound(NotFound::Tensor {
                tensor: name.to_string(),
            })
        })
    }

    /// Decodes every block of a version.
    pub(crate) fn read_tensor(
        &self,
        r: &ReadTxn,
        name: &str,
        step: u64,
        rec: &VersionRecord,
    ) -> Result<Tensor> {
        let (data, fidelity) = self.read_elems(r, name, step, rec, 0..rec.elements, 0)?;
        self.record_read(name, step, 0..rec.blocks.len() as u64);
        Ok(Tensor {
            dtype: rec.dtype,
            shape: rec.shape.clone(),
            data,
            fidelity,
        })
    }

    /// Decodes elements `elems` of a version (in range), rebuilding Tier 0 blocks; `depth`
    /// counts the Tier 0 rebuilds this read is part of.
    pub(crate) fn read_elems(
        &self,
        r: &ReadTxn,
        name: &str,
        step: u64,
        rec: &VersionRecord,
        elems: Range<u64>,
        depth: u8,
    ) -> Result<(Vec<u8>, Fidelity)> {
        self.read_elems_through(r, &self.cache, Arc::from(name), step, rec, elems, depth)
    }

    /// [`Store::read_elems`] through `cache` (a history's private cache, or the store's).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_elems_through(
        &self,
        r: &ReadTxn,
        cache: &BlockCache,
        name: Arc<str>,
        step: u64,
        rec: &VersionRecord,
        elems: Range<u64>,
        depth: u8,
    ) -> Result<(Vec<u8>, Fidelity)> {
        let size = rec.dtype.size() as u64;
        let mut data =
            Vec::with_capacity(((elems.end - elems.start) * size).min(RESERVE_LIMIT) as usize);
        let mut fidelity = Fidelity::Exact;
        if elems.start >= elems.end {
            return Ok((data, fidelity));
        }
        let first = elems.start / rec.block_elems;
        let last = (elems.end - 1) / rec.block_elems;
        let span = Span {
            name,
            step,
            rec,
            blocks: first..last + 1,
            upto: Some(elems.end),
        };
        let mut fetcher = Fetcher::new(r, cache);
        read_blocks(
            &mut fetcher,
            cache,
            std::slice::from_ref(&span),
            |_, job| self.rebuild_block(r, job, rec, depth),
            |_, b, bytes, f| {
                let block_start = b * rec.block_elems;
                let lo = elems.start.max(block_start) - block_start;
                let hi = elems.end.min(block_start + rec.block_len(b)) - block_start;
                data.extend_from_slice(&bytes[(lo * size) as usize..(hi * size) as usize]);
                fidelity = fidelity.worst(f);
                Ok(())
            },
        )?;
        Ok((data, fidelity))
    }

    /// Records a read of blocks of a version with the tier policy (tiered versions only).
    pub(crate) fn record_read(&self, name: &str, step: u64, blocks: Range<u64>) {
        let clock = &self.opts.tiering.clock;
        self.tiers
            .lock()
            .record_read(name, step, blocks, || clock.now());
    }
}

/// Bytes a version stores: its record and the segments it adds (none for a block that
/// refers to an earlier one).
pub(crate) fn stored_bytes(rec: &VersionRecord) -> u64 {
    let record = (rec.encoded_len() + CHECKSUM_LEN) as u64;
    record
        + rec
            .blocks
            .iter()
            .map(BlockRecord::stored_bytes)
            .sum::<u64>()
}

/// The public summary of a version record.
pub(crate) fn version_info(step: u64, rec: &VersionRecord, tiers: &[Tier]) -> VersionInfo {
    let encodings: Vec<BlockEncoding> = rec
        .blocks
        .iter()
        .zip(tiers)
        .map(|(b, &tier)| BlockEncoding {
            tier,
            base: b.base,
            reference: b.reference,
            depth: b.depth,
            stored_bytes: b.stored_bytes(),
            inline: b.form == Form::Inline,
        })
        .collect();
    VersionInfo {
        step,
        dtype: rec.dtype,
        shape: rec.shape.clone(),
        raw_bytes: rec.raw_bytes(),
        stored_bytes: stored_bytes(rec),
        encodings,
        aged: rec.aged.map(f64::from),
    }
}

/// What [`Store::version_info`] says of version `step` of `name`: its record and the tier of
/// each block (exact where no tier row is held).
fn info_with_tiers(r: &ReadTxn, name: &str, step: u64, rec: &VersionRecord) -> Result<VersionInfo> {
    let rows = r.tier_rows_by_block(name, step, rec.blocks.len())?;
    let tiers: Vec<Tier> = rows
        .iter()
        .map(|row| row.as_ref().map_or(Tier::Exact, |row| row.tier))
        .collect();
    let mut info = version_info(step, rec, &tiers);
    if rec.inline.is_some() {
        if let Some(p) = packed_at(r, name, step)? {
            info.stored_bytes = stored_share(r, step, &p)?;
        }
    }
    Ok(info)
}

/// The bytes a packed tensor (ADR 0041) stores: its share of its pack part's stored bytes,
/// by raw bytes, rounded down (so that a checkpoint's shares never sum past its parts).
pub(crate) fn stored_share(view: &dyn View, step: u64, p: &Packed) -> Result<u64> {
    let part = part_sizes(view, step, p.dtype, p.part)?;
    Ok(share_of(part, p.len()))
}

/// The stored and raw bytes of pack part `part` of `dtype` at `step` (zeros if missing).
pub(crate) fn part_sizes(
    view: &dyn View,
    step: u64,
    dtype: DType,
    part: u32,
) -> Result<(u64, u64)> {
    Ok(view
        .stored_version(&part_name(dtype, part), step)?
        .map_or((0, 0), |rec| (stored_bytes(&rec), rec.raw_bytes())))
}

/// [`stored_share`] of a packed tensor of `len` raw bytes, given its part's [`part_sizes`].
pub(crate) fn share_of((stored, raw): (u64, u64), len: u64) -> u64 {
    (u128::from(stored) * u128::from(len) / u128::from(raw.max(1))) as u64
}

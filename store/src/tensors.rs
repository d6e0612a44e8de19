//! The tensor API of [`Store`]: put, get, partial reads, history, delete.

use std::ops::Range;
use std::sync::Arc;

use crate::error::{DbContext, Result, StoreError};
use crate::options::PutOptions;
use crate::plan::{at_or_before, check_name, NewVersion};
use crate::reader::{read_blocks, Fetcher};
use crate::rebase::{delete_version, versions_of};
use crate::record::{decode_version_key, VersionRecord};
use crate::store::{ReadTables, Store};
use crate::tensor::{BlockEncoding, Tensor, TensorRef, TensorSlice, VersionInfo};
use crate::tiers::Fidelity;
use strata_tiering::Tier;

/// Bytes reserved up front for a read; larger tensors grow as their blocks decode, so a
/// damaged record cannot make the store reserve memory its data does not fill.
const RESERVE_LIMIT: u64 = 64 << 20;

impl Store {
    /// Writes version `step` of tensor `name`.
    ///
    /// # Errors
    /// [`StoreError::StepExists`] if the version exists (see [`Store::put_with`]),
    /// [`StoreError::DataLength`], [`StoreError::BadShape`], [`StoreError::InvalidName`].
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

    /// Reads version `step` of tensor `name`, bit-exact.
    ///
    /// # Errors
    /// [`StoreError::TensorNotFound`], [`StoreError::VersionNotFound`], and for a damaged
    /// store [`StoreError::Segment`] and the other block errors, naming the block.
    pub fn get(&self, name: &str, step: u64) -> Result<Tensor> {
        let r = self.read()?;
        let rec = self.version_record(&r, name, step)?;
        self.read_tensor(&r, name, step, &rec)
    }

    /// Reads version `step` of `name` bit-exact: lossless blocks as stored, quantized blocks
    /// through their exact residual ([`crate::Residual::Exact`]).
    ///
    /// # Errors
    /// [`StoreError::NotExact`] naming the first block that holds only lossy (or no) data,
    /// and the errors of [`Store::get`].
    pub fn get_exact(&self, name: &str, step: u64) -> Result<Tensor> {
        let r = self.read()?;
        let rec = self.version_record(&r, name, step)?;
        let mut t = self.read_tensor(&r, name, step, &rec)?;
        if t.fidelity.is_exact() {
            return Ok(t);
        }
        let size = rec.dtype.size() as u64;
        for (b, block) in rec.blocks.iter().enumerate() {
            let b = b as u64;
            if block.form == crate::record::Form::Lossless {
                continue;
            }
            let row = crate::tiers::rows::load_row(&r.t.tiers, name, step, b)?.ok_or(
                StoreError::TierRowMissing {
                    tensor: name.to_string(),
                    step,
                    block: b,
                },
            )?;
            let Some(crate::record::ResidualRef::Exact { address, .. }) = row.residual else {
                return Err(StoreError::NotExact {
                    tensor: name.to_string(),
                    step,
                    block: b,
                    fidelity: crate::tiers::lossy::fidelity_of(row.precision, rec.dtype),
                });
            };
            let lo = (b * rec.block_elems * size) as usize;
            let hi = lo + (rec.block_len(b) * size) as usize;
            let exact =
                r.t.apply_exact_residual(name, step, b, address, &t.data[lo..hi])?;
            t.data[lo..hi].copy_from_slice(&exact);
        }
        t.fidelity = Fidelity::Exact;
        Ok(t)
    }

    /// Reads the latest version of `name` at or before `step`; returns its step too.
    ///
    /// # Errors
    /// [`StoreError::NoVersionAtOrBefore`] (or [`StoreError::TensorNotFound`]), and the
    /// block errors of [`Store::get`].
    pub fn get_at(&self, name: &str, step: u64) -> Result<(u64, Tensor)> {
        let r = self.read()?;
        let Some((s, rec)) = at_or_before(&r.t.versions, name, step)? else {
            return Err(self.missing(
                &r,
                name,
                StoreError::NoVersionAtOrBefore {
                    tensor: name.to_string(),
                    step,
                },
            )?);
        };
        Ok((s, self.read_tensor(&r, name, s, &rec)?))
    }

    /// Reads the latest version of `name`; returns its step too.
    ///
    /// # Errors
    /// [`StoreError::TensorNotFound`], and the block errors of [`Store::get`].
    pub fn latest(&self, name: &str) -> Result<(u64, Tensor)> {
        self.get_at(name, u64::MAX).map_err(|e| match e {
            StoreError::NoVersionAtOrBefore { tensor, .. } => StoreError::TensorNotFound { tensor },
            e => e,
        })
    }

    /// Reads elements `elems` (flat, row-major) of version `step`, decoding only the blocks
    /// that overlap them.
    ///
    /// # Errors
    /// [`StoreError::RangeOutOfBounds`], and those of [`Store::get`].
    pub fn get_range(&self, name: &str, step: u64, elems: Range<u64>) -> Result<TensorSlice> {
        let r = self.read()?;
        let rec = self.version_record(&r, name, step)?;
        if elems.start > elems.end || elems.end > rec.elements {
            return Err(StoreError::RangeOutOfBounds {
                tensor: name.to_string(),
                step,
                start: elems.start,
                end: elems.end,
                elements: rec.elements,
            });
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
    }

    /// Every version of `name`, in step order.
    ///
    /// # Errors
    /// [`StoreError::TensorNotFound`].
    pub fn versions(&self, name: &str) -> Result<Vec<VersionInfo>> {
        let r = self.read()?;
        let all = versions_of(&r.t.versions, name)?;
        if all.is_empty() {
            return Err(StoreError::TensorNotFound {
                tensor: name.to_string(),
            });
        }
        all.into_iter()
            .map(|(step, rec)| {
                let rows = crate::tiers::rows::load_rows_by_block(
                    &r.t.tiers,
                    name,
                    step,
                    rec.blocks.len(),
                )?;
                let tiers: Vec<Tier> = rows
                    .iter()
                    .map(|row| row.as_ref().map_or(Tier::Exact, |row| row.tier))
                    .collect();
                Ok(version_info(step, &rec, &tiers))
            })
            .collect::<Result<Vec<_>>>()
    }

    /// Names of every tensor with at least one version, sorted.
    ///
    /// # Errors
    /// Database errors only.
    pub fn tensors(&self) -> Result<Vec<String>> {
        let r = self.read()?;
        let mut names = Vec::new();
        let mut from: Vec<u8> = Vec::new();
        loop {
            let mut iter =
                r.t.versions
                    .range::<&[u8]>((
                        std::ops::Bound::Excluded(from.as_slice()),
                        std::ops::Bound::Unbounded,
                    ))
                    .ctx("listing tensors")?;
            let Some(entry) = iter.next() else { break };
            let (k, _) = entry.ctx("listing tensors")?;
            let Some((name, _)) = decode_version_key(k.value()) else {
                return Err(StoreError::Record {
                    what: "a version key".into(),
                    source: crate::record::RecordError::BadValue {
                        field: "version key",
                        value: k.value().len() as u64,
                    },
                });
            };
            names.push(name.to_string());
            // Skip the rest of this tensor's versions.
            from = crate::record::version_key(name, u64::MAX);
        }
        names.sort();
        Ok(names)
    }

    /// Deletes version `step` of `name`. Versions whose blocks are deltas against it are
    /// re-encoded in the same transaction; the tensor leaves the checkpoint at `step`, if any
    /// (an emptied checkpoint is removed with its tags).
    ///
    /// # Errors
    /// [`StoreError::TensorNotFound`], [`StoreError::VersionNotFound`], and block errors
    /// if a dependent cannot be decoded.
    pub fn delete(&self, name: &str, step: u64) -> Result<()> {
        check_name(name)?;
        let _writer = self.writer.lock();
        self.write(|wt| delete_version(wt, &self.cache, &self.opts, name, step, true))
    }

    /// The record of a version, or the right not-found error.
    pub(crate) fn version_record(
        &self,
        r: &ReadTables,
        name: &str,
        step: u64,
    ) -> Result<VersionRecord> {
        match crate::reader::load_version(&r.t.versions, name, step)? {
            Some(rec) => Ok(rec),
            None => Err(self.missing(
                r,
                name,
                StoreError::VersionNotFound {
                    tensor: name.to_string(),
                    step,
                },
            )?),
        }
    }

    /// `TensorNotFound` if `name` has no version at all, else `otherwise`.
    fn missing(&self, r: &ReadTables, name: &str, otherwise: StoreError) -> Result<StoreError> {
        let range = crate::record::version_key_range(name, 0..=u64::MAX);
        let any =
            r.t.versions
                .range(range.start().as_slice()..=range.end().as_slice())
                .ctx("looking up a tensor")?
                .next()
                .is_some();
        Ok(if any {
            otherwise
        } else {
            StoreError::TensorNotFound {
                tensor: name.to_string(),
            }
        })
    }

    /// Decodes every block of a version.
    pub(crate) fn read_tensor(
        &self,
        r: &ReadTables,
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
        r: &ReadTables,
        name: &str,
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
        let name_arc: Arc<str> = Arc::from(name);
        let mut fetcher = Fetcher::new(&r.t, &self.cache);
        read_blocks(
            &mut fetcher,
            &self.cache,
            &name_arc,
            step,
            rec,
            first..last + 1,
            |job| self.rebuild_block(r, job, rec, depth),
            |b, bytes, f| {
                let block_start = b * rec.block_elems;
                let lo = elems.start.max(block_start) - block_start;
                let hi = elems.end.min(block_start + rec.block_len(b)) - block_start;
                data.extend_from_slice(&bytes[(lo * size) as usize..(hi * size) as usize]);
                fidelity = fidelity.worst(f);
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
            stored_bytes: if b.reference {
                0
            } else {
                u64::from(b.segment_len)
            },
        })
        .collect();
    let record_bytes = (rec.encode().len() + crate::record::CHECKSUM_LEN) as u64;
    VersionInfo {
        step,
        dtype: rec.dtype,
        shape: rec.shape.clone(),
        raw_bytes: rec.raw_bytes(),
        stored_bytes: record_bytes + encodings.iter().map(|e| e.stored_bytes).sum::<u64>(),
        encodings,
    }
}

//! [`Store::maintain`]: turn the tier policy's plan into re-encoded blocks, in one
//! transaction.
//!
//! 1. Under the writer lock, the policy plans moves for `now` within the budget
//!    ([`crate::TierOptions::budget`]); lossless versions whose policy became tiered are
//!    queued for conversion.
//! 2. In a read snapshot, each moved block is decoded from the most precise data the store
//!    holds (lossless data, or quantized data plus its exact residual; else the quantized
//!    data with its sparse residual applied) and encoded at its new tier, in parallel.
//!    A block going to Tier 0 freezes its reconstruct policy (sources resolved to steps,
//!    the sparse delta against its base computed now).
//! 3. One write transaction re-bases the dependents of converted versions, swaps segments,
//!    writes records and tier rows, and saves read statistics. Only after it commits does
//!    the in-memory state take the moves.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rayon::prelude::*;
use strata_codec::domain::Domain;
use strata_tiering::{AccessStats, MaintainReport, Move, Plan, Precision, Tick, Tier};

use crate::engine::{
    address_of, lossy, put_row, rebase_dependents, remove_rows, row_blobs, store_residual, Fetcher,
    ReadTxn, ResidualBytes, VersionId, View, WriteTxn,
};
use crate::error::{Result, StoreError};
use crate::record::{BlockRecord, Form, Rebuild, ResidualRef, SourceAt, TierRow, VersionRecord};
use crate::store::{contain, Store};
use crate::tiers::policy::{self, Reconstruct, Residual, SourceStep, TierPolicy};
use crate::tiers::runtime::{spec_of, tier_error, tiering_reconstruct};

/// A block's new form, ready to write.
struct Prepared {
    vid: VersionId,
    block: u32,
    mv: Move,
    segment: Option<Vec<u8>>,
    residual: Option<ResidualBytes>,
    rebuild: Rebuild,
    /// Blob to store for the rebuild (sparse delta or permutation).
    rebuild_blob: Option<Vec<u8>>,
    precision: Precision,
}

/// Share of a block a re-made sparse residual keeps when the policy no longer says.
const DEFAULT_TOPK: f32 = 0.01;

/// The data a moved block is re-encoded from.
struct Source {
    precision: Precision,
    exact_source: bool,
    values: Vec<f32>,
    exact: Option<Vec<u8>>,
    fraction: f32,
}

/// A lossless version converted to its policy's start tier.
struct Converted {
    vid: VersionId,
    policy: TierPolicy,
    blocks: Vec<(Vec<u8>, Option<ResidualBytes>)>,
}

impl Store {
    /// Runs one maintenance pass at time `now` (milliseconds, on the clock reads are
    /// recorded with, [`crate::TierOptions::clock`]): applies the tier policy's moves
    /// within the budget in one transaction, converts lossless versions whose policy became
    /// tiered, and saves read statistics. Deterministic: the same state and `now` give the
    /// same moves.
    ///
    /// # Errors
    /// Block errors if data to re-encode cannot be read; nothing changes then.
    pub fn maintain(&self, now: Tick) -> Result<MaintainReport> {
        contain(&self.path, "maintaining tiers", || {
            let _writer = self.writer.lock();
            let (plan, pending) = {
                let rt = self.tiers.lock();
                if rt.is_idle() {
                    return Ok(MaintainReport::default());
                }
                let plan = rt.state.plan(now, self.opts.tiering.budget);
                let room = self.opts.tiering.budget.max_ops as usize;
                let pending: Vec<VersionId> = rt
                    .pending
                    .iter()
                    .take(room.saturating_sub(plan.moves.len()))
                    .cloned()
                    .collect();
                (plan, pending)
            };
            let (prepared, converted) = {
                let r = self.read()?;
                let prepared = self.prepare_moves(&r, &plan)?;
                let converted = self.prepare_conversions(&r, &pending)?;
                (prepared, converted)
            };
            let applied: Vec<Move> = prepared.iter().map(|p| p.mv).collect();
            let stats = self.stats_to_save();
            let (bytes_written, stats_saved) = self.write(|wt| {
                let mut bytes = 0u64;
                for c in &converted {
                    bytes += self.write_conversion(wt, c, now)?;
                }
                bytes += self.write_moves(wt, &prepared, now)?;
                Ok((bytes, save_stats(wt, &stats)?))
            })?;
            if bytes_written > 0 {
                self.note_freed_pages();
            }
            let done = Plan {
                now,
                moves: applied,
                bytes_reencoded: plan.bytes_reencoded,
                warm_bytes_before: plan.warm_bytes_before,
                warm_bytes_after: plan.warm_bytes_after,
                deferred: plan.deferred,
            };
            let mut rt = self.tiers.lock();
            rt.state.apply(&done).map_err(tier_error)?;
            rt.read_since_save.clear();
            Ok(MaintainReport {
                bytes_written,
                converted: converted.len(),
                stats_saved,
                ..MaintainReport::from_plan(&plan, &done.moves, &rt.state)
            })
        })
    }

    /// Read statistics of the versions read since the last pass, by block id.
    fn stats_to_save(&self) -> Vec<(VersionId, HashMap<u64, AccessStats>)> {
        let rt = self.tiers.lock();
        let mut out: Vec<_> = rt
            .read_since_save
            .iter()
            .map(|vid| {
                let stats = rt
                    .blocks_of(vid)
                    .iter()
                    .filter_map(|(id, _)| Some((*id, rt.state.stats(*id).ok()?)))
                    .collect();
                (vid.clone(), stats)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Decodes and re-encodes every moved block (in parallel).
    fn prepare_moves(&self, r: &ReadTxn, plan: &Plan) -> Result<Vec<Prepared>> {
        let rt = self.tiers.lock();
        let located: Vec<(Move, VersionId, u32, Precision, bool)> = plan
            .moves
            .iter()
            .filter_map(|mv| {
                let (vid, block) = rt.location.get(&mv.block)?.clone();
                let view = rt.state.block(mv.block)?;
                Some((*mv, vid, block, view.precision, view.exact_source))
            })
            .collect();
        drop(rt);
        // Records and rows first (sequential reads), then the work in parallel.
        let mut inputs = Vec::with_capacity(located.len());
        let mut records: HashMap<VersionId, Arc<VersionRecord>> = HashMap::new();
        for (mv, vid, block, precision, exact_source) in located {
            let rec = match records.get(&vid) {
                Some(r) => r.clone(),
                None => {
                    let Some(rec) = r.version(&vid.0, vid.1)? else {
                        continue;
                    };
                    let rec = Arc::new(rec);
                    records.insert(vid.clone(), rec.clone());
                    rec
                }
            };
            let Some(row) = r.tier_row(&vid.0, vid.1, u64::from(block))? else {
                continue;
            };
            let (values, exact) = self.best_data(r, &vid, &rec, block)?;
            inputs.push((
                mv,
                vid,
                block,
                precision,
                exact_source,
                rec,
                row,
                values,
                exact,
            ));
        }
        let rules = self.rules.read();
        let mut out = Vec::with_capacity(inputs.len());
        // Tier 0 moves read other tensors: sequential, in this snapshot.
        let mut encode = Vec::new();
        for (mv, vid, block, precision, exact_source, rec, row, values, exact) in inputs {
            // The data's domain holds whatever the tier (ADR 0027): a block of integers
            // (counters, indices) or with non-finite values stays where it is, and one of
            // non-negative values goes to Tier 0 only where its reads are zeros (a delta,
            // low-rank or scaled rebuild could go below zero).
            let domain = Domain::of_values(&values);
            if !domain.lossy_allowed() {
                continue;
            }
            if mv.to == Tier::Absent {
                let policy = rules.resolve(&vid.0);
                if domain.non_negative && !matches!(policy.reconstruct, Reconstruct::None) {
                    continue;
                }
                if let Some((rebuild, blob)) =
                    self.freeze_rebuild(r, &vid, &rec, block, &policy.reconstruct, &values)?
                {
                    out.push(Prepared {
                        vid,
                        block,
                        mv,
                        segment: None,
                        residual: None,
                        rebuild,
                        rebuild_blob: blob,
                        precision: Precision::NoData,
                    });
                }
            } else {
                let fraction = match rules.resolve(&vid.0).residual {
                    Residual::TopK { fraction } => fraction,
                    _ => DEFAULT_TOPK,
                };
                let src = Source {
                    precision,
                    exact_source,
                    values,
                    exact,
                    fraction,
                };
                encode.push((mv, vid, block, rec, row, src));
            }
        }
        drop(rules);
        let group = self.opts.tiering.config.group_size;
        let encoded: Vec<Result<Prepared>> = encode
            .into_par_iter()
            .map(|(mv, vid, block, rec, row, src)| {
                let Source {
                    precision,
                    exact_source,
                    values,
                    exact,
                    fraction,
                } = src;
                let err = |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Encode {
                    tensor: vid.0.to_string(),
                    step: vid.1,
                    block: u64::from(block),
                    source,
                };
                let bits = mv
                    .to
                    .quant_bits()
                    .ok_or_else(|| err(format!("tier {} is not quantized", mv.to).into()))?;
                // The block keeps the kind of residual it had; an exact one only while the
                // block's exact data is held.
                let residual = match row.residual {
                    Some(ResidualRef::Exact { .. }) => Residual::Exact,
                    Some(ResidualRef::Sparse { .. }) => Residual::TopK { fraction },
                    None => Residual::None,
                };
                let enc = lossy::encode(
                    rec.dtype,
                    &values,
                    bits,
                    group,
                    exact.as_deref().filter(|_| exact_source),
                    residual,
                    &self.opts.lossless,
                )
                .map_err(|e| err(Box::new(e)))?;
                let precision = if exact_source && exact.is_some() {
                    Precision::fresh(mv.to)
                } else {
                    precision.after_encode(mv.to)
                };
                Ok(Prepared {
                    vid,
                    block,
                    mv,
                    segment: Some(enc.segment),
                    residual: enc.residual,
                    rebuild: Rebuild::None,
                    rebuild_blob: None,
                    precision,
                })
            })
            .collect();
        for p in encoded {
            out.push(p?);
        }
        out.sort_by_key(|p| p.mv.block);
        Ok(out)
    }

    /// The most precise values the store holds for a block of a tiered version, and its
    /// exact bytes when it holds them.
    fn best_data(
        &self,
        r: &ReadTxn,
        vid: &VersionId,
        rec: &VersionRecord,
        block: u32,
    ) -> Result<(Vec<f32>, Option<Vec<u8>>)> {
        let b = u64::from(block);
        let mut fetcher = Fetcher::new(r, &self.cache);
        let job = fetcher.fetch(&vid.0, vid.1, rec, b)?;
        let row = r.required_tier_row(&vid.0, vid.1, b)?;
        let bytes = job.decode(&self.cache)?;
        let exact = match row.residual {
            Some(ResidualRef::Exact { address, .. }) => {
                Some(r.apply_exact_residual(&vid.0, vid.1, b, address, &bytes)?)
            }
            _ => None,
        };
        let values =
            lossy::to_f32(rec.dtype, exact.as_deref().unwrap_or(&bytes)).unwrap_or_default();
        Ok((values, exact))
    }

    /// Resolves a block's reconstruct policy for Tier 0; `None` if a source is missing or
    /// is the block's own version (the move is deferred then).
    fn freeze_rebuild(
        &self,
        r: &ReadTxn,
        vid: &VersionId,
        rec: &VersionRecord,
        block: u32,
        reconstruct: &Reconstruct,
        values: &[f32],
    ) -> Result<Option<(Rebuild, Option<Vec<u8>>)>> {
        let resolve = |s: &policy::Source| -> Result<Option<SourceAt>> {
            let found = match s.step {
                SourceStep::Same => r.at_or_before(&s.tensor, vid.1)?.map(|x| x.0),
                SourceStep::Before => r.predecessor(&s.tensor, vid.1)?.map(|x| x.0),
                SourceStep::At(step) => r.version(&s.tensor, step)?.map(|_| step),
            };
            Ok(found
                .filter(|&step| !(s.tensor == *vid.0 && step == vid.1))
                .map(|step| SourceAt {
                    tensor: s.tensor.clone(),
                    step,
                }))
        };
        Ok(match reconstruct {
            Reconstruct::None => Some((Rebuild::None, None)),
            Reconstruct::Delta { base, keep } => {
                let Some(base) = resolve(base)? else {
                    return Ok(None);
                };
                let brec = self.version_record(r, &base.tensor, base.step)?;
                if brec.elements != rec.elements {
                    return Ok(None);
                }
                let lo = u64::from(block) * rec.block_elems;
                let elems = lo..lo + rec.block_len(u64::from(block));
                let (bytes, _) = self.read_elems(r, &base.tensor, base.step, &brec, elems, 1)?;
                let Some(base_values) = lossy::to_f32(brec.dtype, &bytes) else {
                    return Ok(None);
                };
                let blob = lossy::sparse_residual(rec.dtype, values, &base_values, *keep).map_err(
                    |e| StoreError::Encode {
                        tensor: vid.0.to_string(),
                        step: vid.1,
                        block: u64::from(block),
                        source: Box::new(e),
                    },
                )?;
                let address = address_of(&blob);
                let len = blob.len() as u32;
                Some((Rebuild::Delta { base, address, len }, Some(blob)))
            }
            Reconstruct::LowRank { left, right } => match (resolve(left)?, resolve(right)?) {
                (Some(left), Some(right)) => Some((Rebuild::LowRank { left, right }, None)),
                _ => None,
            },
            Reconstruct::Scaled {
                source,
                scale,
                permutation,
            } => {
                let Some(source) = resolve(source)? else {
                    return Ok(None);
                };
                let blob: Option<Vec<u8>> = permutation
                    .as_ref()
                    .map(|p| p.iter().flat_map(|v| v.to_le_bytes()).collect());
                let perm = blob.as_ref().map(|b| (address_of(b), b.len() as u32));
                Some((
                    Rebuild::Scaled {
                        source,
                        scale: *scale,
                        permutation: perm,
                    },
                    blob,
                ))
            }
        })
    }

    /// Lossless versions to convert: every block decoded and quantized at the start tier.
    fn prepare_conversions(&self, r: &ReadTxn, pending: &[VersionId]) -> Result<Vec<Converted>> {
        let rules = self.rules.read();
        let mut out = Vec::new();
        for vid in pending {
            let policy = rules.resolve(&vid.0);
            let Some(rec) = r.version(&vid.0, vid.1)? else {
                continue;
            };
            let Some(bits) = policy.policy.write_tier().quant_bits() else {
                // The policy is exact again: the conversion writes nothing.
                out.push(Converted {
                    vid: vid.clone(),
                    policy,
                    blocks: Vec::new(),
                });
                continue;
            };
            let (data, _) = self.read_elems(r, &vid.0, vid.1, &rec, 0..rec.elements, 0)?;
            let size = rec.dtype.size() as u64;
            let group = self.opts.tiering.config.group_size;
            let blocks: Vec<Result<(Vec<u8>, Option<ResidualBytes>)>> = (0..rec.blocks.len()
                as u64)
                .into_par_iter()
                .map(|b| {
                    let lo = (b * rec.block_elems * size) as usize;
                    let hi = lo + (rec.block_len(b) * size) as usize;
                    let exact = &data[lo..hi];
                    let err =
                        |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Encode {
                            tensor: vid.0.to_string(),
                            step: vid.1,
                            block: b,
                            source,
                        };
                    let values = lossy::to_f32(rec.dtype, exact).unwrap_or_default();
                    let enc = lossy::encode(
                        rec.dtype,
                        &values,
                        bits,
                        group,
                        Some(exact),
                        policy.residual,
                        &self.opts.lossless,
                    )
                    .map_err(|e| err(Box::new(e)))?;
                    Ok((enc.segment, enc.residual))
                })
                .collect();
            out.push(Converted {
                vid: vid.clone(),
                policy,
                blocks: blocks.into_iter().collect::<Result<_>>()?,
            });
        }
        Ok(out)
    }

    /// Writes a converted version; returns the bytes of new segments.
    fn write_conversion(&self, wt: &mut WriteTxn<'_>, c: &Converted, now: Tick) -> Result<u64> {
        let (name, step) = (&*c.vid.0, c.vid.1);
        let Some(mut rec) = wt.version(name, step)? else {
            return Ok(0);
        };
        // The pending rows go either way (and the version leaves the pending set).
        remove_rows(wt, name, step)?;
        if c.blocks.is_empty() {
            return Ok(0);
        }
        rebase_dependents(wt, &self.cache, &self.opts, name, step, &rec)?;
        let first = wt.take_block_ids(c.blocks.len() as u64)?;
        let tier = c.policy.policy.write_tier();
        let mut written = 0;
        for (b, (segment, residual)) in c.blocks.iter().enumerate() {
            let old = rec.blocks[b];
            let address = address_of(segment);
            wt.add_ref(name, step, b as u64, address, Some(segment))?;
            if old.has_segment() {
                wt.release(name, step, b as u64, old.address)?;
            }
            written += segment.len() as u64;
            rec.blocks[b] = BlockRecord::standalone(address, segment.len(), Form::Quantized);
            let residual = match residual {
                Some(r) => {
                    written += r.bytes().len() as u64;
                    Some(store_residual(wt, name, step, b as u64, r)?)
                }
                None => None,
            };
            let row = TierRow {
                id: first + b as u64,
                tier,
                policy: c.policy.policy,
                since: now,
                precision: Precision::fresh(tier),
                residual,
                rebuild: Rebuild::None,
                stats: None,
            };
            put_row(wt, name, step, b as u32, &row)?;
            let values = rec.block_len(b as u64) as u32;
            let spec = spec_of(&row, values, tiering_reconstruct(&c.policy.reconstruct));
            wt.tier_changes
                .registered
                .push((c.vid.clone(), b as u32, spec));
        }
        wt.put_version(name, step, &rec)?;
        Ok(written)
    }

    /// Writes the moved blocks; returns the bytes of new segments.
    fn write_moves(&self, wt: &mut WriteTxn<'_>, prepared: &[Prepared], now: Tick) -> Result<u64> {
        let mut by_version: BTreeMap<&VersionId, Vec<&Prepared>> = BTreeMap::new();
        for p in prepared {
            by_version.entry(&p.vid).or_default().push(p);
        }
        let mut written = 0;
        for (vid, moves) in by_version {
            let (name, step) = (&*vid.0, vid.1);
            let Some(mut rec) = wt.version(name, step)? else {
                continue;
            };
            for p in moves {
                let b = u64::from(p.block);
                let Some(mut row) = wt.tier_row(name, step, b)? else {
                    continue;
                };
                let old = rec.blocks[p.block as usize];
                let old_blobs = row_blobs(&row);
                let new = match &p.segment {
                    Some(seg) => {
                        let address = address_of(seg);
                        wt.add_ref(name, step, b, address, Some(seg))?;
                        written += seg.len() as u64;
                        BlockRecord::standalone(address, seg.len(), Form::Quantized)
                    }
                    None => BlockRecord::standalone(0, 0, Form::Absent),
                };
                if old.has_segment() {
                    wt.release(name, step, b, old.address)?;
                }
                rec.blocks[p.block as usize] = new;
                row.residual = match &p.residual {
                    Some(r) => {
                        written += r.bytes().len() as u64;
                        Some(store_residual(wt, name, step, b, r)?)
                    }
                    None => None,
                };
                if let Some(blob) = &p.rebuild_blob {
                    wt.add_ref(name, step, b, address_of(blob), Some(blob))?;
                    written += blob.len() as u64;
                }
                for address in old_blobs {
                    wt.release(name, step, b, address)?;
                }
                row.tier = p.mv.to;
                row.since = now;
                row.precision = p.precision;
                row.rebuild = p.rebuild.clone();
                put_row(wt, name, step, p.block, &row)?;
            }
            wt.put_version(name, step, &rec)?;
        }
        Ok(written)
    }
}

/// Writes read statistics into the tier rows of the versions read since the last pass.
fn save_stats(
    wt: &mut WriteTxn<'_>,
    stats: &[(VersionId, HashMap<u64, AccessStats>)],
) -> Result<usize> {
    let mut saved = 0;
    for (vid, by_id) in stats {
        for (block, mut row) in wt.tier_rows(&vid.0, vid.1)? {
            if let Some(s) = by_id.get(&row.id) {
                row.stats = Some(*s);
                put_row(wt, &vid.0, vid.1, block, &row)?;
                saved += 1;
            }
        }
    }
    Ok(saved)
}

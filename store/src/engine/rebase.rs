//! Deleting a version inside a write transaction, re-basing the blocks that depend on it.
//!
//! A block of version V depends on version D when its segment is a delta against D's block.
//! Before D goes, each such block is re-encoded, in step order of the dependents:
//! - if D's block is itself a delta against D', against D' (whose chain is one shorter than
//!   D's, so the bound on segments per read still holds);
//! - if D's block is a keyframe, the earliest dependent becomes a keyframe and later
//!   dependents of the same block are re-encoded against it;
//! - a block identical to its new base becomes a reference to the base's segment, and any
//!   block over `max_chain` becomes a keyframe.
//!
//! Depths stored in versions further down the chain stay as they were: an upper bound.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use strata_codec::segment;

use super::blocks::Fetcher;
use super::cache::{Block, BlockCache};
use super::segments::address_of;
use super::tier_rows::remove_rows;
use super::txn::{View, WriteTxn};
use crate::error::{Corruption, DbContext, NotFound, Result, StoreError};
use crate::options::Options;
use crate::record::{version_key, BlockRecord, Form, VersionRecord};

/// A re-based block: its new record and, if new, its segment.
#[derive(Clone)]
struct Rebased {
    record: BlockRecord,
    segment: Option<Arc<Vec<u8>>>,
}

/// Deletes version `step` of `name`, re-basing its dependents. With `from_checkpoint`, the
/// tensor is also taken out of the checkpoint at `step` (and an emptied checkpoint and its
/// tags are removed).
pub(crate) fn delete_version(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    step: u64,
    from_checkpoint: bool,
) -> Result<()> {
    if wt.version(name, step)?.is_none() {
        return Err(if !wt.has_versions(name)? {
            StoreError::NotFound(NotFound::Tensor {
                tensor: name.to_string(),
            })
        } else {
            StoreError::NotFound(NotFound::Version {
                tensor: name.to_string(),
                step,
            })
        });
    }
    delete_versions(wt, cache, opts, name, &[step])?;
    if from_checkpoint {
        drop_from_checkpoint(wt, name, step)?;
    }
    Ok(())
}

/// Deletes the versions of `name` at `steps` (those that exist; others are skipped), each
/// re-basing its dependents as [`delete_version`] does, reading the tensor's version records
/// once for all of them. The newest goes first and no block is re-based onto a version of
/// the batch, so each surviving block is re-encoded at most once however many of its
/// ancestors go: retention of K checkpoints costs work linear in K (oldest first, every
/// deletion re-encoded every later version anchored on the one deleted). Checkpoint records
/// are the caller's.
pub(crate) fn delete_versions(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    steps: &[u64],
) -> Result<()> {
    let mut all = wt.versions_of(name)?;
    let mut going: BTreeSet<u64> = steps.iter().copied().collect();
    while let Some(step) = going.pop_last() {
        let Ok(at) = all.binary_search_by_key(&step, |(s, _)| *s) else {
            continue;
        };
        let doomed = all.remove(at).1;
        let gone = Gone {
            step,
            record: &doomed,
            going: &going,
        };
        for (vstep, rec) in rebase_planned(wt, cache, opts, name, gone, &all)? {
            if let Ok(i) = all.binary_search_by_key(&vstep, |(s, _)| *s) {
                all[i].1 = rec;
            }
        }
        for (b, block) in doomed.blocks.iter().enumerate() {
            if block.has_segment() {
                wt.release(name, step, b as u64, block.address)?;
            }
        }
        remove_rows(wt, name, step)?;
        let key = version_key(name, step);
        wt.versions
            .remove(key.as_slice())
            .ctx("removing a version record")?;
    }
    Ok(())
}

/// Re-encodes every block that is a delta against a block of version `step` (record
/// `doomed`) so that it no longer needs it: before the version is deleted, or before its
/// blocks are made lossy.
pub(crate) fn rebase_dependents(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    step: u64,
    doomed: &VersionRecord,
) -> Result<()> {
    let all = wt.versions_of(name)?;
    let gone = Gone {
        step,
        record: doomed,
        going: &BTreeSet::new(),
    };
    rebase_planned(wt, cache, opts, name, gone, &all)?;
    Ok(())
}

/// Re-encodes every block of a version outside `steps` that is a delta against a version
/// in `steps`, onto the nearest ancestor outside `steps` (or as a keyframe), before the
/// versions of `steps` are rewritten lossy ([`crate::Store::age`]). Returns every version
/// of the tensor, with the changed records.
pub(crate) fn rebase_off(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    steps: &BTreeSet<u64>,
) -> Result<Vec<(u64, VersionRecord)>> {
    let mut all = wt.versions_of(name)?;
    for &step in steps.iter().rev() {
        let Ok(at) = all.binary_search_by_key(&step, |(s, _)| *s) else {
            continue;
        };
        let doomed = all[at].1.clone();
        let gone = Gone {
            step,
            record: &doomed,
            going: steps,
        };
        let others: Vec<(u64, VersionRecord)> = all
            .iter()
            .filter(|(s, _)| !steps.contains(s))
            .cloned()
            .collect();
        for (vstep, rec) in rebase_planned(wt, cache, opts, name, gone, &others)? {
            if let Ok(i) = all.binary_search_by_key(&vstep, |(s, _)| *s) {
                all[i].1 = rec;
            }
        }
    }
    Ok(all)
}

/// [`rebase_dependents`] given the tensor's other versions `all` (in step order): writes the
/// re-based blocks and returns the changed version records.
fn rebase_planned(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    gone: Gone<'_>,
    all: &[(u64, VersionRecord)],
) -> Result<Vec<(u64, VersionRecord)>> {
    let changes = plan_rebase(wt, cache, opts, name, gone, all)?;
    let mut changed = Vec::with_capacity(changes.len());
    for (vstep, rec, blocks) in changes {
        let mut rec = rec;
        for (b, new) in blocks {
            let old = rec.blocks[b as usize];
            wt.add_ref(
                name,
                vstep,
                b,
                new.record.address,
                new.segment.as_deref().map(Vec::as_slice),
            )?;
            wt.release(name, vstep, b, old.address)?;
            rec.blocks[b as usize] = new.record;
        }
        wt.put_version(name, vstep, &rec)?;
        changed.push((vstep, rec));
    }
    Ok(changed)
}

/// The version being deleted: its step, its record, and the steps deleted after it in the
/// same batch (no block is re-based onto those).
#[derive(Clone, Copy)]
struct Gone<'a> {
    step: u64,
    record: &'a VersionRecord,
    going: &'a BTreeSet<u64>,
}

type Changes = Vec<(u64, VersionRecord, Vec<(u64, Rebased)>)>;

/// Computes the new records of every block that depends on `(name, step)`. Versions in
/// `going` are deleted in the same batch, later: no block is re-based onto one of them.
fn plan_rebase(
    wt: &WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    gone: Gone<'_>,
    all: &[(u64, VersionRecord)],
) -> Result<Changes> {
    let Gone {
        step,
        record: doomed,
        going,
    } = gone;
    let name_arc: Arc<str> = Arc::from(name);
    let mut fetcher = Fetcher::new(wt, cache);
    // Per block: the dependent that became the new keyframe, as (step, record).
    let mut new_root: HashMap<u64, (u64, BlockRecord)> = HashMap::new();
    // Old segment address -> its re-based form (dependents sharing a segment share bytes).
    let mut done: HashMap<u128, Rebased> = HashMap::new();
    let mut changes = Vec::new();
    for (vstep, rec) in all {
        if *vstep == step || !rec.same_layout(doomed) {
            continue;
        }
        let mut blocks = Vec::new();
        for (b, block) in rec.blocks.iter().enumerate() {
            if block.base != Some(step) {
                continue;
            }
            let b = b as u64;
            if let Some(r) = done.get(&block.address) {
                let shared = BlockRecord {
                    reference: true,
                    run: block.run,
                    ..r.record
                };
                blocks.push((
                    b,
                    Rebased {
                        record: shared,
                        segment: None,
                    },
                ));
                continue;
            }
            let data = decode(&mut fetcher, cache, &name_arc, *vstep, rec, b)?;
            let d = doomed.blocks[b as usize];
            // The new base: the doomed block's own base, or, when that one is going too (in
            // the same batch), the nearest ancestor that stays.
            let mut candidate = None;
            let mut next = d.base;
            while let Some(c) = next {
                let crec = fetcher.record(&name_arc, c)?.ok_or_else(|| {
                    StoreError::Corrupt(Corruption::BadBase {
                        tensor: name.to_string(),
                        step,
                        block: b,
                        base: c,
                        reason: "does not exist",
                    })
                })?;
                if !crec.same_layout(doomed) {
                    return Err(StoreError::Corrupt(Corruption::BadBase {
                        tensor: name.to_string(),
                        step,
                        block: b,
                        base: c,
                        reason: "has another dtype, shape or block size",
                    }));
                }
                let c_block = crec.blocks[b as usize];
                if going.contains(&c) {
                    next = c_block.base;
                    continue;
                }
                candidate = Some((c, c_block, Some(crec)));
                break;
            }
            let candidate = match candidate {
                Some(found) => Some(found),
                None => new_root.get(&b).map(|&(s, r)| (s, r, None)),
            };
            let rebased = match candidate {
                Some((c, c_block, crec)) => {
                    let crec = match crec {
                        Some(r) => r,
                        None => fetcher.record(&name_arc, c)?.ok_or_else(|| {
                            StoreError::Corrupt(Corruption::BadBase {
                                tensor: name.to_string(),
                                step: *vstep,
                                block: b,
                                base: c,
                                reason: "does not exist",
                            })
                        })?,
                    };
                    let base = decode_with(&mut fetcher, cache, &name_arc, c, &crec, b, c_block)?;
                    if base.as_slice() == data.as_slice() {
                        Rebased {
                            record: BlockRecord {
                                reference: true,
                                run: block.run,
                                ..c_block
                            },
                            segment: None,
                        }
                    } else if c_block.depth < opts.max_chain {
                        encode(
                            name,
                            *vstep,
                            b,
                            rec,
                            &data,
                            Some((c, &base)),
                            c_block.depth + 1,
                            block.run,
                            opts,
                        )?
                    } else {
                        encode(name, *vstep, b, rec, &data, None, 1, 1, opts)?
                    }
                }
                None => encode(name, *vstep, b, rec, &data, None, 1, 1, opts)?,
            };
            if d.base.is_none() && !new_root.contains_key(&b) {
                new_root.insert(b, (*vstep, rebased.record));
            }
            if rebased.segment.is_some() {
                cache.insert(rebased.record.address, data.clone());
            }
            done.insert(block.address, rebased.clone());
            blocks.push((b, rebased));
        }
        if !blocks.is_empty() {
            changes.push((*vstep, rec.clone(), blocks));
        }
    }
    Ok(changes)
}

fn decode(
    fetcher: &mut Fetcher<'_>,
    cache: &BlockCache,
    name: &Arc<str>,
    step: u64,
    rec: &VersionRecord,
    b: u64,
) -> Result<Block> {
    fetcher.fetch(name, step, rec, b)?.decode(cache)
}

/// Decodes block `b` of version `step` whose block record is `block` (which may differ from
/// `rec.blocks[b]` when `step` is a dependent re-based earlier in this pass).
fn decode_with(
    fetcher: &mut Fetcher<'_>,
    cache: &BlockCache,
    name: &Arc<str>,
    step: u64,
    rec: &VersionRecord,
    b: u64,
    block: BlockRecord,
) -> Result<Block> {
    if let Some(hit) = cache.get(block.address) {
        return Ok(hit);
    }
    // The record in the table is still the old one: its block decodes to the same bytes.
    decode(fetcher, cache, name, step, rec, b)
}

#[allow(clippy::too_many_arguments)]
fn encode(
    name: &str,
    step: u64,
    b: u64,
    rec: &VersionRecord,
    data: &[u8],
    base: Option<(u64, &[u8])>,
    depth: u8,
    run: u8,
    opts: &Options,
) -> Result<Rebased> {
    let encode_err = |source| StoreError::Encode {
        tensor: name.to_string(),
        step,
        block: b,
        source: Box::new(source),
    };
    let seg = match base {
        Some((_, base)) => segment::encode_delta(rec.dtype, data, base, &opts.lossless),
        None => segment::encode_keyframe(rec.dtype, data, &opts.lossless),
    }
    .map_err(encode_err)?;
    Ok(Rebased {
        record: BlockRecord {
            address: address_of(&seg),
            base: base.map(|(s, _)| s),
            reference: false,
            depth,
            run,
            segment_len: seg.len() as u32,
            form: Form::Lossless,
        },
        segment: Some(Arc::new(seg)),
    })
}

/// Takes `name` out of the checkpoint at `step`; removes the checkpoint (and its tags) when
/// it has no tensor left.
fn drop_from_checkpoint(wt: &mut WriteTxn<'_>, name: &str, step: u64) -> Result<()> {
    let Some(mut cp) = wt.checkpoint(step)? else {
        return Ok(());
    };
    if !cp.tensors.iter().any(|t| t == name) {
        // A version written outside the checkpoint at its step: the checkpoint is not its.
        return Ok(());
    }
    cp.tensors.retain(|t| t != name);
    if cp.tensors.is_empty() {
        wt.remove_checkpoint(step)
    } else {
        wt.put_checkpoint(step, &cp)
    }
}

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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rayon::prelude::*;
use strata_codec::segment;

use super::blocks::{block_bytes, Fetcher, Job};
use super::cache::BlockCache;
use super::packs::part_names;
use super::segments::address_of;
use super::tier_rows::remove_rows;
use super::txn::WriteTxn;
use super::view::View;
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
/// are the caller's. Returns the bytes of the segments the re-bases wrote.
pub(crate) fn delete_versions(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    steps: &[u64],
) -> Result<u64> {
    // A packed version is never a base nor a delta: only the records take part in re-bases.
    let mut all = wt.stored_versions_of(name)?;
    let mut written = 0u64;
    let mut going: BTreeSet<u64> = steps.iter().copied().collect();
    while let Some(step) = going.pop_last() {
        let Ok(at) = all.binary_search_by_key(&step, |(s, _)| *s) else {
            if wt.remove_member(name, step)? {
                written += unpack(wt, cache, opts, name, step)?;
            }
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
                written += all[i]
                    .1
                    .blocks
                    .iter()
                    .zip(&rec.blocks)
                    .filter(|(old, new)| old.address != new.address)
                    .map(|(_, new)| new.stored_bytes())
                    .sum::<u64>();
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
    Ok(written)
}

/// Takes packed tensor `name` out of the record of the checkpoint at `step`, unless a
/// checkpoint deletion removed that record first; a pack part goes with the last tensor
/// packed in it. Returns the bytes of the segments the re-bases wrote.
fn unpack(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    step: u64,
) -> Result<u64> {
    let Some(mut cp) = wt.checkpoint(step)? else {
        return Ok(0);
    };
    let before = part_names(&cp);
    cp.packed.remove(name);
    wt.put_checkpoint(step, &cp)?;
    let after = part_names(&cp);
    let mut written = 0;
    for part in before.iter().filter(|p| !after.contains(p)) {
        written += delete_versions(wt, cache, opts, part, &[step])?;
    }
    Ok(written)
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
    let all = wt.stored_versions_of(name)?;
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
    let all = wt.stored_versions_of(name)?;
    rebase_each(wt, cache, opts, name, steps, all, |_, s, _| {
        !steps.contains(&s)
    })
}

/// Re-encodes every block of a version in `steps` that is a delta against a newer version
/// in `steps`, onto the nearest version after it outside `steps` (or as a keyframe), before
/// the versions of `steps` are rewritten lossy newest first ([`crate::Store::age`]): with the
/// newest kept a keyframe (ADR 0006) an older version's exact data reads through newer ones,
/// and aging the newer one first would take its base away. Returns every version of the
/// tensor, with the changed records.
pub(crate) fn rebase_within(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    steps: &BTreeSet<u64>,
    all: Vec<(u64, VersionRecord)>,
) -> Result<Vec<(u64, VersionRecord)>> {
    rebase_each(wt, cache, opts, name, steps, all, |step, s, rec| {
        s < step && steps.contains(&s) && rec.blocks.iter().any(|b| b.base == Some(step))
    })
}

/// For each version of `steps`, newest first, re-bases the blocks that depend on it in the
/// versions `candidate` picks (given the version of `steps`, a step and its record) off
/// it, as if it were deleted; `all` (every version of the tensor, in step order) is kept up
/// to date and returned. Newest first: a version's dependents are re-based while its own
/// chain is unchanged, so their data still reads.
fn rebase_each(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    steps: &BTreeSet<u64>,
    mut all: Vec<(u64, VersionRecord)>,
    candidate: impl Fn(u64, u64, &VersionRecord) -> bool,
) -> Result<Vec<(u64, VersionRecord)>> {
    for &step in steps.iter().rev() {
        let Ok(at) = all.binary_search_by_key(&step, |(s, _)| *s) else {
            continue;
        };
        let doomed = all[at].1.clone();
        let picked: Vec<(u64, VersionRecord)> = all
            .iter()
            .filter(|(s, rec)| candidate(step, *s, rec))
            .cloned()
            .collect();
        if picked.is_empty() {
            continue;
        }
        let gone = Gone {
            step,
            record: &doomed,
            going: steps,
        };
        for (vstep, rec) in rebase_planned(wt, cache, opts, name, gone, &picked)? {
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

/// Decoded bytes (each block's dependents and base) a batch of [`plan_rebase`] gathers
/// before it decodes and re-encodes them in parallel: bounds the memory of a re-base of any
/// size, while giving every core blocks to work on.
const BATCH_BYTES: usize = 64 << 20;
/// Blocks a batch holds at most, per thread of the pool: enough to keep every thread busy
/// while the blocks differ in work.
const BATCH_BLOCKS_PER_THREAD: usize = 16;

/// The dependents of one block of the version being deleted, and the base they move to.
struct Unit<'a> {
    block: u64,
    /// The doomed version's record of this block.
    doomed: BlockRecord,
    /// In step order: the dependent's index in `all`, its record, its block's record, and
    /// the segments its data needs.
    deps: Vec<(usize, &'a VersionRecord, BlockRecord, Job)>,
    /// The nearest ancestor of the doomed block that stays, with its block record and the
    /// segments its data needs; `None` when the dependents become keyframes.
    base: Option<(u64, BlockRecord, Job)>,
}

/// Computes the new records of every block that depends on `(name, step)`. Versions in
/// `going` are deleted in the same batch, later: no block is re-based onto one of them.
///
/// The segments are gathered from the transaction a batch at a time (the transaction is one
/// thread's), then each block's dependents are decoded and re-encoded in parallel: blocks
/// are independent of each other, and a block's dependents are taken in step order.
fn plan_rebase(
    wt: &WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
    gone: Gone<'_>,
    all: &[(u64, VersionRecord)],
) -> Result<Changes> {
    let doomed = gone.record;
    let name_arc: Arc<str> = Arc::from(name);
    let mut fetcher = Fetcher::new(wt, cache);
    // Per block, the dependents (indexes into `all`), in step order.
    let mut dependents: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, (vstep, rec)) in all.iter().enumerate() {
        if *vstep == gone.step || !rec.same_layout(doomed) {
            continue;
        }
        for (b, block) in rec.blocks.iter().enumerate() {
            if block.base == Some(gone.step) {
                dependents.entry(b as u64).or_default().push(i);
            }
        }
    }
    // Decoded bytes of a block (the last may be shorter).
    let block_bytes = block_bytes(doomed, 0).max(1);
    let mut rebased: BTreeMap<usize, Vec<(u64, Rebased)>> = BTreeMap::new();
    let most = BATCH_BLOCKS_PER_THREAD * rayon::current_num_threads().max(1);
    let mut todo = dependents.into_iter().peekable();
    while todo.peek().is_some() {
        let mut units = Vec::new();
        let mut bytes = 0usize;
        while bytes < BATCH_BYTES && units.len() < most {
            let Some((b, deps)) = todo.next() else { break };
            bytes = bytes.saturating_add(block_bytes.saturating_mul(deps.len() + 1));
            units.push(gather(&mut fetcher, &name_arc, gone, all, b, deps)?);
        }
        let done = units
            .into_par_iter()
            .map(|unit| rebase_block(unit, cache, opts, name))
            .collect::<Result<Vec<_>>>()?;
        for (i, b, r) in done.into_iter().flatten() {
            rebased.entry(i).or_default().push((b, r));
        }
    }
    Ok(rebased
        .into_iter()
        .map(|(i, blocks)| (all[i].0, all[i].1.clone(), blocks))
        .collect())
}

/// Gathers what re-basing block `b` needs: its dependents' segments, and the nearest
/// ancestor of the doomed block that stays (skipping those deleted later in the batch).
fn gather<'a>(
    fetcher: &mut Fetcher<'_>,
    name: &Arc<str>,
    gone: Gone<'_>,
    all: &'a [(u64, VersionRecord)],
    b: u64,
    deps: Vec<usize>,
) -> Result<Unit<'a>> {
    let d = gone.record.blocks[b as usize];
    let bad_base = |base: u64, reason: &'static str| {
        StoreError::Corrupt(Corruption::BadBase {
            tensor: name.to_string(),
            step: gone.step,
            block: b,
            base,
            reason,
        })
    };
    let mut base = None;
    let mut next = d.base;
    while let Some(c) = next {
        let crec = fetcher
            .record(name, c)?
            .ok_or_else(|| bad_base(c, "does not exist"))?;
        if !crec.same_layout(gone.record) {
            return Err(bad_base(c, "has another dtype, shape or block size"));
        }
        let c_block = crec.blocks[b as usize];
        if gone.going.contains(&c) {
            next = c_block.base;
            continue;
        }
        base = Some((c, c_block, fetcher.fetch(name, c, &crec, b)?));
        break;
    }
    let deps = deps
        .into_iter()
        .map(|i| {
            let (vstep, rec) = &all[i];
            Ok((
                i,
                rec,
                rec.blocks[b as usize],
                fetcher.fetch(name, *vstep, rec, b)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Unit {
        block: b,
        doomed: d,
        deps,
        base,
    })
}

/// Re-encodes the dependents of one block (see the module docs): `(index in all, block,
/// new form)` for each.
fn rebase_block(
    unit: Unit<'_>,
    cache: &BlockCache,
    opts: &Options,
    name: &str,
) -> Result<Vec<(usize, u64, Rebased)>> {
    let Unit {
        block: b,
        doomed: d,
        deps,
        base,
    } = unit;
    // The base the dependents move to: the ancestor that stays, or the dependent that became
    // the new keyframe; with its decoded bytes.
    let mut base = match base {
        Some((c, c_block, job)) => Some((c, c_block, job.decode(cache)?)),
        None => None,
    };
    // Old segment address -> its re-based form (dependents sharing a segment share bytes).
    let mut done: HashMap<u128, Rebased> = HashMap::new();
    let mut out = Vec::with_capacity(deps.len());
    for (i, rec, block, job) in deps {
        if let Some(r) = done.get(&block.address) {
            let shared = BlockRecord {
                reference: true,
                run: block.run,
                ..r.record
            };
            let r = Rebased {
                record: shared,
                segment: None,
            };
            out.push((i, b, r));
            continue;
        }
        let step = job.at().1;
        let data = job.decode(cache)?;
        let rebased = match &base {
            Some((_, c_block, base_data)) if base_data.as_slice() == data.as_slice() => Rebased {
                record: BlockRecord {
                    reference: true,
                    run: block.run,
                    ..*c_block
                },
                segment: None,
            },
            Some((c, c_block, base_data)) if c_block.depth < opts.max_chain => encode(
                name,
                step,
                b,
                rec,
                &data,
                Some((*c, base_data)),
                c_block.depth + 1,
                block.run,
                opts,
            )?,
            _ => encode(name, step, b, rec, &data, None, 1, 1, opts)?,
        };
        if d.base.is_none() && base.is_none() {
            base = Some((step, rebased.record, data.clone()));
        }
        if rebased.segment.is_some() {
            cache.insert(rebased.record.address, data);
        }
        done.insert(block.address, rebased.clone());
        out.push((i, b, rebased));
    }
    Ok(out)
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

//! Aging the versions of one tensor inside a write transaction (ADR 0020).
//!
//! 1. Every exact version that is a delta against a version to age is re-based off it
//!    ([`rebase_off`]): exact data never builds on lossy data. So is every version to age
//!    that is a delta against a newer one to age ([`rebase_within`]; the newest is kept a
//!    keyframe, ADR 0006): its exact data must still read when the newer one is aged.
//! 2. Newest first, each version to age is re-encoded block by block against the
//!    reconstruction of the nearest newer version whose chain has room (at most
//!    `max_chain` segments per read): newest first, so a version's exact data is still
//!    readable (its lossless chain runs to older versions, aged later) when it is aged, and
//!    its base is already in its final form. Each block becomes
//!    - a reference to the base block when it is identical to the base's reconstruction,
//!      or within the budget of it (every quantized delta rounds to 0);
//!    - an aged blob ([`strata_codec::aged`]) when one meets the budget and is smaller than
//!      both the block's old segment and a lossless delta against the same base;
//!    - otherwise a lossless delta against the base (the block stays exact).
//!
//! The caller runs it in one transaction for a whole pass: a crash leaves every version
//! exact or aged, none half-aged.

use std::collections::BTreeSet;
use std::sync::Arc;

use rayon::prelude::*;
use strata_codec::aged;
use strata_codec::domain::Domain;
use strata_codec::segment;

use super::blocks::{Fetcher, BATCH_BYTES};
use super::cache::{Block, BlockCache};
use super::rebase::{rebase_off, rebase_within};
use super::segments::address_of;
use super::txn::WriteTxn;
use crate::error::{Result, StoreError};
use crate::options::Options;
use crate::record::{BlockRecord, Form, VersionRecord};

/// What aging did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AgeTally {
    /// Versions now aged.
    pub(crate) versions_aged: u64,
    /// Versions left exact: every block stayed exact.
    pub(crate) versions_exact: u64,
    /// Blocks kept lossless because no quantization step met the budget.
    pub(crate) blocks_unmet: u64,
    /// The largest measured relative error of an aged version.
    pub(crate) max_rel_error: f64,
}

impl AgeTally {
    /// Adds what `other` counted.
    pub(crate) fn add(&mut self, other: AgeTally) {
        self.versions_aged += other.versions_aged;
        self.versions_exact += other.versions_exact;
        self.blocks_unmet += other.blocks_unmet;
        self.max_rel_error = self.max_rel_error.max(other.max_rel_error);
    }
}

/// One block to age: its exact bytes and its base (step, block record, reconstruction).
struct Work {
    block: u64,
    data: Block,
    base: Option<(u64, BlockRecord, Block)>,
    /// Bytes the block's old segment costs (0 for a reference).
    old_cost: usize,
}

impl Work {
    /// Bytes of data it holds: the block and its base.
    fn bytes(&self) -> usize {
        self.data.len() + self.base.as_ref().map_or(0, |(_, _, b)| b.len())
    }
}

/// A block's new record, its new segment if any, and its measured error if lossy.
struct Outcome {
    record: BlockRecord,
    segment: Option<Vec<u8>>,
    error: Option<f32>,
    /// Kept lossless because no step met the budget.
    unmet: bool,
}

/// How the blocks of a tensor are aged (ADR 0027, by its role).
#[derive(Debug, Clone, Copy)]
pub(crate) enum AgeHow {
    /// Weights: the linear mode against the newer version, under both bounds.
    Linear(aged::Budget),
    /// First moments: the linear mode against zero or the newer version, whichever blob is
    /// smaller (a moment decays within tens of steps: far apart, the versions share little).
    LinearOrAlone(aged::Budget),
    /// Second moments: the log-relative mode against the newer version, every element within
    /// this relative error; never below zero.
    Log(f64),
}

/// One tensor to age: its name, the steps to age (each exists, is lossless, and has a dtype
/// [`aged::supports`]), and how.
pub(crate) struct AgeJob {
    pub(crate) name: String,
    pub(crate) steps: BTreeSet<u64>,
    pub(crate) how: AgeHow,
}

/// Ages every tensor of `jobs` as its job says, chains of aged versions at most
/// `max_chain` segments deep. Whatever `how` says, a block whose values are all integers or
/// not all finite stays exact, and a block whose values are all non-negative reads back
/// non-negative ([`strata_codec::domain`]).
///
/// A tensor's versions are aged one after another (each is the base of the next older
/// one); different tensors are independent, so each round gathers the next window of
/// blocks of as many tensors as about [`BATCH_BYTES`] of data holds, encodes them all in
/// the thread pool, then writes them. A checkpoint of many small tensors is encoded in
/// parallel, not a tensor at a time.
pub(crate) fn age_versions(
    wt: &mut WriteTxn<'_>,
    cache: &BlockCache,
    opts: &Options,
    jobs: Vec<AgeJob>,
    max_chain: u8,
) -> Result<AgeTally> {
    let mut pending = jobs.into_iter();
    let mut active: Vec<Aging> = Vec::new();
    let mut tally = AgeTally::default();
    loop {
        let mut round: Vec<(usize, Vec<Work>)> = Vec::new();
        let mut bytes = 0usize;
        let mut i = 0;
        while round.is_empty() || bytes < BATCH_BYTES {
            if i == active.len() {
                match pending.next() {
                    Some(job) => active.push(Aging::start(wt, cache, opts, job)?),
                    None => break,
                }
            }
            match active[i].next_window(wt, cache, max_chain)? {
                Some(window) => {
                    bytes += window.iter().map(Work::bytes).sum::<usize>();
                    round.push((i, window));
                    i += 1;
                }
                None => tally.add(active.remove(i).tally),
            }
        }
        if round.is_empty() {
            return Ok(tally);
        }
        let outcomes: Vec<Vec<Result<Outcome>>> = round
            .par_iter()
            .map(|(i, window)| {
                let t = &active[*i];
                let Some(cur) = &t.current else {
                    return Vec::new();
                };
                window
                    .par_iter()
                    .map(|w| encode_block(&t.name, cur.step, &cur.rec, w, t.how, opts))
                    .collect()
            })
            .collect();
        for ((i, window), outcomes) in round.iter().zip(outcomes) {
            active[*i].apply(wt, window, outcomes)?;
        }
    }
}

/// A tensor being aged: its versions as they now are, the steps still to age, and the
/// version whose blocks are being re-encoded.
struct Aging {
    name: Arc<str>,
    how: AgeHow,
    all: Vec<(u64, VersionRecord)>,
    /// Steps still to age, oldest first: the newest is taken next.
    todo: Vec<u64>,
    current: Option<Current>,
    tally: AgeTally,
}

/// The version being aged: its record before and after, its worst error so far, and its
/// next block to gather.
struct Current {
    at: usize,
    step: u64,
    rec: VersionRecord,
    new: VersionRecord,
    worst: Option<f32>,
    next: u64,
}

impl Aging {
    /// Re-bases the exact versions off the steps to age ([`rebase_off`]), then waits for
    /// its first window.
    fn start(
        wt: &mut WriteTxn<'_>,
        cache: &BlockCache,
        opts: &Options,
        job: AgeJob,
    ) -> Result<Aging> {
        let all = rebase_off(wt, cache, opts, &job.name, &job.steps)?;
        let all = rebase_within(wt, cache, opts, &job.name, &job.steps, all)?;
        Ok(Aging {
            name: Arc::from(job.name),
            how: job.how,
            all,
            todo: job.steps.into_iter().collect(),
            current: None,
            tally: AgeTally::default(),
        })
    }

    /// The next window of blocks to encode: of the version being aged, or, once its blocks
    /// are done and it is written, of the next newest step. `None` when every step is done.
    fn next_window(
        &mut self,
        wt: &mut WriteTxn<'_>,
        cache: &BlockCache,
        max_chain: u8,
    ) -> Result<Option<Vec<Work>>> {
        loop {
            match &mut self.current {
                Some(cur) if cur.next < cur.rec.blocks.len() as u64 => {
                    // A window of blocks at a time: memory stays bounded for any tensor size.
                    let window = gather(
                        wt,
                        cache,
                        &self.name,
                        cur.step,
                        &cur.rec,
                        &self.all[cur.at + 1..],
                        &mut cur.next,
                        max_chain,
                    )?;
                    return Ok(Some(window));
                }
                Some(_) => self.finish(wt)?,
                None => {
                    let Some(step) = self.todo.pop() else {
                        return Ok(None);
                    };
                    let Ok(at) = self.all.binary_search_by_key(&step, |(s, _)| *s) else {
                        continue;
                    };
                    let rec = self.all[at].1.clone();
                    self.current = Some(Current {
                        at,
                        step,
                        new: rec.clone(),
                        rec,
                        worst: None,
                        next: 0,
                    });
                }
            }
        }
    }

    /// Writes the outcomes of a window of the version being aged.
    fn apply(
        &mut self,
        wt: &mut WriteTxn<'_>,
        window: &[Work],
        outcomes: Vec<Result<Outcome>>,
    ) -> Result<()> {
        let Some(cur) = &mut self.current else {
            return Ok(());
        };
        for (w, outcome) in window.iter().zip(outcomes) {
            let outcome = outcome?;
            let old = cur.rec.blocks[w.block as usize];
            wt.add_ref(
                &self.name,
                cur.step,
                w.block,
                outcome.record.address,
                outcome.segment.as_deref(),
            )?;
            wt.release(&self.name, cur.step, w.block, old.address)?;
            cur.new.blocks[w.block as usize] = outcome.record;
            if let Some(e) = outcome.error {
                cur.worst = Some(cur.worst.map_or(e, |w| w.max(e)));
            }
            self.tally.blocks_unmet += u64::from(outcome.unmet);
        }
        Ok(())
    }

    /// Writes the version being aged, its blocks all done: the base of the next older one.
    fn finish(&mut self, wt: &mut WriteTxn<'_>) -> Result<()> {
        let Some(mut cur) = self.current.take() else {
            return Ok(());
        };
        cur.new.aged = cur.worst;
        if cur.new.aged.is_some() {
            // No longer the data it was written with.
            cur.new.content = None;
        }
        match cur.worst {
            Some(e) => {
                self.tally.versions_aged += 1;
                self.tally.max_rel_error = self.tally.max_rel_error.max(f64::from(e));
            }
            None => self.tally.versions_exact += 1,
        }
        wt.put_version(&self.name, cur.step, &cur.new)?;
        self.all[cur.at].1 = cur.new;
        Ok(())
    }
}

/// Reads the next window of blocks of version `step` (from block `*next`, about
/// [`BATCH_BYTES`] of data and bases) with their bases chosen among `newer`.
#[allow(clippy::too_many_arguments)]
fn gather(
    wt: &WriteTxn<'_>,
    cache: &BlockCache,
    name: &Arc<str>,
    step: u64,
    rec: &VersionRecord,
    newer: &[(u64, VersionRecord)],
    next: &mut u64,
    max_chain: u8,
) -> Result<Vec<Work>> {
    let mut fetcher = Fetcher::new(wt, cache);
    let mut window = Vec::new();
    let mut bytes = 0usize;
    while *next < rec.blocks.len() as u64 && (window.is_empty() || bytes < BATCH_BYTES) {
        let b = *next;
        *next += 1;
        let data = fetcher.fetch(name, step, rec, b)?.decode(cache)?;
        let base = match choose_base(newer, rec, b, max_chain) {
            Some((s, brec, block)) => {
                let bytes = fetcher.fetch(name, s, brec, b)?.decode(cache)?;
                Some((s, block, bytes))
            }
            None => None,
        };
        let old = rec.blocks[b as usize];
        let work = Work {
            block: b,
            data,
            base,
            old_cost: old.stored_bytes() as usize,
        };
        bytes += work.bytes();
        window.push(work);
    }
    Ok(window)
}

/// The base of block `b` of an aged version: the nearest newer version (`newer`, in step
/// order) with the same layout whose block is lossless or aged and has room for one more
/// link.
fn choose_base<'a>(
    newer: &'a [(u64, VersionRecord)],
    rec: &VersionRecord,
    b: u64,
    max_chain: u8,
) -> Option<(u64, &'a VersionRecord, BlockRecord)> {
    newer.iter().find_map(|(s, r)| {
        let block = r.blocks.get(b as usize)?;
        (r.same_layout(rec)
            && matches!(block.form, Form::Lossless | Form::Aged)
            && block.depth < max_chain)
            .then_some((*s, r, *block))
    })
}

fn encode_block(
    name: &str,
    step: u64,
    rec: &VersionRecord,
    w: &Work,
    how: AgeHow,
    opts: &Options,
) -> Result<Outcome> {
    let encode_err = |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Encode {
        tensor: name.to_string(),
        step,
        block: w.block,
        source,
    };
    let base = w.base.as_ref();
    if let Some((_, block, bytes)) = base {
        if bytes.as_slice() == w.data.as_slice() {
            return Ok(reference(block, None));
        }
    }
    let domain = Domain::of(rec.dtype, &w.data).map_err(|e| encode_err(Box::new(e)))?;
    let base_bytes = base.map(|(_, _, b)| b.as_slice());
    let encode = |against: Option<&[u8]>| match how {
        AgeHow::Linear(budget) | AgeHow::LinearOrAlone(budget) => {
            aged::encode_within(rec.dtype, &w.data, against, &budget, &opts.lossless)
        }
        AgeHow::Log(max_rel) => {
            aged::encode_log(rec.dtype, &w.data, against, max_rel, &opts.lossless)
        }
    };
    let mut aged = None;
    let mut alone = false;
    if domain.lossy_allowed() && (domain.non_negative || !matches!(how, AgeHow::Log(_))) {
        aged = encode(base_bytes).map_err(|e| encode_err(Box::new(e)))?;
        if matches!(how, AgeHow::LinearOrAlone(_)) && base.is_some() {
            let own = encode(None).map_err(|e| encode_err(Box::new(e)))?;
            if let Some(own) = own {
                if aged
                    .as_ref()
                    .is_none_or(|a| own.bytes.len() < a.bytes.len())
                {
                    aged = Some(own);
                    alone = true;
                }
            }
        }
    }
    // A lossless delta and an aged blob against the base sit one link deeper than it; an
    // aged blob made alone starts a chain.
    let (depth, base_step) = match base {
        Some((s, block, _)) => (block.depth + 1, Some(*s)),
        None => (1, None),
    };
    if let (Some(a), Some((_, block, _)), false) = (&aged, base, alone) {
        if a.all_zero {
            return Ok(reference(block, Some(a.rel_error)));
        }
    }
    let aged_outcome = |a: aged::AgedBlock| {
        let (depth, base) = if alone { (1, None) } else { (depth, base_step) };
        Outcome {
            record: BlockRecord {
                address: address_of(&a.bytes),
                base,
                reference: false,
                depth,
                run: 1,
                segment_len: a.bytes.len() as u32,
                form: Form::Aged,
            },
            error: Some(a.rel_error),
            segment: Some(a.bytes),
            unmet: false,
        }
    };
    if let Some(a) = aged.as_ref().filter(|a| a.bytes.len() < w.old_cost) {
        return Ok(aged_outcome(a.clone()));
    }
    // Not smaller than the old segment: compare with a lossless delta on the same base.
    let exact = match base {
        Some((_, _, b)) => segment::encode_delta(rec.dtype, &w.data, b, &opts.lossless),
        None => segment::encode_keyframe(rec.dtype, &w.data, &opts.lossless),
    }
    .map_err(|e| encode_err(Box::new(e)))?;
    // Unmet: the block could have been aged, but no step met its budget.
    let unmet = aged.is_none() && domain.lossy_allowed();
    match aged {
        Some(a) if a.bytes.len() < exact.len() => Ok(aged_outcome(a)),
        _ => Ok(Outcome {
            record: BlockRecord {
                address: address_of(&exact),
                base: base_step,
                reference: false,
                depth,
                run: 1,
                segment_len: exact.len() as u32,
                form: Form::Lossless,
            },
            segment: Some(exact),
            error: None,
            unmet,
        }),
    }
}

/// A block that reads as its base's reconstruction: a reference to the base block.
fn reference(base: &BlockRecord, error: Option<f32>) -> Outcome {
    Outcome {
        record: BlockRecord {
            reference: true,
            run: 1,
            ..*base
        },
        segment: None,
        error,
        unmet: false,
    }
}

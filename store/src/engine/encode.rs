//! Planning and encoding writes: a [`VersionPlan`] per version (checked, its predecessor and
//! tier policy resolved), then its blocks encoded window by window: [`prepare_window`] picks
//! each block's base by the [`crate::DeltaPolicy`] (the rule in `strata_codec::chain`) and
//! fetches it, [`encode_tasks`] decodes bases and encodes segments in parallel. The caller
//! inserts a window's segments while the next one encodes, so memory is bounded by a few
//! windows, not by the tensor or the checkpoint.

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;
use strata_codec::chain::{self, Base, DeltaPolicy, DeltaRule, Link, Root};
use strata_codec::segment;

use super::blocks::{Fetcher, Job};
use super::buffers::POOL;
use super::cache::{BlockCache, CacheRoom};
use super::quantized::{self, ResidualBytes};
use super::segments::address_of;
use super::versions::check_name;
use super::view::View;
use super::Block;
use crate::error::{Corruption, InvalidInput, Result, StoreError};
use crate::options::Options;
use crate::record::{BlockRecord, Form, VersionRecord, MAX_DIMS};
use crate::tiers::policy::{Residual, TierPolicy};
use crate::tiers::rules::RuleSet;
use crate::DType;
use strata_codec::domain::Domain;

/// A version being written: checked, its predecessor and tier policy resolved; its block
/// records are filled in as windows are encoded and inserted.
#[derive(Debug)]
pub(crate) struct VersionPlan {
    pub(crate) name: Arc<str>,
    pub(crate) step: u64,
    /// The record, its `blocks` pushed in block order by the caller.
    pub(crate) record: VersionRecord,
    /// A version exists at this step and is being overwritten.
    pub(crate) replaces: bool,
    /// The tier policy of a version stored quantized.
    pub(crate) tiered: Option<TierPolicy>,
    /// The latest earlier version with the same dtype and shape: the base of deltas.
    pred: Option<(u64, Arc<VersionRecord>)>,
    /// The version becomes the tensor's newest (none is later) and the store keeps the newest
    /// as a keyframe ([`Options::newest_keyframe`]): its blocks may be written as keyframes
    /// and the predecessor's re-encoded against them (ADR 0006).
    newest: bool,
    /// Quantize instead: the start tier and residual.
    lossy: Option<(strata_tiering::Tier, Residual)>,
    /// A small tensor, stored in its version record (one block, no segment; ADR 0029).
    inline: bool,
    /// Blocks of the version.
    pub(crate) blocks: u64,
    /// The predecessor's blocks re-encoded against this version's, with their new records
    /// ([`Reencoded`]), to be written into the predecessor's record with this one.
    pub(crate) flipped: Vec<(u64, BlockRecord)>,
    /// Blocks of older versions re-based from the predecessor onto this version or its newest
    /// anchor (ADR 0006): `(step, block, new record, depth before)`, written into their
    /// records with this one.
    pub(crate) anchored: Vec<(u64, u64, BlockRecord, u8)>,
    /// The raw hashes of the blocks inserted so far; `None` once a block has none (a lossy
    /// or inline version has no content hash).
    pub(crate) raw_hashes: Option<Vec<u64>>,
}

impl VersionPlan {
    /// The step of the predecessor version, if the plan has one.
    pub(crate) fn pred_step(&self) -> Option<u64> {
        self.pred.as_ref().map(|(s, _)| *s)
    }

    /// Byte range of block `b` in the tensor's data.
    pub(crate) fn block_range(&self, b: u64) -> std::ops::Range<u64> {
        let size = self.record.dtype.size() as u64;
        let start = b * self.record.block_elems * size;
        start..start + self.record.block_len(b) * size
    }
}

/// Checks a tensor's name, shape and data length; returns its element count.
pub(crate) fn check_shape(
    name: &str,
    step: u64,
    dtype: DType,
    shape: &[u64],
    data_len: u64,
) -> Result<u64> {
    check_name(name)?;
    let bad_shape = || {
        StoreError::Invalid(InvalidInput::Shape {
            tensor: name.to_string(),
            step,
            shape: shape.iter().take(MAX_DIMS + 1).copied().collect(),
        })
    };
    if shape.len() > MAX_DIMS {
        return Err(bad_shape());
    }
    let elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(bad_shape)?;
    let expected = elements
        .checked_mul(dtype.size() as u64)
        .ok_or_else(bad_shape)?;
    if expected != data_len {
        return Err(StoreError::Invalid(InvalidInput::DataLength {
            tensor: name.to_string(),
            step,
            expected,
            actual: data_len,
        }));
    }
    Ok(elements)
}

/// Plans version `step` of `name` against the versions visible through `view`. `elements`
/// comes from [`check_shape`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_version(
    view: &dyn View,
    opts: &Options,
    rules: &RuleSet,
    name: Arc<str>,
    step: u64,
    dtype: DType,
    shape: &[u64],
    elements: u64,
    overwrite: bool,
) -> Result<VersionPlan> {
    let replaces = view.version(&name, step)?.is_some();
    if replaces && !overwrite {
        return Err(StoreError::Invalid(InvalidInput::StepExists {
            tensor: name.to_string(),
            step,
        }));
    }
    let policy = rules.resolve(&name);
    // A small tensor is stored exactly in its record, whatever its tier policy: a counter
    // or a scalar costs its bytes, not a segment's header (ADR 0029).
    let inline = VersionRecord::fits_inline(elements.saturating_mul(dtype.size() as u64));
    let lossy = (!inline && policy.is_lossy() && dtype.is_float())
        .then(|| (policy.policy.write_tier(), policy.residual));
    let pred = match lossy {
        Some(_) => None,
        None if inline => None,
        None => view
            .predecessor(&name, step)?
            // A packed version (ADR 0041) reads as an inline one and is no base.
            .filter(|(_, p)| p.dtype == dtype && p.shape == shape && p.inline.is_none())
            .map(|(s, p)| (s, Arc::new(p))),
    };
    let newest = match &pred {
        Some(_) if opts.newest_keyframe && opts.policy == DeltaPolicy::Chain => {
            !view.has_version_after(&name, step)?
        }
        _ => false,
    };
    let block_elems = match &pred {
        _ if inline => elements,
        Some((_, p)) => p.block_elems,
        None => opts.block_elems(dtype.size()),
    };
    let blocks = VersionRecord::block_count(elements, block_elems);
    Ok(VersionPlan {
        record: VersionRecord {
            dtype,
            shape: shape.to_vec(),
            elements,
            block_elems,
            blocks: Vec::with_capacity(blocks.min(1 << 20) as usize),
            aged: None,
            inline: None,
            content: None,
        },
        name,
        step,
        replaces,
        tiered: lossy.map(|_| policy.clone()),
        pred,
        newest,
        lossy,
        inline,
        blocks,
        flipped: Vec::new(),
        anchored: Vec::new(),
        raw_hashes: Some(Vec::new()),
    })
}

/// One block to encode: its version's plan, its index, its bytes.
pub(crate) struct BlockWork<'p, 'd> {
    pub(crate) plan: &'p VersionPlan,
    pub(crate) block: u64,
    pub(crate) data: BlockBytes<'d>,
}

/// The bytes of a block to encode: borrowed from a tensor in memory, or a range of a window
/// buffer read from a file, shared by the window's blocks until they are encoded (the writer
/// reads and prepares the next window meanwhile, so a block cannot borrow its buffer).
#[derive(Debug, Clone)]
pub(crate) enum BlockBytes<'d> {
    /// Part of the caller's memory.
    Borrowed(&'d [u8]),
    /// `range` of a shared window buffer.
    Shared(Arc<Vec<u8>>, std::ops::Range<usize>),
}

impl std::ops::Deref for BlockBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Borrowed(b) => b,
            BlockBytes::Shared(buf, range) => &buf[range.clone()],
        }
    }
}

/// An encoded block, ready to insert.
#[derive(Debug)]
pub(crate) struct Encoded {
    /// The block's record (its address names the segment, new or referenced).
    pub(crate) record: BlockRecord,
    /// The segment bytes, unless the block is a reference to a stored segment.
    pub(crate) segment: Option<Vec<u8>>,
    /// What a quantized block keeps of its quantization error.
    pub(crate) residual: Option<ResidualBytes>,
    /// The predecessor's block, re-encoded as a delta against this one (a keyframe).
    pub(crate) flipped: Option<Reencoded>,
    /// Blocks of older versions that were deltas against the predecessor's block, re-encoded
    /// against this one (anchors of the tree under the newest keyframe, ADR 0006).
    pub(crate) anchors: Vec<Reencoded>,
    /// xxh3-64 of the block's raw bytes, for a block stored exactly in a segment (the
    /// version's content hash, [`crate::record::content_hash`]).
    pub(crate) raw_hash: Option<u64>,
}

/// A block of an older version re-encoded against the new version's block, so that the
/// newest version is the keyframe of its lineage (ADR 0006, reverse chains): the
/// predecessor's block, or an anchor that was a delta against it.
#[derive(Debug)]
pub(crate) struct Reencoded {
    /// The older version's step.
    pub(crate) step: u64,
    /// The block's record before, whose segment the version no longer needs.
    pub(crate) old: BlockRecord,
    /// The block's new record: a delta against the new version (or, for an anchor, a
    /// reference to it or a keyframe).
    pub(crate) record: BlockRecord,
    /// Its segment; `None` for a reference to the new version's segment.
    pub(crate) segment: Option<Vec<u8>>,
}

/// The first half of encoding a window of blocks (of one or more versions), which needs the
/// tables: fetches the bases of the blocks through `view`, in order. The tasks borrow the
/// blocks' bytes only.
pub(crate) fn prepare_window<'d>(
    view: &dyn View,
    cache: &BlockCache,
    opts: &Options,
    work: &[BlockWork<'_, 'd>],
) -> Result<Vec<Task<'d>>> {
    let mut fetcher = Fetcher::new(view, cache);
    let mut trees = Trees::default();
    let mut tasks = Vec::with_capacity(work.len());
    for w in work {
        let plan = w.plan;
        let mut task = Task {
            name: plan.name.clone(),
            step: plan.step,
            block: w.block,
            data: w.data.clone(),
            dtype: plan.record.dtype,
            pred: None,
            base: None,
            depth: 1,
            run: 1,
            anchor: false,
            flip: None,
            anchors: Vec::new(),
            moved: None,
            tree_bytes: 0,
            restart: None,
            lossy: plan.lossy,
            inline: plan.inline,
        };
        if let Some((pstep, prec)) = &plan.pred {
            let root = choose_base(
                &mut fetcher,
                opts,
                &plan.name,
                *pstep,
                prec,
                w.block,
                &mut task,
            )?;
            if plan.newest {
                choose_reverse(
                    &mut fetcher,
                    &mut trees,
                    opts,
                    &plan.name,
                    *pstep,
                    prec,
                    w.block,
                    root,
                    &mut task,
                )?;
            }
        }
        tasks.push(task);
    }
    Ok(tasks)
}

/// The second half of encoding a window ([`prepare_window`] the first), which needs no
/// tables: encodes the tasks in parallel; results in task order.
pub(crate) fn encode_tasks(
    tasks: Vec<Task<'_>>,
    cache: &BlockCache,
    room: &CacheRoom,
    opts: &Options,
) -> Result<Vec<Encoded>> {
    if tasks.len() <= 1 {
        return tasks
            .into_iter()
            .map(|t| encode_task(t, cache, room, opts))
            .collect();
    }
    tasks
        .into_par_iter()
        .map(|t| encode_task(t, cache, room, opts))
        .collect()
}

/// One block of a new version, with what it will be compared and encoded against.
pub(crate) struct Task<'d> {
    name: Arc<str>,
    step: u64,
    block: u64,
    data: BlockBytes<'d>,
    dtype: strata_codec::DType,
    /// The previous version's block: a reference when the data equals it.
    pred: Option<(BlockRecord, Job)>,
    /// The base to encode a delta against (`None` job: the same block as `pred`), with the
    /// depth and run the delta gets; `None`: a keyframe.
    base: Option<(u64, BlockRecord, Option<Job>)>,
    depth: u8,
    run: u8,
    /// The base is the lineage's keyframe, taken because the chain was full: keep the
    /// delta only if it is clearly smaller than a new keyframe would be.
    anchor: bool,
    /// The predecessor's block is the newest keyframe of its tree: write this block as a
    /// keyframe and re-encode the predecessor's against it; with the versions the tree then
    /// holds.
    flip: Option<(u64, BlockRecord, u8)>,
    /// With `flip`: the blocks of older versions that are deltas against the predecessor's
    /// besides the head of the chain under it (anchors; and the head too when the chain is
    /// full), newest first, to re-encode against this block so that no chain grows past
    /// `max_chain`.
    anchors: Vec<Anchor>,
    /// With `flip`: the head of the chain under the predecessor, to re-encode against the
    /// first of `anchors` (the newest), under which it and its chain read at the depths they
    /// would under the predecessor.
    moved: Option<Anchor>,
    /// With `flip`: the segment bytes of the predecessor's tree (itself and every version
    /// that reads through it), which bound what its anchors may cost ([`ANCHOR_BUDGET`]).
    tree_bytes: u64,
    /// The predecessor's block cannot be re-encoded: write a keyframe instead of the delta
    /// when [`chain::restart_pays`] against this keyframe size (its lineage's keyframe).
    restart: Option<usize>,
    /// Quantize instead: the tier policy's start tier and residual.
    lossy: Option<(strata_tiering::Tier, Residual)>,
    /// Store the bytes in the version record ([`VersionPlan`]'s `inline`).
    inline: bool,
}

/// Fills in the predecessor block and the base of `task` by the policy. Returns the
/// lineage's keyframe (step and block record) when the policy needed it looked up.
fn choose_base(
    fetcher: &mut Fetcher<'_>,
    opts: &Options,
    name: &Arc<str>,
    pstep: u64,
    prec: &VersionRecord,
    b: u64,
    task: &mut Task<'_>,
) -> Result<Option<(u64, BlockRecord)>> {
    let p = prec.blocks[b as usize];
    if p.form != Form::Lossless {
        // A quantized or Tier 0 block is no base: a keyframe.
        return Ok(None);
    }
    task.pred = Some((p, fetcher.fetch(name, pstep, prec, b)?));
    let link = |r: &BlockRecord| Link {
        depth: r.depth,
        run: r.run,
        keyframe: r.base.is_none(),
    };
    let rule = DeltaRule::new(opts.policy, opts.max_chain);
    let mut lineage = None;
    // The block the rule may want besides the predecessor's, with its version's record.
    let root = match rule.root_needed(link(&p)) {
        None => None,
        Some(Root::Lineage) => {
            lineage = lineage_root(fetcher, name, pstep, p, prec, b)?;
            match lineage {
                Some((rs, rb)) => fetcher.record(name, rs)?.map(|rrec| (rs, rb, rrec)),
                None => None,
            }
        }
        Some(Root::Base) => match p.base {
            Some(rs) => match fetcher.record(name, rs)? {
                Some(r) if r.same_layout(prec) => Some((rs, r.blocks[b as usize], r)),
                // A damaged or missing root: start a new keyframe.
                _ => None,
            },
            None => None,
        },
    };
    match rule.choose(link(&p), root.as_ref().map(|(_, rb, _)| link(rb))) {
        Base::Predecessor { depth, run } => {
            task.base = Some((pstep, p, None));
            (task.depth, task.run) = (depth, run);
        }
        Base::Root { depth, run, anchor } => {
            if let Some((rs, rb, rrec)) = root {
                let job = fetcher.fetch(name, rs, &rrec, b)?;
                task.base = Some((rs, rb, Some(job)));
                (task.depth, task.run, task.anchor) = (depth, run, anchor);
            }
        }
        Base::Keyframe => {}
    }
    Ok(lineage)
}

/// Smallest keyframe segment re-encoded against the next version. A smaller one is stored in
/// `tails` pieces that share B-tree leaves with other segments' (module `segments`), and
/// deleting it would leave those leaves part empty for good (keys only grow, so nothing is
/// appended there again); its block reads in microseconds through a chain anyway. A larger
/// one is mostly whole-leaf chunks, whose pages the next saves reuse.
const FLIP_MIN_BYTES: u32 = 64 << 10;

/// Most anchors a tree under the newest keyframe has, each re-encoded at every save: the
/// chains that fill after them move under the newest anchor instead. Anchors span fewer
/// versions than the chains moved under one (a delta against the newest, re-encoded at each
/// save, against one against an anchor left behind): on the scale bench's 20-step model, three
/// anchors stored 1.8 % over forward chains where one anchor and moved chains stored 3.3 %.
const MAX_ANCHORS: usize = 3;

/// Most versions the tree under the newest keyframe holds, itself included (ADR 0006): a save
/// reads the records of up to this many older versions of each tensor to find the tree. A
/// full tree is kept as it is; the next save starts a new one where a keyframe costs at most
/// [`ANCHOR_BUDGET`] of the tree's bytes, else goes on forward.
const TREE_HORIZON: u8 = 32;

/// For a version that becomes the tensor's newest: whether its block is written as a keyframe
/// with the predecessor's re-encoded against it (the predecessor's block is the newest
/// keyframe of a tree under the horizon), or may restart a lineage as a keyframe (any other
/// lossless predecessor; decided once the delta's size is known). `root` is the lineage's
/// keyframe if [`choose_base`] looked it up.
///
/// The tree under the newest keyframe: the chain under it (each version a delta against the
/// next), and anchors, deltas against it with a chain of their own (and chains moved under the
/// newest anchor). When the flip would push the chain past `max_chain`, the chain's head
/// becomes an anchor, or past [`MAX_ANCHORS`] moves under the newest one; every anchor is
/// re-encoded against the new keyframe, so every version of the tree stays within `max_chain`.
/// Whether the flip goes ahead is decided once the sizes are known ([`ANCHOR_BUDGET`]).
#[allow(clippy::too_many_arguments)]
fn choose_reverse(
    fetcher: &mut Fetcher<'_>,
    trees: &mut Trees,
    opts: &Options,
    name: &Arc<str>,
    pstep: u64,
    prec: &VersionRecord,
    b: u64,
    root: Option<(u64, BlockRecord)>,
    task: &mut Task<'_>,
) -> Result<()> {
    let p = prec.blocks[b as usize];
    if task.pred.is_none() || p.form != Form::Lossless {
        return Ok(());
    }
    // A predecessor without a content hash (written by an older build) keeps its encoding: a
    // remote that holds it compares its record whole.
    if p.base.is_none()
        && !p.reference
        && prec.content.is_some()
        && p.segment_len >= FLIP_MIN_BYTES
        && opts.max_chain >= 2
    {
        let older = trees.before(fetcher, name, pstep, p.run.max(opts.max_chain))?;
        let under = chain_under(&older, pstep, prec, b, opts.max_chain);
        let full = 2 + under > opts.max_chain;
        // The tree's versions: those whose chain of bases (lossless deltas of the versions
        // looked at) reaches the predecessor, newest first. A base may be older than its
        // dependent (a chain's head moved under an anchor) or newer.
        let candidates: HashMap<u64, BlockRecord> = older
            .iter()
            .take(usize::from(p.run))
            .filter_map(|(s, rec)| {
                let x = *rec.blocks.get(b as usize)?;
                (rec.same_layout(prec) && x.form == Form::Lossless && !x.reference)
                    .then_some((*s, x))
            })
            .collect();
        let reaches = |mut x: BlockRecord| {
            for _ in 0..opts.max_chain {
                match x.base {
                    Some(base) if base == pstep => return true,
                    Some(base) => match candidates.get(&base) {
                        Some(next) => x = *next,
                        None => return false,
                    },
                    None => return false,
                }
            }
            false
        };
        let mut tree: Vec<(u64, BlockRecord)> = vec![(pstep, p)];
        for (s, _) in older.iter().take(usize::from(p.run)) {
            if let Some(x) = candidates.get(s).filter(|x| reaches(**x)) {
                tree.push((*s, *x));
            }
        }
        task.tree_bytes = tree.iter().map(|(_, x)| u64::from(x.segment_len)).sum();
        if p.run >= TREE_HORIZON {
            // The tree is full: it is kept as it is, and this block starts the next one where
            // that costs the tree at most ANCHOR_BUDGET, else goes on forward.
            task.restart = Some(p.segment_len as usize);
            return Ok(());
        }
        // The predecessor's dependents: the head of the chain under it, and anchors (deltas
        // against it with a chain of their own), newest first.
        let mut head = None;
        for (i, (s, rec)) in older.iter().take(usize::from(p.run)).enumerate() {
            let block = match rec.blocks.get(b as usize) {
                Some(x) if rec.same_layout(prec) && x.reads_through(pstep) => *x,
                _ => continue,
            };
            // What a delta of one link costs here: the anchor's smallest child in the tree
            // (the head of its chain; its own size when it has none).
            let link = tree
                .iter()
                .filter(|(_, x)| x.base == Some(*s))
                .map(|(_, x)| x.segment_len)
                .min()
                .unwrap_or(block.segment_len);
            let anchor = Anchor {
                step: *s,
                old: block,
                link,
                job: fetcher.fetch_delta(name, *s, rec, b)?,
            };
            if i == 0 && under > 0 {
                head = Some(anchor);
            } else {
                task.anchors.push(anchor);
            }
        }
        // Past the flip the chain's head reads at depth 3 and the chain under it down to
        // `2 + under`. A full chain makes its head an anchor, up to MAX_ANCHORS of them; past
        // that, with one link of room left, the head moves under the newest anchor, at the
        // same depths, so that a save re-encodes at most MAX_ANCHORS anchors and one head
        // however long the tree.
        if let Some(h) = head {
            if task.anchors.len() >= MAX_ANCHORS && 2 + under == opts.max_chain {
                task.moved = Some(h);
            } else if full {
                task.anchors.insert(0, h);
            }
        }
        task.flip = Some((pstep, p, p.run.saturating_add(1)));
        return Ok(());
    }
    let keyframe = match (p.base, root) {
        (None, _) => Some(p),
        (Some(_), Some((_, root))) => Some(root),
        (Some(_), None) => lineage_root(fetcher, name, pstep, p, prec, b)?.map(|(_, root)| root),
    };
    task.restart = keyframe.map(|k| k.segment_len as usize);
    Ok(())
}

/// An older version's block that is a delta against the predecessor's, to re-encode against
/// the new version's block when the predecessor's is re-encoded against it.
struct Anchor {
    step: u64,
    /// Its record.
    old: BlockRecord,
    /// The bytes of a delta of one link in its part of the tree: what it would cost as a
    /// delta against its neighbour, not against the newest.
    link: u32,
    /// What its data needs.
    job: Job,
}

/// Most that the newest anchor of a tree may cost beyond a delta of one link, in percent of
/// the tree's bytes. Forward chains (ADR 0006) pay for anchors too, against their lineage's
/// keyframe and spanning about as many versions as the older anchors of a tree; the newest
/// anchor, which spans up to `max_chain` versions, is what keeping the newest a keyframe costs
/// beyond them. Past this the block goes on forward: where a delta grows fast with the
/// versions it spans (short fine-tunes in bf16), the newest keyframe costs more than the 3 %
/// of bytes it may.
const ANCHOR_BUDGET: u64 = 3;

/// Whether a keyframe of about `keyframe_len` bytes in place of a delta of `delta_len`, which
/// starts a new tree when the newest keyframe's holds [`TREE_HORIZON`] versions of `tree_bytes`
/// (none otherwise), costs at most [`ANCHOR_BUDGET`] of them.
fn new_tree_pays(delta_len: usize, keyframe_len: usize, tree_bytes: u64) -> bool {
    within_budget(keyframe_len.saturating_sub(delta_len) as u64, tree_bytes)
}

/// Whether `extra` bytes are at most [`ANCHOR_BUDGET`] of a tree's `tree_bytes`.
fn within_budget(extra: u64, tree_bytes: u64) -> bool {
    extra.saturating_mul(100) <= ANCHOR_BUDGET.saturating_mul(tree_bytes)
}

/// The versions before a predecessor, newest first, looked up once for all the blocks of a
/// window ([`prepare_window`]) and extended as far as a block needs.
#[derive(Default)]
struct Trees {
    before: HashMap<(Arc<str>, u64), Older>,
}

/// Versions before one, newest first, and whether the tensor has no more.
type Older = (Vec<(u64, Arc<VersionRecord>)>, bool);

impl Trees {
    /// Up to `most` versions before `step` of `name`, newest first (fewer when the tensor has
    /// fewer).
    fn before(
        &mut self,
        fetcher: &mut Fetcher<'_>,
        name: &Arc<str>,
        step: u64,
        most: u8,
    ) -> Result<Vec<(u64, Arc<VersionRecord>)>> {
        let (list, ended) = self.before.entry((name.clone(), step)).or_default();
        while !*ended && list.len() < usize::from(most) {
            let above = list.last().map_or(step, |(s, _)| *s);
            match fetcher.predecessor(name, above)? {
                Some(v) => list.push(v),
                None => *ended = true,
            }
        }
        Ok(list.iter().take(usize::from(most)).cloned().collect())
    }
}

/// Versions under block `b` of `(name, step)` (record `rec`) in its reverse chain, given the
/// versions before it (`older`, newest first): the version before it if its block is a delta
/// against it, the one before that if a delta against that one, and so on; at most `most`.
/// The records, not the depths they hold: a deletion that made a keyframe of a version with a
/// chain under it leaves the chain's depths as they were (module `rebase`).
fn chain_under(
    older: &[(u64, Arc<VersionRecord>)],
    step: u64,
    rec: &VersionRecord,
    b: u64,
    most: u8,
) -> u8 {
    let mut above = step;
    let mut count = 0u8;
    for (s, v) in older.iter().take(usize::from(most)) {
        let linked = v.same_layout(rec)
            && v.blocks
                .get(b as usize)
                .is_some_and(|x| x.reads_through(above));
        if !linked {
            break;
        }
        count += 1;
        above = *s;
    }
    count
}

/// The keyframe a block's chain starts from: follows base steps from the predecessor's
/// block down to depth 1, at most `u8::MAX` records. `None` if a record on the way is
/// missing or laid out differently (the caller writes a keyframe then).
fn lineage_root(
    fetcher: &mut Fetcher<'_>,
    name: &Arc<str>,
    pstep: u64,
    p: BlockRecord,
    prec: &VersionRecord,
    b: u64,
) -> Result<Option<(u64, BlockRecord)>> {
    let (mut step, mut block) = (pstep, p);
    for _ in 0..u8::MAX {
        let Some(base_step) = block.base else {
            return Ok(Some((step, block)));
        };
        match fetcher.record(name, base_step)? {
            Some(r) if r.same_layout(prec) => {
                block = r.blocks[b as usize];
                step = base_step;
            }
            _ => return Ok(None),
        }
    }
    Ok(None)
}

fn encode_task(
    mut task: Task<'_>,
    cache: &BlockCache,
    room: &CacheRoom,
    opts: &Options,
) -> Result<Encoded> {
    let encode_err = |source| StoreError::Encode {
        tensor: task.name.to_string(),
        step: task.step,
        block: task.block,
        source: Box::new(source),
    };
    if task.inline {
        return Ok(Encoded {
            record: BlockRecord::standalone(0, task.data.len(), Form::Inline),
            segment: Some(task.data.to_vec()),
            residual: None,
            flipped: None,
            anchors: Vec::new(),
            raw_hash: None,
        });
    }
    // A block of integers (counters, indices) or with non-finite values stays exact
    // whatever the tier policy says (ADR 0027): written losslessly, read back exact.
    let keep_exact = || Domain::of(task.dtype, &task.data).is_ok_and(|d| !d.lossy_allowed());
    if let Some((tier, residual)) = task.lossy.filter(|_| !keep_exact()) {
        return encode_lossy(&task, tier, residual, opts).map_err(|source| StoreError::Encode {
            tensor: task.name.to_string(),
            step: task.step,
            block: task.block,
            source,
        });
    }
    let raw_hash = Some(twox_hash::XxHash3_64::oneshot(&task.data));
    let reference = |r: BlockRecord| Encoded {
        record: BlockRecord {
            reference: true,
            ..r
        },
        segment: None,
        residual: None,
        flipped: None,
        anchors: Vec::new(),
        raw_hash,
    };
    let mut pred_bytes = None;
    let pred_record = task.pred.as_ref().map(|(p, _)| *p);
    if let Some((p, job)) = task.pred {
        let bytes = job.decode(cache)?;
        if bytes.as_slice() == &*task.data {
            return Ok(reference(p));
        }
        pred_bytes = Some(bytes);
    }
    let mut flipped = None;
    let mut anchors = Vec::new();
    let mut run = task.run;
    let (segment, base) = match (task.flip, task.base) {
        (Some((pstep, p, tree)), _) => {
            let Some(pred) = pred_bytes.take() else {
                return Err(StoreError::Corrupt(Corruption::BadBase {
                    tensor: task.name.to_string(),
                    step: task.step,
                    block: task.block,
                    base: pstep,
                    reason: "was not read",
                }));
            };
            let key = segment::encode_keyframe(task.dtype, &task.data, &opts.lossless)
                .map_err(encode_err)?;
            let delta = segment::encode_delta(task.dtype, &pred, &task.data, &opts.lossless)
                .map_err(encode_err)?;
            let onto = Onto {
                name: &task.name,
                step: task.step,
                block: task.block,
                dtype: task.dtype,
                data: &task.data,
                keyframe: (address_of(&key), key.len()),
            };
            // The flip saves the predecessor's keyframe less the delta, and re-encodes the
            // anchors, which grow as the newest drifts from them. Where a keyframe costs about
            // a delta (AdamW's moments) the tree is kept as it is instead, for the price of a
            // restart (ADR 0006), without re-encoding anything. Else the flip goes ahead only
            // while it saves more than the anchors grow, and while they cost the tree at most
            // ANCHOR_BUDGET.
            let saving = i64::from(p.segment_len) - delta.len() as i64;
            let keep_tree = !task.anchors.is_empty()
                && chain::restart_pays(delta.len(), key.len(), opts.max_chain);
            let (mut growth, mut excess) = (0i64, 0u64);
            // The flip needs `growth < saving`, so the tree's bytes stay under this bound: a
            // newest anchor over ANCHOR_BUDGET of it refuses the flip whatever the anchors
            // after it add, and they are not encoded.
            let bound = task
                .tree_bytes
                .saturating_add(saving.max(0) as u64)
                .saturating_add(delta.len() as u64);
            let over_budget = |excess: u64| !within_budget(excess, bound);
            // The newest anchor's record and bytes once re-encoded: what `moved` goes under.
            let mut newest_anchor = None;
            for a in std::mem::take(&mut task.anchors) {
                if keep_tree || growth >= saving || over_budget(excess) {
                    break;
                }
                let (old, link) = (a.old, a.link);
                let (r, data) = reanchor(&onto, a, &pred, cache, opts)?;
                growth += r.record.stored_bytes() as i64 - old.stored_bytes() as i64;
                if newest_anchor.is_none() {
                    // The newest anchor: see ANCHOR_BUDGET.
                    excess = r.record.stored_bytes().saturating_sub(u64::from(link));
                    newest_anchor = Some((r.step, r.record, data));
                }
                anchors.push(r);
            }
            if let (Some(m), Some(under)) = (task.moved.take(), &newest_anchor) {
                if !keep_tree && growth < saving && !over_budget(excess) {
                    let r = move_under(&onto, m, &pred, under, opts)?;
                    growth += r.record.stored_bytes() as i64 - r.old.stored_bytes() as i64;
                    anchors.push(r);
                }
            }
            let tree_bytes = task
                .tree_bytes
                .saturating_add_signed(growth)
                .saturating_add(delta.len() as u64);
            if !keep_tree && growth < saving && within_budget(excess, tree_bytes) {
                // The predecessor becomes a delta against this block, one link above the
                // chain under it.
                run = tree;
                let record = BlockRecord {
                    address: address_of(&delta),
                    base: Some(task.step),
                    reference: false,
                    depth: 2,
                    run: 1,
                    segment_len: delta.len() as u32,
                    form: Form::Lossless,
                };
                cache.forget(p.address);
                flipped = Some(Reencoded {
                    step: pstep,
                    old: p,
                    record,
                    segment: Some(delta),
                });
                (key, None)
            } else {
                // The tree stays as it is. This block starts a new one where a keyframe costs
                // about a delta (ADR 0006's restart, judged by the predecessor's delta against
                // this block: the same XOR), else it goes on forward.
                anchors.clear();
                if chain::restart_pays(delta.len(), key.len(), opts.max_chain) {
                    (key, None)
                } else {
                    let forward =
                        segment::encode_delta(task.dtype, &task.data, &pred, &opts.lossless)
                            .map_err(encode_err)?;
                    (forward, Some(pstep))
                }
            }
        }
        (None, Some((base_step, base_rec, job))) => {
            let base_bytes = match (job, pred_bytes) {
                (Some(job), _) => job.decode(cache)?,
                (None, Some(p)) => p,
                (None, None) => {
                    return Err(StoreError::Corrupt(Corruption::BadBase {
                        tensor: task.name.to_string(),
                        step: task.step,
                        block: task.block,
                        base: base_step,
                        reason: "was not read",
                    }))
                }
            };
            if base_bytes.as_slice() == &*task.data {
                return Ok(reference(base_rec));
            }
            let seg = segment::encode_delta(task.dtype, &task.data, &base_bytes, &opts.lossless)
                .map_err(encode_err)?;
            if task.anchor && !chain::keep_anchor(seg.len(), base_rec.segment_len as usize) {
                // No smaller than the keyframe itself (the size a new one would have):
                // the tensor has drifted far; start a new lineage.
                let key = segment::encode_keyframe(task.dtype, &task.data, &opts.lossless)
                    .map_err(encode_err)?;
                (key, None)
            } else if task.restart.is_some_and(|k| {
                chain::restart_pays(seg.len(), k, opts.max_chain)
                    || new_tree_pays(seg.len(), k, task.tree_bytes)
            }) {
                // A keyframe costs about a delta here: the newest reads without a chain.
                let key = segment::encode_keyframe(task.dtype, &task.data, &opts.lossless)
                    .map_err(encode_err)?;
                (key, None)
            } else {
                (seg, Some(base_step))
            }
        }
        (None, None) => (
            segment::encode_keyframe(task.dtype, &task.data, &opts.lossless).map_err(encode_err)?,
            None,
        ),
    };
    let address = address_of(&segment);
    if cache.wants(task.data.len()) && room.take(task.data.len()) {
        // The next version of this tensor will read this block as its base.
        let mut copy = POOL.take(task.data.len());
        copy.extend_from_slice(&task.data);
        cache.insert(address, Arc::new(copy));
    }
    if let Some(p) = superseded(pred_record, address) {
        cache.forget(p);
    }
    Ok(Encoded {
        record: BlockRecord {
            address,
            base,
            reference: false,
            depth: if base.is_some() { task.depth } else { 1 },
            run: if base.is_some() || flipped.is_some() {
                run
            } else {
                1
            },
            segment_len: segment.len() as u32,
            form: Form::Lossless,
        },
        segment: Some(segment),
        residual: None,
        flipped,
        anchors,
        raw_hash,
    })
}

/// The new version's block that anchors are re-encoded against: a keyframe.
struct Onto<'a> {
    name: &'a str,
    step: u64,
    block: u64,
    dtype: DType,
    data: &'a [u8],
    /// The keyframe segment's address and length.
    keyframe: (u128, usize),
}

/// Re-encodes an anchor, a delta against the predecessor's block (whose bytes are `pred`),
/// against the new version's block `onto`: a delta of depth 2, a reference when the data is
/// the same, or a keyframe when the delta would be no smaller than one (the tensor has drifted
/// far). Returns its bytes too.
fn reanchor(
    onto: &Onto<'_>,
    anchor: Anchor,
    pred: &[u8],
    cache: &BlockCache,
    opts: &Options,
) -> Result<(Reencoded, Block)> {
    let Anchor { step, old, job, .. } = anchor;
    let data = job.decode_over(pred)?;
    cache.forget(old.address);
    if data.as_slice() == onto.data {
        let (address, key_len) = onto.keyframe;
        let record = BlockRecord {
            address,
            base: None,
            reference: true,
            depth: 1,
            run: 1,
            segment_len: key_len as u32,
            form: Form::Lossless,
        };
        let r = Reencoded {
            step,
            old,
            record,
            segment: None,
        };
        return Ok((r, data));
    }
    let r = delta_or_keyframe(onto, step, old, &data, (onto.step, onto.data, 2), opts)?;
    Ok((r, data))
}

/// Re-encodes the head of the chain under the predecessor (`moved`, a delta against the
/// predecessor's block, whose bytes are `pred`) against the newest anchor (`under`: its step,
/// its new record and its bytes), one link below it.
fn move_under(
    onto: &Onto<'_>,
    moved: Anchor,
    pred: &[u8],
    under: &(u64, BlockRecord, Block),
    opts: &Options,
) -> Result<Reencoded> {
    let Anchor { step, old, job, .. } = moved;
    let (base_step, base_record, base_data) = under;
    let data = job.decode_over(pred)?;
    let base = (
        *base_step,
        base_data.as_slice(),
        base_record.depth.saturating_add(1),
    );
    delta_or_keyframe(onto, step, old, &data, base, opts)
}

/// Block `onto.block` of version `step` (record `old` before), whose bytes are `data`,
/// re-encoded as a delta of depth `base.2` against the bytes `base.1` of version `base.0`; a
/// keyframe when that delta would be no smaller than the new version's keyframe.
fn delta_or_keyframe(
    onto: &Onto<'_>,
    step: u64,
    old: BlockRecord,
    data: &[u8],
    base: (u64, &[u8], u8),
    opts: &Options,
) -> Result<Reencoded> {
    let encode_err = |source| StoreError::Encode {
        tensor: onto.name.to_string(),
        step,
        block: onto.block,
        source: Box::new(source),
    };
    let (base_step, base_data, depth) = base;
    let delta =
        segment::encode_delta(onto.dtype, data, base_data, &opts.lossless).map_err(encode_err)?;
    let (segment, base, depth) = if chain::keep_anchor(delta.len(), onto.keyframe.1) {
        (delta, Some(base_step), depth)
    } else {
        let key = segment::encode_keyframe(onto.dtype, data, &opts.lossless).map_err(encode_err)?;
        (key, None, 1)
    };
    Ok(Reencoded {
        step,
        old,
        record: BlockRecord {
            address: address_of(&segment),
            base,
            reference: false,
            depth,
            run: 1,
            segment_len: segment.len() as u32,
            form: Form::Lossless,
        },
        segment: Some(segment),
    })
}

/// The cache key of the predecessor's block once a block at `written` follows it, if no
/// later write of the tensor reads it again: a delta is the base of its successor only
/// (the next write takes the new block, or the lineage's keyframe), so its copy is dropped,
/// and a write of a long series holds about two versions of each block, not a cache's worth
/// (the comparison harness's write memory). Keyframes stay: Chain's anchors and Star's
/// deltas are taken against them.
fn superseded(pred: Option<BlockRecord>, written: u128) -> Option<u128> {
    pred.filter(|p| p.form == Form::Lossless && p.base.is_some() && p.address != written)
        .map(|p| p.address)
}

/// Quantizes a block of a tiered tensor at its start tier, with the policy's residual.
fn encode_lossy(
    task: &Task<'_>,
    tier: strata_tiering::Tier,
    residual: Residual,
    opts: &Options,
) -> std::result::Result<Encoded, Box<dyn std::error::Error + Send + Sync>> {
    let not_float = strata_codec::segment::SegmentError::NotFloat { dtype: task.dtype };
    let bits = tier.quant_bits().ok_or(not_float.clone())?;
    let values = quantized::to_f32(task.dtype, &task.data).ok_or(not_float)?;
    let block = quantized::encode(
        task.dtype,
        &values,
        bits,
        opts.tiering.config.group_size,
        Some(&task.data),
        residual,
        &opts.lossless,
    )?;
    Ok(Encoded {
        record: BlockRecord::standalone(
            address_of(&block.segment),
            block.segment.len(),
            Form::Quantized,
        ),
        segment: Some(block.segment),
        residual: block.residual,
        flipped: None,
        anchors: Vec::new(),
        raw_hash: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, TensorRef};

    fn block(address: u128, base: Option<u64>, form: Form) -> BlockRecord {
        BlockRecord {
            base,
            form,
            ..BlockRecord::standalone(address, 64, form)
        }
    }

    #[test]
    fn only_a_delta_predecessor_is_superseded() {
        let delta = block(7, Some(10), Form::Lossless);
        assert_eq!(superseded(Some(delta), 8), Some(7));
        assert_eq!(
            superseded(Some(delta), 7),
            None,
            "the same block: a reference"
        );
        let keyframe = block(7, None, Form::Lossless);
        assert_eq!(
            superseded(Some(keyframe), 8),
            None,
            "a lineage's root stays"
        );
        assert_eq!(
            superseded(Some(block(7, Some(10), Form::Quantized)), 8),
            None
        );
        assert_eq!(superseded(None, 8), None);
    }

    /// A series written version by version keeps the lineage's keyframe and the newest
    /// version of the block in the cache, not every version (which the 256 MiB default
    /// would hold), and every version still reads back exactly.
    #[test]
    fn a_series_write_caches_the_keyframe_and_the_newest_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.strata")).unwrap();
        let n = 4096usize;
        let versions: Vec<Vec<u8>> = (0..8u32)
            .map(|v| {
                (0..n)
                    .flat_map(|i| (1.0f32 + (i as f32) * 1e-3 + (v as f32) * 1e-5).to_le_bytes())
                    .collect()
            })
            .collect();
        for (v, bytes) in versions.iter().enumerate() {
            let t = TensorRef {
                dtype: DType::F32,
                shape: &[n as u64],
                bytes,
            };
            store.put("w", v as u64, &t).unwrap();
            let held = store.cache.bytes();
            assert!(
                held <= 2 * bytes.len(),
                "after version {v} the cache holds {held} bytes, more than two versions"
            );
        }
        let infos = store.versions("w").unwrap();
        assert!(
            infos.iter().filter(|i| i.encodings[0].depth > 1).count() >= 4,
            "the series is written as deltas"
        );
        let check = |s: &Store| {
            for (v, bytes) in versions.iter().enumerate() {
                assert_eq!(&s.get("w", v as u64).unwrap().data, bytes, "version {v}");
            }
        };
        check(&store);
        drop(store);
        check(&Store::open(dir.path().join("s.strata")).unwrap());
    }
}

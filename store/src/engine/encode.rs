//! Planning writes: pick each block's base by the [`DeltaPolicy`], decode the bases, and
//! encode the new segments, all in a read transaction and in parallel, so the write
//! transaction only inserts.

use std::sync::Arc;

use rayon::prelude::*;
use strata_codec::segment;

use super::blocks::{Fetcher, Job};
use super::cache::BlockCache;
use super::quantized::{self, ResidualBytes};
use super::segments::address_of;
use super::txn::View;
use super::versions::check_name;
use crate::error::{Corruption, InvalidInput, Result, StoreError};
use crate::options::{DeltaPolicy, Options};
use crate::record::{BlockRecord, Form, VersionRecord, MAX_DIMS};
use crate::tensor::TensorRef;
use crate::tiers::policy::{Residual, TierPolicy};
use crate::tiers::rules::RuleSet;

/// A tensor to write at a step.
#[derive(Debug)]
pub(crate) struct NewVersion<'a> {
    pub(crate) name: Arc<str>,
    pub(crate) step: u64,
    pub(crate) tensor: TensorRef<'a>,
}

/// A version ready to insert: its record and the bytes of its new segments.
#[derive(Debug)]
pub(crate) struct PlannedVersion {
    pub(crate) name: Arc<str>,
    pub(crate) step: u64,
    pub(crate) record: VersionRecord,
    /// Per block: the segment bytes when the block is not a reference.
    pub(crate) segments: Vec<Option<Vec<u8>>>,
    /// A version exists at this step and is being overwritten.
    pub(crate) replaces: bool,
    /// The tier policy of a version stored quantized, and per block its residual.
    pub(crate) tiered: Option<(TierPolicy, Vec<Option<ResidualBytes>>)>,
}

/// Checks a tensor's shape and data length; returns its element count.
pub(crate) fn check_tensor(name: &str, step: u64, t: &TensorRef<'_>) -> Result<u64> {
    check_name(name)?;
    let bad_shape = || {
        StoreError::Invalid(InvalidInput::Shape {
            tensor: name.to_string(),
            step,
            shape: t.shape.iter().take(MAX_DIMS + 1).copied().collect(),
        })
    };
    if t.shape.len() > MAX_DIMS {
        return Err(bad_shape());
    }
    let elements = t
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(bad_shape)?;
    let expected = elements
        .checked_mul(t.dtype.size() as u64)
        .ok_or_else(bad_shape)?;
    if expected != t.bytes.len() as u64 {
        return Err(StoreError::Invalid(InvalidInput::DataLength {
            tensor: name.to_string(),
            step,
            expected,
            actual: t.bytes.len() as u64,
        }));
    }
    Ok(elements)
}

/// What one block of a new version will be compared and encoded against.
struct Task<'d> {
    version: usize,
    block: u64,
    data: &'d [u8],
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
    /// Quantize instead: the tier policy's start tier and residual.
    lossy: Option<(strata_tiering::Tier, Residual)>,
}

/// The encoded block.
struct Done {
    version: usize,
    block: u64,
    record: BlockRecord,
    segment: Option<Vec<u8>>,
    residual: Option<ResidualBytes>,
}

/// Plans `items` against the versions visible through `fetcher`.
pub(crate) fn plan(
    view: &dyn View,
    cache: &BlockCache,
    opts: &Options,
    items: &[NewVersion<'_>],
    overwrite: bool,
    rules: &RuleSet,
) -> Result<Vec<PlannedVersion>> {
    let mut fetcher = Fetcher::new(view, cache);
    let mut planned = Vec::with_capacity(items.len());
    let mut tasks = Vec::new();
    for (vi, item) in items.iter().enumerate() {
        let t = &item.tensor;
        let elements = check_tensor(&item.name, item.step, t)?;
        let replaces = fetcher.record(&item.name, item.step)?.is_some();
        if replaces && !overwrite {
            return Err(StoreError::Invalid(InvalidInput::StepExists {
                tensor: item.name.to_string(),
                step: item.step,
            }));
        }
        let policy = rules.resolve(&item.name);
        let lossy = (policy.is_lossy() && t.dtype.is_float())
            .then(|| (policy.policy.write_tier(), policy.residual));
        let pred = match lossy {
            Some(_) => None,
            None => view
                .predecessor(&item.name, item.step)?
                .filter(|(_, p)| p.dtype == t.dtype && p.shape == t.shape),
        };
        let block_elems = match &pred {
            Some((_, p)) => p.block_elems,
            None => opts.block_elems(t.dtype.size()),
        };
        let count = VersionRecord::block_count(elements, block_elems);
        let record = VersionRecord {
            dtype: t.dtype,
            shape: t.shape.to_vec(),
            elements,
            block_elems,
            blocks: Vec::with_capacity(count as usize),
        };
        let size = t.dtype.size() as u64;
        for b in 0..count {
            let start = (b * block_elems * size) as usize;
            let end = ((b * block_elems + record.block_len(b)) * size) as usize;
            let data = &t.bytes[start..end];
            let mut task = Task {
                version: vi,
                block: b,
                data,
                dtype: t.dtype,
                pred: None,
                base: None,
                depth: 1,
                run: 1,
                anchor: false,
                lossy,
            };
            if let Some((pstep, prec)) = &pred {
                choose_base(&mut fetcher, opts, &item.name, *pstep, prec, b, &mut task)?;
            }
            tasks.push(task);
        }
        planned.push(PlannedVersion {
            name: item.name.clone(),
            step: item.step,
            record,
            segments: vec![None; count as usize],
            replaces,
            tiered: lossy.map(|_| (policy.clone(), (0..count).map(|_| None).collect())),
        });
    }

    let done: Vec<Result<Done>> = tasks
        .into_par_iter()
        .map(|task| encode_task(task, items, cache, opts))
        .collect();
    for d in done {
        let d = d?;
        let v = &mut planned[d.version];
        v.record.blocks.push(d.record);
        v.segments[d.block as usize] = d.segment;
        if let Some((_, residuals)) = &mut v.tiered {
            residuals[d.block as usize] = d.residual;
        }
    }
    Ok(planned)
}

/// Fills in the predecessor block and the base of `task` by the policy.
fn choose_base(
    fetcher: &mut Fetcher<'_>,
    opts: &Options,
    name: &Arc<str>,
    pstep: u64,
    prec: &VersionRecord,
    b: u64,
    task: &mut Task<'_>,
) -> Result<()> {
    let p = prec.blocks[b as usize];
    if p.form != Form::Lossless {
        // A quantized or Tier 0 block is no base: a keyframe.
        return Ok(());
    }
    task.pred = Some((p, fetcher.fetch(name, pstep, prec, b)?));
    let run = p.run.saturating_add(1);
    match opts.policy {
        DeltaPolicy::Chain => {
            let depth = p.depth.saturating_add(1);
            if depth <= opts.max_chain {
                task.base = Some((pstep, p, None));
                (task.depth, task.run) = (depth, run);
            } else if opts.max_chain >= 2 {
                // The chain is full: anchor on the lineage's keyframe (depth 2) rather than
                // writing a new keyframe.
                if let Some((root_step, root)) = lineage_root(fetcher, name, pstep, p, prec, b)? {
                    let rrec = fetcher.record(name, root_step)?;
                    if let Some(rrec) = rrec {
                        let job = fetcher.fetch(name, root_step, &rrec, b)?;
                        task.base = Some((root_step, root, Some(job)));
                        (task.depth, task.run, task.anchor) = (2, run, true);
                    }
                }
            }
        }
        DeltaPolicy::Star => {
            let (root_step, root, job) = match p.base {
                None => (pstep, p, None),
                Some(root_step) => {
                    let rrec = fetcher.record(name, root_step)?;
                    match rrec {
                        Some(r) if r.same_layout(prec) => {
                            let root = r.blocks[b as usize];
                            let job = fetcher.fetch(name, root_step, &r, b)?;
                            (root_step, root, Some(job))
                        }
                        // A damaged or missing root: start a new keyframe.
                        _ => return Ok(()),
                    }
                }
            };
            let depth = root.depth.saturating_add(1);
            if run <= opts.max_chain && depth <= opts.max_chain {
                task.base = Some((root_step, root, job));
                (task.depth, task.run) = (depth, run);
            }
        }
    }
    Ok(())
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
    task: Task<'_>,
    items: &[NewVersion<'_>],
    cache: &BlockCache,
    opts: &Options,
) -> Result<Done> {
    let item = &items[task.version];
    let encode_err = |source| StoreError::Encode {
        tensor: item.name.to_string(),
        step: item.step,
        block: task.block,
        source: Box::new(source),
    };
    if let Some((tier, residual)) = task.lossy {
        return encode_lossy(&task, tier, residual, opts).map_err(|source| StoreError::Encode {
            tensor: item.name.to_string(),
            step: item.step,
            block: task.block,
            source,
        });
    }
    let reference = |r: BlockRecord| Done {
        version: task.version,
        block: task.block,
        record: BlockRecord {
            reference: true,
            ..r
        },
        segment: None,
        residual: None,
    };
    let mut pred_bytes = None;
    if let Some((p, job)) = task.pred {
        let bytes = job.decode(cache)?;
        if bytes.as_slice() == task.data {
            return Ok(reference(p));
        }
        pred_bytes = Some(bytes);
    }
    let (segment, base) = match task.base {
        Some((base_step, base_rec, job)) => {
            let base_bytes = match (job, pred_bytes) {
                (Some(job), _) => job.decode(cache)?,
                (None, Some(p)) => p,
                (None, None) => {
                    return Err(StoreError::Corrupt(Corruption::BadBase {
                        tensor: item.name.to_string(),
                        step: item.step,
                        block: task.block,
                        base: base_step,
                        reason: "was not read",
                    }))
                }
            };
            if base_bytes.as_slice() == task.data {
                return Ok(reference(base_rec));
            }
            let seg = segment::encode_delta(task.dtype, task.data, &base_bytes, &opts.lossless)
                .map_err(encode_err)?;
            if task.anchor && seg.len() >= base_rec.segment_len as usize {
                // No smaller than the keyframe itself (the size a new one would have):
                // the tensor has drifted far; start a new lineage.
                let key = segment::encode_keyframe(task.dtype, task.data, &opts.lossless)
                    .map_err(encode_err)?;
                (key, None)
            } else {
                (seg, Some(base_step))
            }
        }
        None => (
            segment::encode_keyframe(task.dtype, task.data, &opts.lossless).map_err(encode_err)?,
            None,
        ),
    };
    let address = address_of(&segment);
    if cache.wants(task.data.len()) {
        // The next version of this tensor will read this block as its base.
        cache.insert(address, Arc::new(task.data.to_vec()));
    }
    Ok(Done {
        version: task.version,
        block: task.block,
        record: BlockRecord {
            address,
            base,
            reference: false,
            depth: if base.is_some() { task.depth } else { 1 },
            run: if base.is_some() { task.run } else { 1 },
            segment_len: segment.len() as u32,
            form: Form::Lossless,
        },
        segment: Some(segment),
        residual: None,
    })
}

/// Quantizes a block of a tiered tensor at its start tier, with the policy's residual.
fn encode_lossy(
    task: &Task<'_>,
    tier: strata_tiering::Tier,
    residual: Residual,
    opts: &Options,
) -> std::result::Result<Done, Box<dyn std::error::Error + Send + Sync>> {
    let not_float = strata_codec::segment::SegmentError::NotFloat { dtype: task.dtype };
    let bits = tier.quant_bits().ok_or(not_float.clone())?;
    let values = quantized::to_f32(task.dtype, task.data).ok_or(not_float)?;
    let block = quantized::encode(
        task.dtype,
        &values,
        bits,
        opts.tiering.config.group_size,
        Some(task.data),
        residual,
        &opts.lossless,
    )?;
    Ok(Done {
        version: task.version,
        block: task.block,
        record: BlockRecord::standalone(
            address_of(&block.segment),
            block.segment.len(),
            Form::Quantized,
        ),
        segment: Some(block.segment),
        residual: block.residual,
    })
}

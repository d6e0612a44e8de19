//! Small tensors packed per checkpoint (ADR 0041).
//!
//! A checkpoint writes each tensor of at most [`PACK_MEMBER_MAX_BYTES`] into a pack part
//! of its dtype: a hidden tensor ([`part_name`]) whose version at the checkpoint's step holds
//! the packed tensors' bytes one after another, and which is a delta against the part of the
//! checkpoint before like any tensor. The checkpoint record says where each packed tensor is
//! ([`crate::record::Packed`]); the member index (this module's runs, table
//! `strata.members`) lists, per name, the steps at which it is packed, so that finding a
//! tensor's versions never reads every checkpoint record.
//!
//! A packed version has no version record. [`View::version`] and the lookups beside it
//! give it as an inline version whose bytes are its range of the part: every read path
//! (get, history, export, remotes) takes it as it takes an inline version, exact, never a
//! base, never tiered or aged.

use std::sync::Arc;

use redb::Table;
use strata_codec::DType;

use super::blocks::{read_blocks, Fetcher, Span};
use super::cache::{PartKey, MEMO_PARTS};
use super::versions::{BytesTable, PACK_PREFIX};
use super::view::View;
use crate::error::{Corruption, DbContext, Result, StoreError};
use crate::record::{
    decode_version_key, seal, unseal, version_key, version_key_range, CheckpointRecord, MemberRun,
    Packed, RecordError, VersionRecord, PACK_MEMBER_MAX_BYTES, RUN_MAX_STEPS,
};

/// Bytes a pack part fills before the next part of its dtype starts.
pub(crate) const PART_BYTES: u64 = 64 << 10;
/// Largest part: it fills to [`PART_BYTES`], and its last member may pass that.
const PART_MAX_BYTES: u64 = PART_BYTES + PACK_MEMBER_MAX_BYTES;

/// The name of pack part `part` of `dtype`.
pub(crate) fn part_name(dtype: DType, part: u32) -> String {
    format!("{PACK_PREFIX}pack/{}/{part}", dtype.name())
}

/// The names of the pack parts of checkpoint `cp` (at its step).
pub(crate) fn part_names(cp: &CheckpointRecord) -> Vec<String> {
    cp.parts()
        .into_iter()
        .filter_map(|(code, part)| DType::from_code(code).map(|d| part_name(d, part)))
        .collect()
}

/// Whether a checkpoint packs a tensor of `raw_bytes` bytes and `ndim` dimensions: scalars,
/// counters, biases and norms. A matrix keeps a record of its own, however small, so that
/// aging still reaches it (a packed tensor stays exact).
pub(crate) fn packs(raw_bytes: u64, ndim: usize) -> bool {
    ndim <= 1 && (1..=PACK_MEMBER_MAX_BYTES).contains(&raw_bytes)
}

fn run_error(name: &str, step: u64, source: RecordError) -> StoreError {
    StoreError::Corrupt(Corruption::Record {
        what: format!("member index run of tensor {name:?} from step {step}"),
        source,
    })
}

/// Decodes one entry of the member index.
fn decode_run(name: &str, key: &[u8], value: &[u8]) -> Result<MemberRun> {
    let Some((found, first)) = decode_version_key(key) else {
        return Err(run_error(
            name,
            0,
            RecordError::BadValue {
                field: "member index key",
                value: key.len() as u64,
            },
        ));
    };
    if found != name {
        return Err(run_error(
            name,
            first,
            RecordError::BadValue {
                field: "member index key name",
                value: found.len() as u64,
            },
        ));
    }
    unseal(key, value)
        .and_then(|body| MemberRun::decode(first, body))
        .map_err(|e| run_error(name, first, e))
}

/// The run of `name` with the latest first step at or before `step`.
fn run_at(members: &impl BytesTable, name: &str, step: u64) -> Result<Option<MemberRun>> {
    let range = version_key_range(name, 0..=step);
    let mut iter = members
        .range(range.start().as_slice()..=range.end().as_slice())
        .ctx("reading the member index")?;
    let Some(entry) = iter.next_back() else {
        return Ok(None);
    };
    let (k, v) = entry.ctx("reading the member index")?;
    decode_run(name, k.value(), v.value()).map(Some)
}

/// Whether `name` is packed in the checkpoint at `step`.
pub(crate) fn is_member(members: Option<&impl BytesTable>, name: &str, step: u64) -> Result<bool> {
    let Some(t) = members else { return Ok(false) };
    Ok(run_at(t, name, step)?.is_some_and(|r| r.steps.binary_search(&step).is_ok()))
}

/// The latest step at or before `step` at which `name` is packed.
pub(crate) fn member_at_or_before(
    members: Option<&impl BytesTable>,
    name: &str,
    step: u64,
) -> Result<Option<u64>> {
    let Some(t) = members else { return Ok(None) };
    Ok(run_at(t, name, step)?.and_then(|r| r.steps.into_iter().rev().find(|&s| s <= step)))
}

/// Every step at which `name` is packed, ascending.
pub(crate) fn member_steps(members: Option<&impl BytesTable>, name: &str) -> Result<Vec<u64>> {
    let Some(t) = members else {
        return Ok(Vec::new());
    };
    let range = version_key_range(name, 0..=u64::MAX);
    let mut out = Vec::new();
    for entry in t
        .range(range.start().as_slice()..=range.end().as_slice())
        .ctx("reading the member index")?
    {
        let (k, v) = entry.ctx("reading the member index")?;
        out.extend(decode_run(name, k.value(), v.value())?.steps);
    }
    Ok(out)
}

/// Whether `name` is packed at a step after `step`.
pub(crate) fn has_member_after(
    members: Option<&impl BytesTable>,
    name: &str,
    step: u64,
) -> Result<bool> {
    let Some(t) = members else { return Ok(false) };
    let range = version_key_range(name, 0..=u64::MAX);
    let mut iter = t
        .range(range.start().as_slice()..=range.end().as_slice())
        .ctx("reading the member index")?;
    let Some(entry) = iter.next_back() else {
        return Ok(false);
    };
    let (k, v) = entry.ctx("reading the member index")?;
    let run = decode_run(name, k.value(), v.value())?;
    Ok(run.steps.last().is_some_and(|&s| s > step))
}

/// Whether `name` is packed at any step.
pub(crate) fn has_members(members: Option<&impl BytesTable>, name: &str) -> Result<bool> {
    let Some(t) = members else { return Ok(false) };
    let range = version_key_range(name, 0..=u64::MAX);
    Ok(t.range(range.start().as_slice()..=range.end().as_slice())
        .ctx("reading the member index")?
        .next()
        .is_some())
}

/// Every name of the member index with its steps, in key order.
pub(crate) fn all_members(members: Option<&impl BytesTable>) -> Result<Vec<(String, Vec<u64>)>> {
    let Some(t) = members else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(String, Vec<u64>)> = Vec::new();
    for entry in t.iter().ctx("reading the member index")? {
        let (k, v) = entry.ctx("reading the member index")?;
        let Some((name, _)) = decode_version_key(k.value()) else {
            return Err(run_error(
                "?",
                0,
                RecordError::BadValue {
                    field: "member index key",
                    value: k.value().len() as u64,
                },
            ));
        };
        let run = decode_run(name, k.value(), v.value())?;
        match out.last_mut() {
            Some((n, steps)) if n == name => steps.extend(run.steps),
            _ => out.push((name.to_string(), run.steps)),
        }
    }
    Ok(out)
}

type MembersTable<'txn> = Table<'txn, &'static [u8], &'static [u8]>;

fn put_run(t: &mut MembersTable<'_>, name: &str, run: &MemberRun) -> Result<()> {
    let key = version_key(name, run.steps[0]);
    t.insert(key.as_slice(), seal(&key, &run.encode()).as_slice())
        .ctx("writing the member index")?;
    Ok(())
}

/// Adds `step` to the steps at which `name` is packed.
pub(crate) fn add_member(t: &mut MembersTable<'_>, name: &str, step: u64) -> Result<()> {
    let Some(mut run) = run_at(t, name, step)? else {
        // Before every run of the name (or the first): a run of its own.
        return put_run(t, name, &MemberRun { steps: vec![step] });
    };
    let Err(at) = run.steps.binary_search(&step) else {
        return Ok(());
    };
    run.steps.insert(at, step);
    if run.steps.len() > RUN_MAX_STEPS {
        let upper = MemberRun {
            steps: run.steps.split_off(run.steps.len() / 2),
        };
        put_run(t, name, &upper)?;
    }
    put_run(t, name, &run)
}

/// Takes `step` out of the steps at which `name` is packed; whether it was there.
pub(crate) fn remove_member(t: &mut MembersTable<'_>, name: &str, step: u64) -> Result<bool> {
    let Some(mut run) = run_at(t, name, step)? else {
        return Ok(false);
    };
    let Ok(at) = run.steps.binary_search(&step) else {
        return Ok(false);
    };
    let key = version_key(name, run.steps[0]);
    run.steps.remove(at);
    if at == 0 || run.steps.is_empty() {
        t.remove(key.as_slice()).ctx("writing the member index")?;
    }
    if !run.steps.is_empty() {
        put_run(t, name, &run)?;
    }
    Ok(true)
}

fn packed_error(name: &str, step: u64, reason: String) -> StoreError {
    StoreError::Corrupt(Corruption::Packed {
        tensor: name.to_string(),
        step,
        reason,
    })
}

/// Where the packed version `step` of `name` is, from its checkpoint's record (kept in the
/// view's memo: a checkpoint's packed tensors are read one after another); `None` if the
/// member index does not list it.
pub(crate) fn packed_at<V: View + ?Sized>(
    view: &V,
    name: &str,
    step: u64,
) -> Result<Option<Packed>> {
    if !view.is_member(name, step)? {
        return Ok(None);
    }
    let memo = view.part_memo();
    let held = memo.checkpoint.lock().clone();
    let cp = match held {
        Some((s, cp)) if s == step => cp,
        _ => {
            let cp = view
                .shared_checkpoint(step)?
                .ok_or_else(|| packed_error(name, step, "the checkpoint has no record".into()))?;
            *memo.checkpoint.lock() = Some((step, cp.clone()));
            cp
        }
    };
    let p = cp.packed.get(name).ok_or_else(|| {
        packed_error(
            name,
            step,
            "the checkpoint record does not say where".into(),
        )
    })?;
    Ok(Some(p.clone()))
}

/// The packed version `step` of `name`, as an inline version holding its bytes; `None` if
/// the member index does not list it.
pub(crate) fn member_version<V: View + ?Sized>(
    view: &V,
    name: &str,
    step: u64,
) -> Result<Option<VersionRecord>> {
    let Some(p) = packed_at(view, name, step)? else {
        return Ok(None);
    };
    let part = read_part(view, name, step, p.dtype, p.part)?;
    let range = p
        .offset
        .checked_add(p.len())
        .filter(|&end| end <= part.len() as u64)
        .map(|end| p.offset as usize..end as usize)
        .ok_or_else(|| {
            packed_error(
                name,
                step,
                format!(
                    "bytes {}..+{} lie outside its pack part of {} bytes",
                    p.offset,
                    p.len(),
                    part.len()
                ),
            )
        })?;
    Ok(Some(VersionRecord::inline(
        p.dtype,
        p.shape.clone(),
        p.elements,
        part[range].to_vec(),
    )))
}

/// The bytes of pack part `part` of `dtype` at `step`, through the view's memo (`member`:
/// the tensor read, named in errors).
fn read_part<V: View + ?Sized>(
    view: &V,
    member: &str,
    step: u64,
    dtype: DType,
    part: u32,
) -> Result<Arc<Vec<u8>>> {
    let pname = part_name(dtype, part);
    let rec = view.stored_version(&pname, step)?.ok_or_else(|| {
        packed_error(
            member,
            step,
            format!("its pack part {part} of {dtype:?} is missing"),
        )
    })?;
    let memo = view.part_memo();
    let key: PartKey = (pname.clone(), step, rec.content);
    if let Some((_, bytes)) = memo.parts.lock().iter().find(|(k, _)| *k == key) {
        return Ok(bytes.clone());
    }
    if rec.dtype != dtype || rec.raw_bytes() > PART_MAX_BYTES {
        return Err(packed_error(
            member,
            step,
            format!("its pack part {part} is not a {dtype:?} part"),
        ));
    }
    let mut out = Vec::with_capacity(rec.raw_bytes() as usize);
    let pname: Arc<str> = Arc::from(pname);
    let spans = [Span::whole(pname.clone(), step, &rec)];
    let mut fetcher = Fetcher::new(view.as_dyn(), &memo.cache.blocks);
    read_blocks(
        &mut fetcher,
        &memo.cache.blocks,
        &spans,
        |_, _| {
            Err(packed_error(
                member,
                step,
                "its pack part has a block in Tier 0".into(),
            ))
        },
        |_, _, bytes, _| {
            out.extend_from_slice(bytes);
            Ok(())
        },
    )?;
    let bytes = Arc::new(out);
    let mut parts = memo.parts.lock();
    if parts.len() == MEMO_PARTS {
        parts.remove(0);
    }
    parts.push((key, bytes.clone()));
    Ok(bytes)
}

/// The small tensors a checkpoint write packs: per dtype, the part being filled, and where
/// each packed tensor went.
#[derive(Default)]
pub(crate) struct Packer {
    /// Per dtype code: the part being filled and its bytes.
    open: std::collections::BTreeMap<u8, (u32, Vec<u8>)>,
    /// Where each packed tensor is.
    pub(crate) packed: std::collections::BTreeMap<String, Packed>,
}

/// A pack part to write: its dtype, number and bytes.
pub(crate) struct FullPart {
    pub(crate) dtype: DType,
    pub(crate) part: u32,
    pub(crate) bytes: Vec<u8>,
}

impl FullPart {
    /// The part's hidden tensor name.
    pub(crate) fn name(&self) -> String {
        part_name(self.dtype, self.part)
    }

    /// The part's shape: its elements, one dimension.
    pub(crate) fn shape(&self) -> [u64; 1] {
        [(self.bytes.len() / self.dtype.size()) as u64]
    }
}

impl Packer {
    /// Packs tensor `name` (`bytes`, whose length [`packs`] accepts and `shape` and `dtype`
    /// were checked against); returns its part once that part is full.
    pub(crate) fn add(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        bytes: &[u8],
    ) -> Option<FullPart> {
        let (part, buf) = self.open.entry(dtype.code()).or_default();
        self.packed.insert(
            name.to_string(),
            Packed {
                dtype,
                shape: shape.to_vec(),
                elements: (bytes.len() / dtype.size()) as u64,
                part: *part,
                offset: buf.len() as u64,
            },
        );
        buf.extend_from_slice(bytes);
        if (buf.len() as u64) < PART_BYTES {
            return None;
        }
        let full = FullPart {
            dtype,
            part: *part,
            bytes: std::mem::take(buf),
        };
        *part += 1;
        Some(full)
    }

    /// The parts still being filled.
    pub(crate) fn finish(&mut self) -> Vec<FullPart> {
        std::mem::take(&mut self.open)
            .into_iter()
            .filter(|(_, (_, buf))| !buf.is_empty())
            .filter_map(|(code, (part, bytes))| {
                DType::from_code(code).map(|dtype| FullPart { dtype, part, bytes })
            })
            .collect()
    }
}

//! Lookups in the tables, each written once over any table that can be read (a read
//! transaction's or a write transaction's): version records by name and step, checkpoint
//! records, tier rows; and the name check every entry point applies.
//!
//! [`super::View`] is how the rest of the crate calls these.

use std::sync::Arc;

use redb::ReadableTable;

use super::cache::SharedParts;

use crate::error::{Corruption, DbContext, InvalidInput, Result, StoreError};
use crate::record::{
    checkpoint_key, decode_version_key, split_tier_key, tier_key, unseal, version_key,
    version_key_range, CheckpointRecord, RecordError, Stored, TierRow, VersionRecord,
    MAX_NAME_BYTES,
};

/// A table keyed by byte strings with byte-string values (versions, tier rows).
pub(crate) trait BytesTable: ReadableTable<&'static [u8], &'static [u8]> {}
impl<T: ReadableTable<&'static [u8], &'static [u8]>> BytesTable for T {}

/// What every hidden pack part's name starts with; no tensor a caller writes may.
pub(crate) const PACK_PREFIX: char = '\u{1}';

/// Whether `name` is a hidden pack part (or reserved for one).
pub(crate) fn is_part_name(name: &str) -> bool {
    name.starts_with(PACK_PREFIX)
}

/// Checks a tensor name, tag or pattern: not empty, at most [`MAX_NAME_BYTES`].
pub(crate) fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > MAX_NAME_BYTES {
        "longer than 4096 bytes"
    } else if is_part_name(name) {
        "reserved: names starting with U+0001 are the store's own"
    } else {
        return Ok(());
    };
    Err(StoreError::Invalid(InvalidInput::Name {
        name: name.chars().take(64).collect(),
        reason,
    }))
}

fn version_error(name: &str, step: u64, source: RecordError) -> StoreError {
    StoreError::Corrupt(Corruption::Record {
        what: format!("version record of tensor {name:?} step {step}"),
        source,
    })
}

fn bad_version_key(name: &str, key: &[u8]) -> StoreError {
    StoreError::Corrupt(Corruption::Record {
        what: format!("a version key of tensor {name:?}"),
        source: RecordError::BadValue {
            field: "version key",
            value: key.len() as u64,
        },
    })
}

/// The name, step and record of a version table entry, its checksum checked; `name` is the
/// tensor the caller looked for, named if the key itself is damaged.
fn decode_entry<'k>(
    name: &str,
    key: &'k [u8],
    value: &[u8],
) -> Result<(&'k str, u64, VersionRecord)> {
    let (found, step) = decode_version_key(key).ok_or_else(|| bad_version_key(name, key))?;
    let rec = VersionRecord::from_stored(key, value)
        .map_err(|source| version_error(found, step, source))?;
    Ok((found, step, rec))
}

/// The record of version `step` of `name`, if any.
pub(crate) fn load_version(
    versions: &impl BytesTable,
    name: &str,
    step: u64,
) -> Result<Option<VersionRecord>> {
    let key = version_key(name, step);
    let Some(v) = versions
        .get(key.as_slice())
        .ctx("reading a version record")?
    else {
        return Ok(None);
    };
    VersionRecord::from_stored(&key, v.value())
        .map(Some)
        .map_err(|source| version_error(name, step, source))
}

/// The latest version of `name` at or before `step`.
pub(crate) fn at_or_before(
    versions: &impl BytesTable,
    name: &str,
    step: u64,
) -> Result<Option<(u64, VersionRecord)>> {
    let range = version_key_range(name, 0..=step);
    let mut iter = versions
        .range(range.start().as_slice()..=range.end().as_slice())
        .ctx("looking up versions")?;
    let Some(entry) = iter.next_back() else {
        return Ok(None);
    };
    let (k, v) = entry.ctx("looking up versions")?;
    let (_, s, rec) = decode_entry(name, k.value(), v.value())?;
    Ok(Some((s, rec)))
}

/// Every version of `name`, in step order.
pub(crate) fn versions_of(
    versions: &impl BytesTable,
    name: &str,
) -> Result<Vec<(u64, VersionRecord)>> {
    let range = version_key_range(name, 0..=u64::MAX);
    let mut out = Vec::new();
    for entry in versions
        .range(range.start().as_slice()..=range.end().as_slice())
        .ctx("listing versions")?
    {
        let (k, v) = entry.ctx("listing versions")?;
        let (_, step, rec) = decode_entry(name, k.value(), v.value())?;
        out.push((step, rec));
    }
    Ok(out)
}

/// Calls `each` with the name, step and record of every version whose key is at or after
/// `from` and before `to` (`None`: no bound), in key order: by name (shorter names first),
/// then by step.
pub(crate) fn versions_between(
    versions: &impl BytesTable,
    from: Option<&[u8]>,
    to: Option<&[u8]>,
    mut each: impl FnMut(&str, u64, VersionRecord),
) -> Result<()> {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let start = from.map_or(Unbounded, Included);
    let end = to.map_or(Unbounded, Excluded);
    for entry in versions
        .range::<&[u8]>((start, end))
        .ctx("listing versions")?
    {
        let (k, v) = entry.ctx("listing versions")?;
        let (name, step, rec) = decode_entry("?", k.value(), v.value())?;
        each(name, step, rec);
    }
    Ok(())
}

/// Whether `name` has any version.
pub(crate) fn has_versions(versions: &impl BytesTable, name: &str) -> Result<bool> {
    has_version_in(versions, name, 0..=u64::MAX, "looking up a tensor")
}

/// Whether `name` has a version after `step`: a key lookup, no record decoded.
pub(crate) fn has_version_after(versions: &impl BytesTable, name: &str, step: u64) -> Result<bool> {
    match step.checked_add(1) {
        Some(after) => has_version_in(versions, name, after..=u64::MAX, "looking up versions"),
        None => Ok(false),
    }
}

/// Whether `name` has a version at a step of `steps`, by its keys alone (`what`: the
/// operation, for a database error).
fn has_version_in(
    versions: &impl BytesTable,
    name: &str,
    steps: std::ops::RangeInclusive<u64>,
    what: &'static str,
) -> Result<bool> {
    let range = version_key_range(name, steps);
    Ok(versions
        .range(range.start().as_slice()..=range.end().as_slice())
        .ctx(what)?
        .next()
        .is_some())
}

/// Names of every tensor with at least one entry in a table keyed by version keys (the
/// versions, or the member index; `table` names it in errors), in key order (by name length,
/// then bytes): one range query per tensor, skipping its versions.
pub(crate) fn tensor_names(versions: &impl BytesTable, table: &'static str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let mut from: Vec<u8> = Vec::new();
    loop {
        let mut iter = versions
            .range::<&[u8]>((
                std::ops::Bound::Excluded(from.as_slice()),
                std::ops::Bound::Unbounded,
            ))
            .ctx("listing tensors")?;
        let Some(entry) = iter.next() else { break };
        let (k, _) = entry.ctx("listing tensors")?;
        let Some((name, step)) = decode_version_key(k.value()) else {
            return Err(bad_version_key("?", k.value()));
        };
        // Each round must move forward, or a damaged tree that hands back an earlier key would
        // make this loop forever (found by the store_open fuzz target).
        if k.value() <= from.as_slice() {
            return Err(StoreError::Corrupt(Corruption::KeyOrder {
                table,
                after: names.last().map_or_else(
                    || "the start".into(),
                    |n| format!("the versions of tensor {n:?}"),
                ),
                found: format!("tensor {name:?} step {step}"),
            }));
        }
        names.push(name.to_string());
        from = version_key(name, u64::MAX);
    }
    Ok(names)
}

/// The checkpoint record at `step`, if any.
pub(crate) fn load_checkpoint(
    checkpoints: &impl ReadableTable<u64, &'static [u8]>,
    step: u64,
) -> Result<Option<CheckpointRecord>> {
    let Some(v) = checkpoints.get(step).ctx("reading a checkpoint")? else {
        return Ok(None);
    };
    decode_checkpoint(step, v.value()).map(Some)
}

/// The checkpoint record stored at `step` as `bytes`, its damage named.
fn decode_checkpoint(step: u64, bytes: &[u8]) -> Result<CheckpointRecord> {
    CheckpointRecord::from_stored(&checkpoint_key(step), bytes)
        .map_err(|source| checkpoint_damage(step, source))
}

/// The error for damage `source` in the checkpoint record of `step`.
pub(crate) fn checkpoint_damage(step: u64, source: RecordError) -> StoreError {
    StoreError::Corrupt(Corruption::Record {
        what: format!("checkpoint record of step {step}"),
        source,
    })
}

/// Calls `each` with every checkpoint's step and its record's body (checksum checked, not
/// decoded), in step order: one pass over the table, where [`checkpoint_steps`] and a
/// lookup per step search it again for each.
pub(crate) fn each_checkpoint_body(
    checkpoints: &impl ReadableTable<u64, &'static [u8]>,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    for e in checkpoints.iter().ctx("listing checkpoints")? {
        let (k, v) = e.ctx("reading a checkpoint")?;
        let step = k.value();
        let body = unseal(&checkpoint_key(step), v.value())
            .map_err(|source| checkpoint_damage(step, source))?;
        each(step, body)?;
    }
    Ok(())
}

/// The checkpoint record at `step` through `shared`: decoded only when no transaction before
/// decoded the same stored bytes.
pub(crate) fn load_checkpoint_shared(
    checkpoints: &impl ReadableTable<u64, &'static [u8]>,
    step: u64,
    shared: &SharedParts,
) -> Result<Option<Arc<CheckpointRecord>>> {
    let Some(v) = checkpoints.get(step).ctx("reading a checkpoint")? else {
        return Ok(None);
    };
    shared
        .record(step, v.value(), || decode_checkpoint(step, v.value()))
        .map(Some)
}

/// Steps of every checkpoint, ascending.
pub(crate) fn checkpoint_steps(
    checkpoints: &impl ReadableTable<u64, &'static [u8]>,
) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for e in checkpoints.iter().ctx("listing checkpoints")? {
        out.push(e.ctx("listing checkpoints")?.0.value());
    }
    Ok(out)
}

/// Every tag and the step it names, sorted by tag.
pub(crate) fn tag_list(
    tags: &impl ReadableTable<&'static [u8], u64>,
) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for e in tags.iter().ctx("listing tags")? {
        let (k, v) = e.ctx("listing tags")?;
        let name = std::str::from_utf8(k.value()).map_err(|_| {
            StoreError::Corrupt(Corruption::Record {
                what: "a tag name".into(),
                source: RecordError::Utf8 { field: "tag name" },
            })
        })?;
        out.push((name.to_string(), v.value()));
    }
    Ok(out)
}

fn row_error(name: &str, step: u64, block: u64, source: RecordError) -> StoreError {
    StoreError::Corrupt(Corruption::Record {
        what: format!("tier row of tensor {name:?} step {step} block {block}"),
        source,
    })
}

/// The tier row of block `block` of a version, if any.
pub(crate) fn load_row(
    tiers: &impl BytesTable,
    name: &str,
    step: u64,
    block: u64,
) -> Result<Option<TierRow>> {
    let Ok(b) = u32::try_from(block) else {
        return Ok(None);
    };
    let key = tier_key(&version_key(name, step), b);
    let Some(v) = tiers.get(key.as_slice()).ctx("reading a tier row")? else {
        return Ok(None);
    };
    TierRow::from_stored(&key, v.value())
        .map(Some)
        .map_err(|source| row_error(name, step, block, source))
}

/// Every tier row of a version, as (block, row), in block order.
pub(crate) fn load_rows(
    tiers: &impl BytesTable,
    name: &str,
    step: u64,
) -> Result<Vec<(u32, TierRow)>> {
    let vkey = version_key(name, step);
    let lo = tier_key(&vkey, 0);
    let hi = tier_key(&vkey, u32::MAX);
    let mut out = Vec::new();
    for entry in tiers
        .range(lo.as_slice()..=hi.as_slice())
        .ctx("reading tier rows")?
    {
        let (k, v) = entry.ctx("reading tier rows")?;
        let block = split_tier_key(k.value()).map_or(0, |(_, b)| b);
        let row = TierRow::from_stored(k.value(), v.value())
            .map_err(|source| row_error(name, step, u64::from(block), source))?;
        out.push((block, row));
    }
    Ok(out)
}

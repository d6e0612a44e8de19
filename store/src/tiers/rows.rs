//! Reading and writing the tier rows of a version.

use std::sync::Arc;

use redb::ReadableTable;

use crate::error::{DbContext, Result, StoreError};
use crate::rebase::WriteTables;
use crate::record::Stored;
use crate::record::{tier_key, version_key, Rebuild, TierRow};

/// The tier row of block `block` of a version, if any.
pub(crate) fn load_row(
    tiers: &impl ReadableTable<&'static [u8], &'static [u8]>,
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
        .map_err(|source| StoreError::Record {
            what: format!("tier row of tensor {name:?} step {step} block {block}"),
            source,
        })
}

/// Every tier row of a version, as (block, row), in block order.
pub(crate) fn load_rows(
    tiers: &impl ReadableTable<&'static [u8], &'static [u8]>,
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
        let block = crate::record::split_tier_key(k.value()).map_or(0, |(_, b)| b);
        let row =
            TierRow::from_stored(k.value(), v.value()).map_err(|source| StoreError::Record {
                what: format!("tier row of tensor {name:?} step {step} block {block}"),
                source,
            })?;
        out.push((block, row));
    }
    Ok(out)
}

/// The tier rows of a version's `count` blocks, by block index (`None`: no row, a lossless
/// block).
pub(crate) fn load_rows_by_block(
    tiers: &impl ReadableTable<&'static [u8], &'static [u8]>,
    name: &str,
    step: u64,
    count: usize,
) -> Result<Vec<Option<TierRow>>> {
    let mut out: Vec<Option<TierRow>> = (0..count).map(|_| None).collect();
    for (block, row) in load_rows(tiers, name, step)? {
        if let Some(slot) = out.get_mut(block as usize) {
            *slot = Some(row);
        }
    }
    Ok(out)
}

/// Writes the tier row of block `block` of a version.
pub(crate) fn put_row(
    wt: &mut WriteTables<'_>,
    name: &str,
    step: u64,
    block: u32,
    row: &TierRow,
) -> Result<()> {
    let key = tier_key(&version_key(name, step), block);
    wt.t.tiers
        .insert(key.as_slice(), row.to_stored(&key).as_slice())
        .ctx("writing a tier row")?;
    Ok(())
}

/// The segment-store blobs a row holds references to (residual, sparse delta, permutation).
pub(crate) fn row_blobs(row: &TierRow) -> Vec<u128> {
    let mut out = Vec::new();
    if let Some(r) = &row.residual {
        out.push(r.address().0);
    }
    match &row.rebuild {
        Rebuild::Delta { address, .. } => out.push(*address),
        Rebuild::Scaled {
            permutation: Some((address, _)),
            ..
        } => out.push(*address),
        _ => {}
    }
    out
}

/// Removes every tier row of a version, releasing the blobs they hold, and tells the tier
/// state to forget the version once the transaction commits.
pub(crate) fn remove_rows(wt: &mut WriteTables<'_>, name: &str, step: u64) -> Result<()> {
    let rows = load_rows(&wt.t.tiers, name, step)?;
    if rows.is_empty() {
        return Ok(());
    }
    let vkey = version_key(name, step);
    for (block, row) in rows {
        for address in row_blobs(&row) {
            wt.release(name, step, u64::from(block), address)?;
        }
        wt.t.tiers
            .remove(tier_key(&vkey, block).as_slice())
            .ctx("removing a tier row")?;
    }
    wt.tier_changes.forgotten.push((Arc::from(name), step));
    Ok(())
}

//! Writing the tier rows of a version and the blobs they hold (reads go through
//! [`super::View`]).

use std::sync::Arc;

use super::quantized::ResidualBytes;
use super::segments::address_of;
use super::txn::WriteTxn;
use super::view::View;
use crate::error::{DbContext, Result};
use crate::record::{tier_key, version_key, Rebuild, ResidualRef, Stored, TierRow};

/// Writes the tier row of block `block` of a version.
pub(crate) fn put_row(
    wt: &mut WriteTxn<'_>,
    name: &str,
    step: u64,
    block: u32,
    row: &TierRow,
) -> Result<()> {
    let key = tier_key(&version_key(name, step), block);
    wt.tiers
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
pub(crate) fn remove_rows(wt: &mut WriteTxn<'_>, name: &str, step: u64) -> Result<()> {
    let rows = wt.tier_rows(name, step)?;
    if rows.is_empty() {
        return Ok(());
    }
    let vkey = version_key(name, step);
    for (block, row) in rows {
        for address in row_blobs(&row) {
            wt.release(name, step, u64::from(block), address)?;
        }
        wt.tiers
            .remove(tier_key(&vkey, block).as_slice())
            .ctx("removing a tier row")?;
    }
    wt.tier_changes.forgotten.push((Arc::from(name), step));
    Ok(())
}

/// Stores a residual blob held for block `block` of a version; returns its reference.
pub(crate) fn store_residual(
    wt: &mut WriteTxn<'_>,
    name: &str,
    step: u64,
    block: u64,
    residual: &ResidualBytes,
) -> Result<ResidualRef> {
    let bytes = residual.bytes();
    let address = address_of(bytes);
    wt.add_ref(name, step, block, address, Some(bytes))?;
    let len = bytes.len() as u32;
    Ok(match residual {
        ResidualBytes::Exact(_) => ResidualRef::Exact { address, len },
        ResidualBytes::Sparse(_) => ResidualRef::Sparse { address, len },
    })
}

//! The tier side of writing a quantized version: block ids, residual blobs, tier rows.

use std::sync::Arc;

use strata_tiering::Precision;

use crate::error::Result;
use crate::plan::PlannedVersion;
use crate::rebase::WriteTables;
use crate::record::{ResidualRef, TierRow};
use crate::segstore::address_of;
use crate::tiers::lossy::ResidualBytes;
use crate::tiers::policy::TierPolicy;
use crate::tiers::rows::put_row;
use crate::tiers::runtime::{spec_of, tiering_reconstruct};

/// Stores a residual blob; returns its reference.
pub(crate) fn store_residual(
    wt: &mut WriteTables<'_>,
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

/// Writes the tier rows of a freshly written quantized version and registers its blocks
/// with the tier state once the transaction commits.
pub(crate) fn add_tier_rows(
    wt: &mut WriteTables<'_>,
    v: &PlannedVersion,
    policy: &TierPolicy,
    residuals: &[Option<ResidualBytes>],
    now: u64,
) -> Result<()> {
    let count = v.record.blocks.len() as u64;
    let first = wt.take_block_ids(count)?;
    let tier = policy.policy.write_tier();
    let vid: (Arc<str>, u64) = (v.name.clone(), v.step);
    for b in 0..count {
        let residual = match residuals.get(b as usize).and_then(Option::as_ref) {
            Some(r) => Some(store_residual(wt, &v.name, v.step, b, r)?),
            None => None,
        };
        let row = TierRow {
            id: first + b,
            tier,
            policy: policy.policy,
            since: now,
            precision: Precision::fresh(tier),
            residual,
            rebuild: crate::record::Rebuild::None,
            stats: None,
        };
        put_row(wt, &v.name, v.step, b as u32, &row)?;
        let values = v.record.block_len(b) as u32;
        let spec = spec_of(&row, values, tiering_reconstruct(&policy.reconstruct));
        wt.tier_changes
            .registered
            .push((vid.clone(), b as u32, spec));
    }
    Ok(())
}

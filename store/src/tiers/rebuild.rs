//! Reading Tier 0 blocks: zeros, or a rebuild through the reconstruct policy frozen in the
//! block's tier row (ADR 0007).
//!
//! A rebuild reads other versions through the same snapshot; if one of them is at Tier 0
//! too, its rebuild counts one more level. More than `TierConfig::max_reconstruct_depth`
//! levels is [`crate::TierFailure::DepthExceeded`].

use std::ops::Range;
use std::sync::Arc;

use crate::engine::{lossy, Block, Job, ReadTxn, View};
use crate::error::{Result, StoreError, TierFailure};
use crate::record::{Rebuild, SourceAt, VersionRecord};
use crate::store::Store;
use crate::tensor::Fidelity;

/// Largest tensor a low-rank or permuted rebuild reads whole, in elements.
const MAX_REBUILD_SOURCE: u64 = 1 << 28;

impl Store {
    /// Rebuilds the Tier 0 block of `job` (a block of `rec`) at rebuild level `depth`.
    pub(crate) fn rebuild_block(
        &self,
        r: &ReadTxn,
        job: &Job,
        rec: &VersionRecord,
        depth: u8,
    ) -> Result<(Block, Fidelity)> {
        let (name, step, block) = job.at();
        let fail = |reason: String| {
            StoreError::Tier(TierFailure::Reconstruct {
                tensor: name.to_string(),
                step,
                block,
                reason,
            })
        };
        let row = job
            .row
            .as_ref()
            .ok_or_else(|| fail("the block has no tier row".into()))?;
        let lo = block * rec.block_elems;
        let elems = lo..lo + rec.block_len(block);
        let len = ((elems.end - elems.start) * rec.dtype.size() as u64) as usize;
        let limit = self.opts.tiering.config.max_reconstruct_depth;
        let level = depth.saturating_add(1);
        if level > limit && !matches!(row.rebuild, Rebuild::None) {
            return Err(StoreError::Tier(TierFailure::DepthExceeded {
                tensor: name.to_string(),
                step,
                limit,
            }));
        }
        let (values, inner) = match &row.rebuild {
            Rebuild::None if self.opts.tiering.fail_fast => {
                return Err(StoreError::Tier(TierFailure::ZeroNoPolicy {
                    tensor: name.to_string(),
                    step,
                    block,
                }))
            }
            Rebuild::None => return Ok((Arc::new(vec![0u8; len]), Fidelity::Zeros)),
            Rebuild::Delta { base, address, .. } => {
                let (mut values, f) = self.source_values(r, base, rec, elems.clone(), level)?;
                let blob = r.fetch_segment(name, step, block, *address)?;
                lossy::apply_sparse(&blob, &mut values)
                    .map_err(|e| fail(format!("sparse delta: {e}")))?;
                (values, f)
            }
            Rebuild::LowRank { left, right } => {
                self.low_rank(r, left, right, rec, elems.clone(), level, &fail)?
            }
            Rebuild::Scaled {
                source,
                scale,
                permutation,
            } => {
                let (values, f) = match permutation {
                    None => self.source_values(r, source, rec, elems.clone(), level)?,
                    Some((address, _)) => {
                        let perm = r.fetch_segment(name, step, block, *address)?;
                        self.permuted(r, source, rec, elems.clone(), &perm, level, &fail)?
                    }
                };
                (values.into_iter().map(|v| v * scale).collect(), f)
            }
        };
        let depth_in = match inner {
            Fidelity::Reconstructed { depth } => depth,
            _ => 0,
        };
        let out = lossy::from_f32(rec.dtype, &values);
        if out.len() != len {
            return Err(fail(format!(
                "the rebuild gave {} bytes, the block holds {len}",
                out.len()
            )));
        }
        Ok((
            Arc::new(out),
            Fidelity::Reconstructed {
                depth: level.max(depth_in),
            },
        ))
    }

    /// Elements `elems` of a source with as many elements as `rec`, as f32.
    fn source_values(
        &self,
        r: &ReadTxn,
        source: &SourceAt,
        rec: &VersionRecord,
        elems: Range<u64>,
        level: u8,
    ) -> Result<(Vec<f32>, Fidelity)> {
        let srec = self.version_record(r, &source.tensor, source.step)?;
        if srec.elements != rec.elements || !srec.dtype.is_float() {
            return Err(StoreError::Tier(TierFailure::Reconstruct {
                tensor: source.tensor.clone(),
                step: source.step,
                block: 0,
                reason: format!(
                    "a source of {} {} elements cannot rebuild a tensor of {} elements",
                    srec.elements, srec.dtype, rec.elements
                ),
            }));
        }
        let (bytes, f) = self.read_elems(r, &source.tensor, source.step, &srec, elems, level)?;
        let values = lossy::to_f32(srec.dtype, &bytes).unwrap_or_default();
        Ok((values, f))
    }

    /// Elements `elems` of `left @ right` (2-D sources).
    #[allow(clippy::too_many_arguments)]
    fn low_rank(
        &self,
        r: &ReadTxn,
        left: &SourceAt,
        right: &SourceAt,
        rec: &VersionRecord,
        elems: Range<u64>,
        level: u8,
        fail: &dyn Fn(String) -> StoreError,
    ) -> Result<(Vec<f32>, Fidelity)> {
        let lrec = self.version_record(r, &left.tensor, left.step)?;
        let rrec = self.version_record(r, &right.tensor, right.step)?;
        let (m, k) = match lrec.shape.as_slice() {
            [m, k] => (*m, *k),
            s => return Err(fail(format!("the left factor has shape {s:?}, not 2-D"))),
        };
        let (k2, n) = match rrec.shape.as_slice() {
            [k2, n] => (*k2, *n),
            s => return Err(fail(format!("the right factor has shape {s:?}, not 2-D"))),
        };
        if k != k2 || m.checked_mul(n) != Some(rec.elements) || n == 0 {
            return Err(fail(format!(
                "factors {m}x{k} and {k2}x{n} do not multiply to {} elements",
                rec.elements
            )));
        }
        if rrec.elements > MAX_REBUILD_SOURCE || !lrec.dtype.is_float() || !rrec.dtype.is_float() {
            return Err(fail("the factors are too large or not floats".into()));
        }
        let rows = elems.start / n..(elems.end - 1) / n + 1;
        let (lb, lf) = self.read_elems(
            r,
            &left.tensor,
            left.step,
            &lrec,
            rows.start * k..rows.end * k,
            level,
        )?;
        let (rb, rf) =
            self.read_elems(r, &right.tensor, right.step, &rrec, 0..rrec.elements, level)?;
        let lv = lossy::to_f32(lrec.dtype, &lb).unwrap_or_default();
        let rv = lossy::to_f32(rrec.dtype, &rb).unwrap_or_default();
        let (k, n) = (k as usize, n as usize);
        let mut out = Vec::with_capacity((elems.end - elems.start) as usize);
        for e in elems {
            let (row, col) = (
                (e / n as u64 - rows.start) as usize,
                (e % n as u64) as usize,
            );
            let mut acc = 0f32;
            for j in 0..k {
                acc += lv[row * k + j] * rv[j * n + col];
            }
            out.push(acc);
        }
        Ok((out, lf.worst(rf)))
    }

    /// Elements `elems` of a source with rows permuted by `perm` (u32 LE values).
    #[allow(clippy::too_many_arguments)]
    fn permuted(
        &self,
        r: &ReadTxn,
        source: &SourceAt,
        rec: &VersionRecord,
        elems: Range<u64>,
        perm: &[u8],
        level: u8,
        fail: &dyn Fn(String) -> StoreError,
    ) -> Result<(Vec<f32>, Fidelity)> {
        let rows = rec.shape.first().copied().unwrap_or(1);
        if rows == 0 || perm.len() as u64 != rows * 4 {
            return Err(fail(format!(
                "a permutation of {} bytes for {rows} rows",
                perm.len()
            )));
        }
        if rec.elements > MAX_REBUILD_SOURCE {
            return Err(fail("the source is too large to permute".into()));
        }
        let (all, f) = self.source_values(r, source, rec, 0..rec.elements, level)?;
        let row_len = rec.elements / rows;
        let mut out = Vec::with_capacity((elems.end - elems.start) as usize);
        for e in elems {
            let (row, col) = (e / row_len, e % row_len);
            let at = (row * 4) as usize;
            let src_row = u64::from(u32::from_le_bytes([
                perm[at],
                perm[at + 1],
                perm[at + 2],
                perm[at + 3],
            ]));
            if src_row >= rows {
                return Err(fail(format!("permutation names row {src_row} of {rows}")));
            }
            out.push(all[(src_row * row_len + col) as usize]);
        }
        Ok((out, f))
    }
}

//! [`Store::history`]: an element range of one tensor across its versions, decoding each
//! needed block once per version by walking the chains forward.

use std::ops::{Range, RangeBounds};
use std::sync::Arc;

use crate::engine::{read_blocks, BlockCache, Fetcher, Span, View};
use crate::error::{InvalidInput, NotFound, Result, StoreError};
use crate::store::{contain, Store};
use crate::tensor::{Fidelity, TensorSlice};

/// Smallest and largest private block cache of one history query.
const CACHE_MIN: usize = 16 << 20;
const CACHE_MAX: usize = 1 << 30;

impl Store {
    /// Elements `elems` (flat, row-major) of every version of `name` whose step is in `steps`,
    /// in step order, all from one snapshot.
    ///
    /// Versions are read oldest first through a private cache of decoded blocks, so each
    /// version's blocks decode from its base's blocks, already decoded: one decode per block
    /// per version, not one per link of its chain (only the first version read pays for the
    /// chain under it). A lossless block is decoded only up to the last element asked for
    /// (ADR 0022): an element near a block's start costs next to nothing.
    ///
    /// ```no_run
    /// let store = strata_store::Store::open("run.strata")?;
    /// for (step, slice) in store.history("lm_head.weight", 5..6, 0..=10_000)? {
    ///     println!("{step}: {:?}", slice.to_f64());
    /// }
    /// # Ok::<(), strata_store::StoreError>(())
    /// ```
    ///
    /// # Errors
    /// [`NotFound::Tensor`], [`InvalidInput::Range`] naming a version in `steps` that has
    /// fewer elements than `elems` asks for, and the block errors of [`Store::get`].
    pub fn history(
        &self,
        name: &str,
        elems: Range<u64>,
        steps: impl RangeBounds<u64>,
    ) -> Result<Vec<(u64, TensorSlice)>> {
        contain(&self.path, "reading a history", || {
            let r = self.read()?;
            let all = r.versions_of(name)?;
            if all.is_empty() {
                return Err(StoreError::NotFound(NotFound::Tensor {
                    tensor: name.to_string(),
                }));
            }
            let chosen: Vec<_> = all.into_iter().filter(|(s, _)| steps.contains(s)).collect();
            let mut needed = 0usize;
            for (step, rec) in &chosen {
                if elems.start > elems.end || elems.end > rec.elements {
                    return Err(StoreError::Invalid(InvalidInput::Range {
                        tensor: name.to_string(),
                        step: *step,
                        start: elems.start,
                        end: elems.end,
                        elements: rec.elements,
                    }));
                }
                if elems.start < elems.end {
                    let blocks =
                        (elems.end - 1) / rec.block_elems - elems.start / rec.block_elems + 1;
                    let bytes = blocks * rec.block_elems * rec.dtype.size() as u64;
                    needed = needed.max(usize::try_from(bytes).unwrap_or(CACHE_MAX));
                }
            }
            // The blocks of a version, its base's, and its lineage's keyframe stay in the cache.
            let cache = BlockCache::new(needed.saturating_mul(4).clamp(CACHE_MIN, CACHE_MAX));
            let name_arc: Arc<str> = Arc::from(name);
            let mut out = Vec::with_capacity(chosen.len());
            for (step, rec) in &chosen {
                let size = rec.dtype.size() as u64;
                let mut data = Vec::with_capacity(((elems.end - elems.start) * size) as usize);
                let mut fidelity = Fidelity::Exact;
                if elems.start < elems.end {
                    let span = Span {
                        name: name_arc.clone(),
                        step: *step,
                        rec,
                        blocks: elems.start / rec.block_elems
                            ..(elems.end - 1) / rec.block_elems + 1,
                        upto: Some(elems.end),
                    };
                    let mut fetcher = Fetcher::new(&r, &cache);
                    read_blocks(
                        &mut fetcher,
                        &cache,
                        std::slice::from_ref(&span),
                        |_, job| self.rebuild_block(&r, job, rec, 0),
                        |_, b, bytes, f| {
                            let start = b * rec.block_elems;
                            let lo = elems.start.max(start) - start;
                            let hi = elems.end.min(start + rec.block_len(b)) - start;
                            data.extend_from_slice(
                                &bytes[(lo * size) as usize..(hi * size) as usize],
                            );
                            fidelity = fidelity.worst(f);
                            Ok(())
                        },
                    )?;
                    self.record_read(name, *step, span.blocks.clone());
                }
                out.push((
                    *step,
                    TensorSlice {
                        dtype: rec.dtype,
                        shape: rec.shape.clone(),
                        elems: elems.clone(),
                        data,
                        fidelity,
                    },
                ));
            }
            Ok(out)
        })
    }
}

//! [`Store::history`]: an element range of one tensor across its versions, decoding each
//! needed block once per version by reading each version after its base.

use std::ops::{Range, RangeBounds};
use std::sync::Arc;

use rayon::prelude::*;

use crate::engine::{BlockCache, ReadTxn, View};
use crate::error::{InvalidInput, NotFound, Result, StoreError};
use crate::record::VersionRecord;
use crate::store::{contain, Store};
use crate::tensor::TensorSlice;

/// Smallest and largest private block cache of one history query.
const CACHE_MIN: usize = 16 << 20;
const CACHE_MAX: usize = 1 << 30;

impl Store {
    /// Elements `elems` (flat, row-major) of every version of `name` whose step is in `steps`,
    /// in step order, all from one snapshot.
    ///
    /// Versions are read bases first ([`decode_order`]: oldest first along a forward chain,
    /// newest first along a reverse one) through a private cache of decoded blocks, so each
    /// version's blocks decode from its base's blocks, already decoded: one decode per block
    /// per version, not one per link of its chain (only the first version read pays for the
    /// chain under it). A long history is read in runs of versions, one per thread of the
    /// pool, each through a cache of its own (100 versions: 1.29 to 0.86 ms a version on
    /// 2 cores). A lossless block is decoded only up to the last element asked for
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
            let cache_bytes = needed.saturating_mul(4).clamp(CACHE_MIN, CACHE_MAX);
            let name: Arc<str> = Arc::from(name);
            let read_run = |run: &[&(u64, VersionRecord)]| -> Result<Vec<(u64, TensorSlice)>> {
                let cache = BlockCache::new(cache_bytes);
                run.iter()
                    .map(|(step, rec)| self.history_version(&r, &cache, &name, *step, rec, &elems))
                    .collect()
            };
            let block = chosen
                .first()
                .map_or(0, |(_, rec)| elems.start / rec.block_elems.max(1));
            let ordered: Vec<_> = decode_order(&chosen, block)
                .into_iter()
                .map(|i| &chosen[i])
                .collect();
            let runs = history_runs(ordered.len(), rayon::current_num_threads());
            let mut out = if runs.len() <= 1 {
                read_run(&ordered)?
            } else {
                runs.into_par_iter()
                    .map(|run| read_run(&ordered[run]))
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .flatten()
                    .collect()
            };
            out.sort_unstable_by_key(|(step, _)| *step);
            Ok(out)
        })
    }

    /// Elements `elems` of version `step` of `name`, read through `cache`, where the
    /// version before it left its blocks.
    fn history_version(
        &self,
        r: &ReadTxn,
        cache: &BlockCache,
        name: &Arc<str>,
        step: u64,
        rec: &VersionRecord,
        elems: &Range<u64>,
    ) -> Result<(u64, TensorSlice)> {
        let (data, fidelity) =
            self.read_elems_through(r, cache, name.clone(), step, rec, elems.clone(), 0)?;
        if elems.start < elems.end {
            let blocks = elems.start / rec.block_elems..(elems.end - 1) / rec.block_elems + 1;
            self.record_read(name, step, blocks);
        }
        Ok((
            step,
            TensorSlice {
                dtype: rec.dtype,
                shape: rec.shape.clone(),
                elems: elems.clone(),
                data,
                fidelity,
            },
        ))
    }
}

/// The order to read `versions` (in step order) in: each version after the version its
/// block `block` is a delta against, when that one is among them, so the base's decoded
/// block is in the cache when the version is read. Otherwise step order is kept.
fn decode_order(versions: &[(u64, VersionRecord)], block: u64) -> Vec<usize> {
    let base_of = |i: usize| {
        let b = versions[i].1.blocks.get(usize::try_from(block).ok()?)?;
        let base = b.base?;
        versions.binary_search_by_key(&base, |(step, _)| *step).ok()
    };
    let mut order = Vec::with_capacity(versions.len());
    let mut placed = vec![false; versions.len()];
    let mut walk = Vec::new();
    for i in 0..versions.len() {
        // Up the chain to the first version placed (or none), then down it.
        let mut at = Some(i);
        while let Some(j) = at.filter(|&j| !placed[j]) {
            placed[j] = true;
            walk.push(j);
            at = base_of(j);
        }
        order.extend(walk.drain(..).rev());
    }
    order
}

/// Splits `versions` versions into contiguous runs, one per thread, each read through a
/// cache of its own. A run's first version decodes the chain under it (up to
/// `max_chain` links), so a history is split only when every run has at least
/// [`MIN_RUN`] versions; one run otherwise.
fn history_runs(versions: usize, threads: usize) -> Vec<Range<usize>> {
    let parts = (versions / MIN_RUN).clamp(1, threads.max(1));
    (0..parts)
        .map(|i| i * versions / parts..(i + 1) * versions / parts)
        .collect()
}

/// Fewest versions a thread reads of a split history: its first version's chain costs at
/// most [`strata_codec::chain::DEFAULT_MAX_CHAIN`] decodes more than the versions after it.
const MIN_RUN: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_every_version_once_in_order() {
        for versions in [0, 1, 15, 16, 31, 32, 33, 100, 1000] {
            for threads in [1, 2, 3, 8] {
                let runs = history_runs(versions, threads);
                assert!(!runs.is_empty());
                assert_eq!(runs.first().unwrap().start, 0);
                assert_eq!(runs.last().unwrap().end, versions);
                for w in runs.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                assert!(runs.len() <= threads);
                if runs.len() > 1 {
                    assert!(
                        runs.iter().all(|r| r.len() >= MIN_RUN),
                        "{versions} {threads}"
                    );
                }
            }
        }
        assert_eq!(history_runs(100, 2), vec![0..50, 50..100]);
        assert_eq!(history_runs(31, 2), vec![0..31], "too short to split");
    }

    /// Versions at `steps`, block 0 of each a delta against the step `bases` gives (a
    /// keyframe for `None`).
    fn chain(steps: &[u64], bases: &[Option<u64>]) -> Vec<(u64, VersionRecord)> {
        use crate::record::{BlockRecord, Form};
        steps
            .iter()
            .zip(bases)
            .map(|(&step, &base)| {
                let mut block = BlockRecord::standalone(1, 8, Form::Lossless);
                block.base = base;
                let rec = VersionRecord {
                    dtype: strata_codec::DType::F32,
                    shape: vec![2],
                    elements: 2,
                    block_elems: 2,
                    blocks: vec![block],
                    aged: None,
                    inline: None,
                    content: None,
                };
                (step, rec)
            })
            .collect()
    }

    #[test]
    fn versions_are_read_after_their_bases() {
        let steps = [10, 20, 30, 40, 50];
        let forward = chain(&steps, &[None, Some(10), Some(20), Some(30), Some(40)]);
        assert_eq!(decode_order(&forward, 0), vec![0, 1, 2, 3, 4]);
        let reverse = chain(&steps, &[Some(20), Some(30), Some(40), Some(50), None]);
        assert_eq!(decode_order(&reverse, 0), vec![4, 3, 2, 1, 0]);
        // A forward lineage, then a reverse one under the newest keyframe.
        let mixed = chain(&steps, &[None, Some(10), Some(20), Some(50), None]);
        assert_eq!(decode_order(&mixed, 0), vec![0, 1, 2, 4, 3]);
        // Bases outside the versions asked for, and a block that does not exist.
        let partial = chain(&steps[1..4], &[Some(30), Some(99), Some(50)]);
        assert_eq!(decode_order(&partial, 0), vec![1, 0, 2]);
        assert_eq!(decode_order(&partial, 7), vec![0, 1, 2]);
        assert!(decode_order(&[], 0).is_empty());
    }
}

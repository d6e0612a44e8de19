//! Reading whole versions straight into the caller's buffers ([`read_blocks_into`]): each
//! block decodes into its own place in the destination, in parallel, so a read makes no
//! buffer of the tensor's size and no copy of it (issue 28: a checkpoint loaded into arrays
//! that Python allocated).

use rayon::prelude::*;

use super::blocks::{block_bytes, fetch_next_batch, Fetched, Fetcher, Job, Span};
use super::cache::{Block, BlockCache};
use crate::error::{Corruption, InvalidInput, Result, StoreError};
use crate::tensor::Fidelity;

/// Reads every block of `spans` (whole versions: `upto` unset) into `outs`, one buffer per
/// span of exactly its version's bytes; returns each span's fidelity (its worst block's).
///
/// Blocks are fetched a batch at a time, as [`super::read_blocks`] fetches them; the thread
/// pool decodes a batch, each block into its place in `outs` ([`Job::decode_into`]), while
/// this thread fetches the next. Tier 0 blocks go to `rebuild` and are copied into place.
/// After an error, what `outs` holds is unspecified.
pub(crate) fn read_blocks_into(
    fetcher: &mut Fetcher<'_>,
    cache: &BlockCache,
    spans: &[Span<'_>],
    outs: &mut [&mut [u8]],
    mut rebuild: impl FnMut(usize, &Job) -> Result<(Block, Fidelity)>,
) -> Result<Vec<Fidelity>> {
    let mut places = places(spans, outs)?.into_iter();
    let mut fidelity = vec![Fidelity::Exact; spans.len()];
    let mut todo = spans
        .iter()
        .enumerate()
        .flat_map(|(si, s)| s.blocks.clone().map(move |b| (si, b)))
        .peekable();
    let mut fetch_next = || fetch_next_batch(fetcher, &mut todo, spans, &mut rebuild);
    let mut current = fetch_next()?;
    while let Some(fetched) = current.take() {
        let Fetched { blocks, jobs } = fetched;
        let mut jobs = jobs.into_iter();
        let mut work: Vec<(Job, &mut [u8])> = Vec::with_capacity(blocks.len());
        for f in blocks {
            let span = &spans[f.span];
            let place = places.next().ok_or_else(|| unplaced(span, f.block))?;
            let worst = &mut fidelity[f.span];
            match f.rebuilt {
                Some((block, rebuilt)) => {
                    if block.len() != place.len() {
                        return Err(StoreError::Corrupt(Corruption::BlockMismatch {
                            tensor: span.name.to_string(),
                            step: span.step,
                            block: f.block,
                            reason: format!(
                                "the block is rebuilt as {} bytes, the record expects {}",
                                block.len(),
                                place.len()
                            ),
                        }));
                    }
                    place.copy_from_slice(&block);
                    *worst = worst.worst(rebuilt);
                }
                None => {
                    let job = jobs.next().ok_or_else(|| unplaced(span, f.block))?;
                    *worst = worst.worst(f.fidelity);
                    work.push((job, place));
                }
            }
        }
        let mut decoded: Vec<Result<()>> = Vec::new();
        let mut next = Ok(None);
        rayon::in_place_scope(|s| {
            let decoded = &mut decoded;
            s.spawn(move |_| {
                *decoded = work
                    .into_par_iter()
                    .map(|(job, place)| job.decode_into(cache, place))
                    .collect();
            });
            next = fetch_next();
        });
        decoded.into_iter().collect::<Result<()>>()?;
        current = next?;
    }
    Ok(fidelity)
}

/// Each block's place in `outs`, in the order of the spans' blocks; an error if a buffer is
/// not exactly its version's bytes.
fn places<'o>(spans: &[Span<'_>], outs: &'o mut [&mut [u8]]) -> Result<Vec<&'o mut [u8]>> {
    if outs.len() != spans.len() {
        return Err(StoreError::Invalid(InvalidInput::Options {
            reason: format!("{} buffers for {} tensors", outs.len(), spans.len()),
        }));
    }
    let mut places = Vec::new();
    for (span, out) in spans.iter().zip(outs.iter_mut()) {
        let expected = span.rec.raw_bytes();
        if out.len() as u64 != expected || span.upto.is_some() {
            return Err(StoreError::Invalid(InvalidInput::DataLength {
                tensor: span.name.to_string(),
                step: span.step,
                expected,
                actual: out.len() as u64,
            }));
        }
        let mut rest: &mut [u8] = out;
        for b in span.blocks.clone() {
            let len = block_bytes(span.rec, b).min(rest.len());
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
            places.push(head);
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: span.name.to_string(),
                step: span.step,
                block: span.blocks.end,
                reason: format!(
                    "its blocks leave {} bytes of the version unread",
                    rest.len()
                ),
            }));
        }
    }
    Ok(places)
}

/// A fetched block without a place or a job: the fetch and the spans disagree.
fn unplaced(span: &Span<'_>, block: u64) -> StoreError {
    StoreError::Corrupt(Corruption::BlockMismatch {
        tensor: span.name.to_string(),
        step: span.step,
        block,
        reason: "a block was fetched without its place or job".into(),
    })
}

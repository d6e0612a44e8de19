//! Streaming reads: a checkpoint tensor by tensor ([`CheckpointReader`]) or all at once into
//! the caller's buffers ([`CheckpointReader::read_into`]), and one tensor of any size block by
//! block ([`Store::get_blocks`], [`Store::get_into`]). Blocks decode in parallel batches of
//! bounded size; many small tensors decode together.

use std::collections::VecDeque;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::engine::{read_blocks, read_blocks_into, Fetcher, ReadTxn, Span, View};
use crate::error::{InvalidInput, NotFound, Result, StoreError};
use crate::record::VersionRecord;
use crate::store::{contain, CallerPanic, Store};
use crate::tensor::{Checkpoint, Fidelity, Tensor};
use crate::DType;

/// Reads the checkpoint at one step tensor by tensor, in the order they were saved, all from
/// one snapshot (a checkpoint committed meanwhile, or a retention pass, does not change what
/// it reads). From [`Store::read_checkpoint`].
///
/// It decodes ahead at most [`crate::Options::window_bytes`] of small tensors at once, so
/// memory holds about one window plus the tensor handed out, whatever the checkpoint's size.
///
/// ```no_run
/// let store = strata_store::Store::open("run.strata")?;
/// let mut reader = store.read_checkpoint(1000)?;
/// println!("metadata: {}", reader.metadata());
/// for item in &mut reader {
///     let (name, tensor) = item?;
///     println!("{name}: {:?} {}", tensor.shape, tensor.dtype);
/// }
/// # Ok::<(), strata_store::StoreError>(())
/// ```
pub struct CheckpointReader<'s> {
    store: &'s Store,
    r: ReadTxn,
    step: u64,
    metadata: String,
    todo: VecDeque<String>,
    ready: VecDeque<(String, Tensor)>,
    /// An error was returned: the iteration ends.
    done: bool,
}

impl std::fmt::Debug for CheckpointReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointReader")
            .field("step", &self.step)
            .field("left", &(self.todo.len() + self.ready.len()))
            .finish_non_exhaustive()
    }
}

/// `len` zero bytes, or `None` if they cannot be allocated.
///
/// A length from a version record is checked against the record's blocks, but a record can
/// still name more bytes than memory holds: a failed allocation is refused here instead of
/// aborting the process. The reservation only proves the allocation can be made; `vec!`
/// then allocates zeroed memory, which for large buffers is fresh pages the OS zeroes as
/// they are first written (the decode writes every byte), with no pass of our own.
fn zeroed(len: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(len).ok()?;
    Vec::<u8>::new().try_reserve_exact(len).ok()?;
    Some(vec![0u8; len])
}

/// A tensor a [`CheckpointReader`] has not handed out yet: what a buffer for it must hold
/// ([`CheckpointReader::pending`], [`CheckpointReader::read_into`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTensor {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Bytes of its data (elements x the dtype's size).
    pub bytes: u64,
}

impl PendingTensor {
    /// Version record `rec` of tensor `name`, as a read of it will return it.
    pub(crate) fn of(name: &str, rec: &VersionRecord) -> PendingTensor {
        PendingTensor {
            name: name.to_string(),
            dtype: rec.dtype,
            shape: rec.shape.clone(),
            bytes: rec.raw_bytes(),
        }
    }
}

impl CheckpointReader<'_> {
    /// The checkpoint's step.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The metadata text saved with the checkpoint.
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// Tensors not handed out yet.
    pub fn remaining(&self) -> usize {
        self.todo.len() + self.ready.len()
    }

    /// Every tensor not handed out yet, in order, as the reader's snapshot has it: the
    /// buffers [`CheckpointReader::read_into`] takes. Empty once an error ended the reading.
    ///
    /// # Errors
    /// Database errors, and [`crate::Corruption`] for a damaged version record.
    pub fn pending(&self) -> Result<Vec<PendingTensor>> {
        if self.done {
            return Ok(Vec::new());
        }
        contain(&self.store.path, "listing a checkpoint's tensors", || {
            let mut out = Vec::with_capacity(self.remaining());
            for (name, t) in &self.ready {
                out.push(PendingTensor {
                    name: name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    bytes: t.data.len() as u64,
                });
            }
            for name in &self.todo {
                let rec = self.store.version_record(&self.r, name, self.step)?;
                out.push(PendingTensor::of(name, &rec));
            }
            Ok(out)
        })
    }

    /// Reads every tensor not handed out yet into `outs`, one buffer per tensor in the order
    /// of [`CheckpointReader::pending`], each exactly its bytes; returns each one's
    /// [`Fidelity`]. The reader is at its end after it.
    ///
    /// Each block decodes straight into its place in its buffer, in parallel with the other
    /// blocks of its batch, while the next batch is fetched: the store allocates nothing of
    /// the tensors' size and copies nothing (memory beyond `outs`: the segments of about two
    /// batches). The way to fill arrays that the caller allocated (e.g. the Python package's
    /// NumPy arrays).
    ///
    /// # Errors
    /// [`InvalidInput::Options`] if `outs` does not have one buffer per pending tensor,
    /// [`InvalidInput::DataLength`] if a buffer is not its tensor's size, and the block errors
    /// of [`Store::get`]. After an error the buffers hold unspecified bytes and the reader
    /// yields nothing more.
    pub fn read_into(&mut self, outs: &mut [&mut [u8]]) -> Result<Vec<Fidelity>> {
        let store = self.store;
        let read = contain(&store.path, "reading a checkpoint", || {
            self.read_rest_into(outs)
        });
        self.done = true;
        self.todo.clear();
        self.ready.clear();
        read
    }

    fn read_rest_into(&mut self, outs: &mut [&mut [u8]]) -> Result<Vec<Fidelity>> {
        let store = self.store;
        let left = if self.done { 0 } else { self.remaining() };
        if outs.len() != left {
            return Err(StoreError::Invalid(InvalidInput::Options {
                reason: format!(
                    "{} buffers for the {left} tensors left of checkpoint {}",
                    outs.len(),
                    self.step
                ),
            }));
        }
        let (ready_outs, todo_outs) = outs.split_at_mut(self.ready.len());
        let mut fidelity = Vec::with_capacity(left);
        for ((name, t), out) in self.ready.iter().zip(ready_outs.iter_mut()) {
            if out.len() != t.data.len() {
                return Err(StoreError::Invalid(InvalidInput::DataLength {
                    tensor: name.clone(),
                    step: self.step,
                    expected: t.data.len() as u64,
                    actual: out.len() as u64,
                }));
            }
            out.copy_from_slice(&t.data);
            fidelity.push(t.fidelity);
        }
        let recs = self
            .todo
            .iter()
            .map(|name| store.version_record(&self.r, name, self.step))
            .collect::<Result<Vec<_>>>()?;
        let spans = whole_spans(self.todo.iter(), &recs, self.step);
        let mut fetcher = Fetcher::streaming(&self.r, &store.cache);
        let r = &self.r;
        let read = read_blocks_into(&mut fetcher, &store.cache, &spans, todo_outs, |si, job| {
            store.rebuild_block(r, job, spans[si].rec, 0)
        })?;
        for (name, rec) in self.todo.iter().zip(&recs) {
            store.record_read(name, self.step, 0..rec.blocks.len() as u64);
        }
        fidelity.extend(read);
        Ok(fidelity)
    }

    /// Decodes the next tensors: the first one left, and more while they fit in a window.
    fn fill(&mut self) -> Result<()> {
        let store = self.store;
        let window = store.opts.window_bytes;
        let mut names = Vec::new();
        let mut recs: Vec<VersionRecord> = Vec::new();
        let mut bytes = 0u64;
        while let Some(name) = self.todo.front() {
            let rec = store.version_record(&self.r, name, self.step)?;
            if !names.is_empty() && bytes + rec.raw_bytes() > window {
                break;
            }
            bytes += rec.raw_bytes();
            recs.push(rec);
            names.extend(self.todo.pop_front());
        }
        let spans = whole_spans(names.iter(), &recs, self.step);
        // Each tensor's buffer is allocated whole and each block decodes straight into its
        // place (as `read_into` does), not into a block buffer copied after it.
        let mut data = names
            .iter()
            .zip(&recs)
            .map(|(name, rec)| {
                zeroed(rec.raw_bytes()).ok_or_else(|| StoreError::OutOfMemory {
                    tensor: name.clone(),
                    step: self.step,
                    bytes: rec.raw_bytes(),
                })
            })
            .collect::<Result<Vec<Vec<u8>>>>()?;
        let mut fetcher = Fetcher::streaming(&self.r, &store.cache);
        let r = &self.r;
        let fidelity = {
            let mut outs: Vec<&mut [u8]> = data.iter_mut().map(Vec::as_mut_slice).collect();
            read_blocks_into(&mut fetcher, &store.cache, &spans, &mut outs, |si, job| {
                store.rebuild_block(r, job, spans[si].rec, 0)
            })?
        };
        let out = data.into_iter().zip(fidelity);
        for ((name, rec), (data, fidelity)) in names.into_iter().zip(&recs).zip(out) {
            store.record_read(&name, self.step, 0..rec.blocks.len() as u64);
            self.ready.push_back((
                name,
                Tensor {
                    dtype: rec.dtype,
                    shape: rec.shape.clone(),
                    data,
                    fidelity,
                },
            ));
        }
        Ok(())
    }
}

impl Iterator for CheckpointReader<'_> {
    type Item = Result<(String, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.ready.is_empty() && !self.todo.is_empty() {
            let path = self.store.path.clone();
            if let Err(e) = contain(&path, "reading a checkpoint", || self.fill()) {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.ready.pop_front().map(Ok)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = if self.done { 0 } else { self.remaining() };
        (n, Some(n))
    }
}

/// The type, shape and worth of a tensor read block by block ([`Store::get_blocks`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockRead {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// What the data is worth (the worst block's).
    pub fidelity: Fidelity,
}

impl Store {
    /// Opens the checkpoint at `step` for reading tensor by tensor ([`CheckpointReader`]).
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`] and database errors; the reader returns the block
    /// errors of [`Store::get`].
    pub fn read_checkpoint(&self, step: u64) -> Result<CheckpointReader<'_>> {
        contain(&self.path, "opening a checkpoint", || {
            let r = self.read()?;
            let cp = r
                .checkpoint(step)?
                .ok_or(StoreError::NotFound(NotFound::Checkpoint { step }))?;
            Ok(CheckpointReader {
                store: self,
                r,
                step,
                metadata: cp.metadata,
                todo: cp.tensors.into(),
                ready: VecDeque::new(),
                done: false,
            })
        })
    }

    /// Reads back every tensor of the checkpoint at `step`, all from one snapshot (the
    /// [`CheckpointReader`] collected).
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`], and the errors of [`Store::get`].
    pub fn load_checkpoint(&self, step: u64) -> Result<Checkpoint> {
        contain(&self.path, "loading a checkpoint", || {
            let reader = self.read_checkpoint(step)?;
            let metadata = reader.metadata.clone();
            let tensors = reader.collect::<Result<Vec<_>>>()?;
            Ok(Checkpoint {
                step,
                tensors,
                metadata,
            })
        })
    }

    /// Reads version `step` of `name` block by block, in order, handing `sink` each block's
    /// element range and bytes: a tensor of any size in bounded memory (the blocks of one
    /// batch, at most 64 MiB). A `sink` error stops the read and is returned.
    ///
    /// # Errors
    /// Those of [`Store::get`], and the `sink`'s.
    pub fn get_blocks(
        &self,
        name: &str,
        step: u64,
        mut sink: impl FnMut(Range<u64>, &[u8]) -> Result<()>,
    ) -> Result<BlockRead> {
        contain(&self.path, "reading blocks", || {
            let r = self.read()?;
            let rec = self.version_record(&r, name, step)?;
            let span = Span::whole(Arc::from(name), step, &rec);
            let mut fidelity = Fidelity::Exact;
            let mut fetcher = Fetcher::streaming(&r, &self.cache);
            read_blocks(
                &mut fetcher,
                &self.cache,
                std::slice::from_ref(&span),
                |_, job| self.rebuild_block(&r, job, &rec, 0),
                |_, b, bytes, f| {
                    fidelity = fidelity.worst(f);
                    let start = b * rec.block_elems;
                    let elems = start..start + rec.block_len(b);
                    // The caller's panic is the caller's: handed on, not taken for damage.
                    catch_unwind(AssertUnwindSafe(|| sink(elems, bytes)))
                        .unwrap_or_else(|p| resume_unwind(Box::new(CallerPanic(p))))
                },
            )?;
            self.record_read(name, step, 0..rec.blocks.len() as u64);
            Ok(BlockRead {
                dtype: rec.dtype,
                shape: rec.shape.clone(),
                fidelity,
            })
        })
    }

    /// Reads version `step` of `name` into `out`, which must be exactly its size
    /// (`elements x dtype size` bytes): no allocation of the tensor's size by the store.
    ///
    /// # Errors
    /// [`InvalidInput::DataLength`] if `out` has another length, and those of [`Store::get`].
    pub fn get_into(&self, name: &str, step: u64, out: &mut [u8]) -> Result<BlockRead> {
        contain(&self.path, "reading a tensor", || {
            {
                let r = self.read()?;
                let rec = self.version_record(&r, name, step)?;
                if rec.raw_bytes() != out.len() as u64 {
                    return Err(StoreError::Invalid(InvalidInput::DataLength {
                        tensor: name.to_string(),
                        step,
                        expected: rec.raw_bytes(),
                        actual: out.len() as u64,
                    }));
                }
            }
            let mut at = 0usize;
            let read = self.get_blocks(name, step, |_, bytes| {
                let end = at + bytes.len();
                let dst = out.get_mut(at..end).ok_or_else(|| {
                    StoreError::Invalid(InvalidInput::DataLength {
                        tensor: name.to_string(),
                        step,
                        expected: end as u64,
                        actual: at as u64,
                    })
                })?;
                dst.copy_from_slice(bytes);
                at = end;
                Ok(())
            })?;
            if at != out.len() {
                // The version was replaced by one of another size between the two snapshots.
                return Err(StoreError::Invalid(InvalidInput::DataLength {
                    tensor: name.to_string(),
                    step,
                    expected: at as u64,
                    actual: out.len() as u64,
                }));
            }
            Ok(read)
        })
    }
}

/// One span per tensor covering every block of its version at `step` (a whole-tensor read).
pub(crate) fn whole_spans<'a>(
    names: impl Iterator<Item = &'a String>,
    recs: &'a [VersionRecord],
    step: u64,
) -> Vec<Span<'a>> {
    names
        .zip(recs)
        .map(|(name, rec)| Span::whole(Arc::from(name.as_str()), step, rec))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::zeroed;

    #[test]
    fn zeroed_gives_zeros_or_refuses() {
        assert_eq!(zeroed(0), Some(Vec::new()));
        assert_eq!(zeroed(5), Some(vec![0u8; 5]));
        let big = zeroed(3 << 20).expect("3 MiB");
        assert!(big.len() == 3 << 20 && big.iter().all(|&b| b == 0));
        // More than any address space: refused, not an abort.
        assert_eq!(zeroed(u64::MAX), None);
        assert_eq!(zeroed(1 << 62), None);
    }
}

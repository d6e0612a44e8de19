//! `load_checkpoint`: a checkpoint read into NumPy arrays allocated before the read, the
//! store decoding each block straight into its array ([`CheckpointReader::read_into`]), from a
//! store or from a remote's cache.
//!
//! The arrays need the GIL and the read must not hold it, so the layout comes first (one
//! snapshot, or a remote's manifest), then the arrays, then the read in a second snapshot
//! that checks the layout is still the same (a checkpoint deleted and saved again in between
//! with other shapes is read again, with arrays of the new layout).

use numpy::{PyArray1, PyArrayMethods, PyReadwriteArray1};
use pyo3::exceptions::PyMemoryError;
use pyo3::prelude::*;
use strata_store::{CheckpointReader, PendingTensor};

use crate::{PyStore, PyTensor, StrataError};

/// Where a checkpoint is read from: a store, or a remote through its cache.
pub(crate) trait CheckpointSource {
    /// The tensors of checkpoint `step` and the bytes each reads back as.
    fn layout(&self, py: Python<'_>, step: u64) -> PyResult<Vec<PendingTensor>>;

    /// Runs `read` on a reader of checkpoint `step`, with the GIL released.
    fn read<T: Send>(
        &self,
        py: Python<'_>,
        step: u64,
        read: impl FnOnce(CheckpointReader<'_>) -> strata_store::Result<T> + Send,
    ) -> PyResult<T>;
}

impl CheckpointSource for PyStore {
    fn layout(&self, py: Python<'_>, step: u64) -> PyResult<Vec<PendingTensor>> {
        self.with(py, |s| s.read_checkpoint(step)?.pending())
    }

    fn read<T: Send>(
        &self,
        py: Python<'_>,
        step: u64,
        read: impl FnOnce(CheckpointReader<'_>) -> strata_store::Result<T> + Send,
    ) -> PyResult<T> {
        self.with(py, |s| read(s.read_checkpoint(step)?))
    }
}

/// Layouts read before giving up on a checkpoint that keeps changing under the read.
const TRIES: usize = 4;

/// `(metadata, [(name, (dtype, shape, bytes))])` of the checkpoint at `step` of `source`.
pub(crate) fn load_checkpoint<'py>(
    source: &impl CheckpointSource,
    py: Python<'py>,
    step: u64,
) -> PyResult<(String, Vec<(String, PyTensor<'py>)>)> {
    let mut layout = source.layout(py, step)?;
    // `numpy.empty`: `read_into` writes every byte of every array (each block's place in
    // its buffer, the places covering it whole) or fails, and the arrays of a failed read are
    // dropped here, never handed out. Zeroing them would cost a pass over every byte when the
    // allocator reuses memory (a process that loads again). Called through Python, not the
    // numpy crate's constructors: an allocation that fails is then a `MemoryError`, where
    // those panic on NumPy's NULL.
    let empty = py.import("numpy")?.getattr("empty")?;
    for _ in 0..TRIES {
        let arrays = layout
            .iter()
            .map(|t| {
                let len = usize::try_from(t.bytes).map_err(|_| too_large(t))?;
                Ok(empty.call1((len, "uint8"))?.cast_into::<PyArray1<u8>>()?)
            })
            .collect::<PyResult<Vec<_>>>()?;
        // The metadata, or the layout the second snapshot has instead.
        let read: Result<String, Vec<PendingTensor>> = {
            let mut guards = arrays
                .iter()
                .map(|a| a.try_readwrite())
                .collect::<Result<Vec<PyReadwriteArray1<'_, u8>>, _>>()?;
            let mut outs = guards
                .iter_mut()
                .map(|g| g.as_slice_mut())
                .collect::<Result<Vec<&mut [u8]>, _>>()?;
            let layout = &layout;
            source.read(py, step, move |mut reader| {
                let now = reader.pending()?;
                if now != *layout {
                    return Ok(Err(now));
                }
                reader.read_into(&mut outs)?;
                Ok(Ok(reader.metadata().to_string()))
            })?
        };
        match read {
            Ok(metadata) => {
                let tensors = layout
                    .into_iter()
                    .zip(arrays)
                    .map(|(t, a)| (t.name, (t.dtype.name(), t.shape, a)))
                    .collect();
                return Ok((metadata, tensors));
            }
            Err(now) => layout = now,
        }
    }
    Err(StrataError::new_err(format!(
        "checkpoint {step} changed {TRIES} times while it was being read"
    )))
}

fn too_large(t: &PendingTensor) -> PyErr {
    PyMemoryError::new_err(format!(
        "tensor {:?} needs {} bytes, more than this machine can address",
        t.name, t.bytes
    ))
}

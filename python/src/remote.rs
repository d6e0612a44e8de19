//! Remotes from Python (ADR 0018): push, pull and the remote's upkeep as methods and
//! functions, and `RemoteStore`, a read-only remote with the read methods of `Store`.

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use strata_store::remote::{self, Remote, RemoteError, RemoteStore, DEFAULT_CACHE_BYTES};
use strata_store::{CheckpointReader, PendingTensor, RetainPolicy};

use crate::load::{self, CheckpointSource};
use crate::{
    element_range, fidelity_to_py, store_error_to_py, tensor_to_py, Conflict, Corrupt, PyHistory,
    PyTensor, RemoteFailure,
};

/// The Python exception for a remote error: `Conflict`, `Corrupt` for damaged objects,
/// the store's classes for store errors, `RemoteFailure` otherwise.
pub(crate) fn remote_to_py(e: RemoteError) -> PyErr {
    let msg = crate::message_chain(&e);
    match e {
        RemoteError::Store(e) => store_error_to_py(e),
        RemoteError::Conflict { .. }
        | RemoteError::VersionConflict { .. }
        | RemoteError::Parts { .. } => Conflict::new_err(msg),
        RemoteError::BadSegment { .. } | RemoteError::BadManifest { .. } => Corrupt::new_err(msg),
        _ => RemoteFailure::new_err(msg),
    }
}

fn open_remote(url: &str) -> PyResult<Remote> {
    Remote::open(url).map_err(remote_to_py)
}

/// A push's report as a dict.
pub(crate) fn push_report(py: Python<'_>, r: remote::PushReport) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("steps_sent", r.steps_sent)?;
    d.set_item("steps_present", r.steps_present)?;
    d.set_item("segments_sent", r.segments_sent)?;
    d.set_item("bytes_sent", r.bytes_sent)?;
    d.set_item("segments_present", r.segments_present)?;
    d.set_item("tags_sent", r.tags_sent)?;
    Ok(d)
}

/// A pull's report as a dict.
pub(crate) fn pull_report(py: Python<'_>, r: remote::PullReport) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("steps_received", r.steps_received)?;
    d.set_item("steps_present", r.steps_present)?;
    d.set_item("segments_received", r.segments_received)?;
    d.set_item("bytes_received", r.bytes_received)?;
    d.set_item("tags_received", r.tags_received)?;
    Ok(d)
}

/// Pushes `store`'s checkpoints the remote at `url` lacks.
pub(crate) fn push<'py>(
    py: Python<'py>,
    store: &strata_store::Store,
    url: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let r = py.detach(|| remote::push(store, &open_remote(url)?, None).map_err(remote_to_py))?;
    push_report(py, r)
}

/// Pushes checkpoint `step` of `store` as part `part` of the remote's checkpoint `step`.
pub(crate) fn push_part<'py>(
    py: Python<'py>,
    store: &strata_store::Store,
    url: &str,
    step: u64,
    part: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let r = py.detach(|| {
        remote::push_part(store, &open_remote(url)?, step, part).map_err(remote_to_py)
    })?;
    push_report(py, r)
}

/// Pulls the remote's checkpoints `store` lacks.
pub(crate) fn pull<'py>(
    py: Python<'py>,
    store: &strata_store::Store,
    url: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let r = py.detach(|| remote::pull(&open_remote(url)?, store, None).map_err(remote_to_py))?;
    pull_report(py, r)
}

/// Joins the parts pushed for `step` into one checkpoint with `metadata`; returns its
/// number of tensors.
#[pyfunction]
pub(crate) fn commit_parts(
    py: Python<'_>,
    url: &str,
    step: u64,
    metadata: &str,
) -> PyResult<usize> {
    py.detach(|| remote::commit_parts(&open_remote(url)?, step, metadata).map_err(remote_to_py))
}

/// Deletes the remote's checkpoints the policy does not keep; returns their steps.
#[pyfunction]
#[pyo3(signature = (url, keep_last, keep_every, keep_tagged))]
pub(crate) fn remote_retain(
    py: Python<'_>,
    url: &str,
    keep_last: Option<usize>,
    keep_every: Option<u64>,
    keep_tagged: bool,
) -> PyResult<Vec<u64>> {
    let policy = RetainPolicy {
        keep_last,
        keep_every,
        keep_tagged,
    };
    py.detach(|| remote::retain(&open_remote(url)?, &policy).map_err(remote_to_py))
}

/// Garbage collection of the remote with a grace period of `grace_seconds`.
#[pyfunction]
pub(crate) fn remote_gc<'py>(
    py: Python<'py>,
    url: &str,
    grace_seconds: f64,
) -> PyResult<Bound<'py, PyDict>> {
    if !(grace_seconds.is_finite() && grace_seconds >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "grace_seconds {grace_seconds} must be a number of seconds"
        )));
    }
    let grace = std::time::Duration::from_secs_f64(grace_seconds);
    let r = py.detach(|| remote::gc(&open_remote(url)?, grace).map_err(remote_to_py))?;
    let d = PyDict::new(py);
    d.set_item("segments_deleted", r.segments_deleted)?;
    d.set_item("bytes_deleted", r.bytes_deleted)?;
    d.set_item("segments_kept", r.segments_kept)?;
    d.set_item("segments_young", r.segments_young)?;
    d.set_item("manifests_deleted", r.manifests_deleted)?;
    Ok(d)
}

/// A remote opened for reading, through a local cache bounded in bytes.
#[pyclass(frozen, module = "strata._native", name = "RemoteStore")]
pub(crate) struct PyRemoteStore {
    inner: RemoteStore,
}

impl PyRemoteStore {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&RemoteStore) -> Result<T, RemoteError> + Send,
    ) -> PyResult<T> {
        py.detach(|| f(&self.inner).map_err(remote_to_py))
    }
}

impl CheckpointSource for PyRemoteStore {
    fn layout(&self, py: Python<'_>, step: u64) -> PyResult<Vec<PendingTensor>> {
        self.with(py, |r| r.pending(step))
    }

    fn read<T: Send>(
        &self,
        py: Python<'_>,
        step: u64,
        read: impl FnOnce(CheckpointReader<'_>) -> strata_store::Result<T> + Send,
    ) -> PyResult<T> {
        self.with(py, |r| {
            r.with_checkpoint(step, |cache| read(cache.read_checkpoint(step)?))
        })
    }
}

#[pymethods]
impl PyRemoteStore {
    /// Opens the remote at `url` with a cache of at most `cache_bytes` in `cache_dir`.
    #[new]
    #[pyo3(signature = (url, cache_dir, cache_bytes=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        cache_dir: std::path::PathBuf,
        cache_bytes: Option<u64>,
    ) -> PyResult<Self> {
        let inner = py.detach(|| {
            RemoteStore::open(
                open_remote(url)?,
                &cache_dir,
                cache_bytes.unwrap_or(DEFAULT_CACHE_BYTES),
            )
            .map_err(remote_to_py)
        })?;
        Ok(PyRemoteStore { inner })
    }

    /// The remote's URL.
    #[getter]
    fn url(&self) -> &str {
        self.inner.remote().url()
    }

    /// Requests and bytes moved so far: `{"requests", "bytes_in", "bytes_out"}`.
    fn counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.inner.counts();
        let d = PyDict::new(py);
        d.set_item("requests", c.requests)?;
        d.set_item("bytes_in", c.bytes_in)?;
        d.set_item("bytes_out", c.bytes_out)?;
        Ok(d)
    }

    /// `(dtype, shape, bytes)` of version `step` of `name`.
    fn get<'py>(&self, py: Python<'py>, name: &str, step: u64) -> PyResult<PyTensor<'py>> {
        let t = self.with(py, |r| r.get(name, step))?;
        Ok(tensor_to_py(py, t))
    }

    /// `((dtype, shape, bytes), fidelity)` of version `step` of `name`.
    fn get_with_fidelity<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        step: u64,
    ) -> PyResult<(PyTensor<'py>, Bound<'py, PyDict>)> {
        let t = self.with(py, |r| r.get(name, step))?;
        let f = fidelity_to_py(py, t.fidelity)?;
        Ok((tensor_to_py(py, t), f))
    }

    /// `(step, (dtype, shape, bytes))` of the latest version of `name` at or before `step`.
    fn get_at<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        step: u64,
    ) -> PyResult<(u64, PyTensor<'py>)> {
        let (found, t) = self.with(py, |r| r.get_at(name, step))?;
        Ok((found, tensor_to_py(py, t)))
    }

    /// `(dtype, shape)` of version `step` of `name`, from its manifest.
    fn info(&self, py: Python<'_>, name: &str, step: u64) -> PyResult<(&'static str, Vec<u64>)> {
        let (dtype, shape) = self.with(py, |r| r.version_shape(name, step))?;
        Ok((dtype.name(), shape))
    }

    /// Bytes of the flat elements `start..end` of version `step` of `name`.
    fn get_range<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        step: u64,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let elems = element_range(start, end)?;
        let s = self.with(py, |r| r.get_range(name, step, elems))?;
        Ok(PyArray1::from_vec(py, s.data))
    }

    /// `(metadata, [(name, (dtype, shape, bytes))])` of the checkpoint at `step`: the
    /// checkpoint is fetched into the cache, then read as from a store (arrays allocated
    /// first, every block decoded straight into them with the GIL released).
    fn load_checkpoint<'py>(
        &self,
        py: Python<'py>,
        step: u64,
    ) -> PyResult<(String, Vec<(String, PyTensor<'py>)>)> {
        load::load_checkpoint(self, py, step)
    }

    /// `(metadata, [tensor names])` of the checkpoint at `step`.
    fn checkpoint_info(&self, py: Python<'_>, step: u64) -> PyResult<(String, Vec<String>)> {
        self.with(py, |r| {
            Ok((
                r.checkpoint_metadata(step)?.to_string(),
                r.checkpoint_tensors(step)?.to_vec(),
            ))
        })
    }

    /// Steps of every checkpoint, ascending.
    fn checkpoints(&self) -> Vec<u64> {
        self.inner.checkpoints()
    }

    /// Names of every tensor.
    fn tensors(&self) -> Vec<String> {
        self.inner.tensors()
    }

    /// Steps of every version of `name`, ascending.
    fn versions(&self, name: &str) -> Vec<u64> {
        self.inner.versions(name)
    }

    /// Tags as `(tag, step)` pairs.
    fn tags(&self) -> Vec<(String, u64)> {
        self.inner.tags().to_vec()
    }

    /// Elements `start..end` of every version of `name` with a step in `first..=last`.
    fn history<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        start: u64,
        end: u64,
        first: u64,
        last: u64,
    ) -> PyResult<PyHistory<'py>> {
        let elems = element_range(start, end)?;
        let rows = self.with(py, |r| r.history(name, elems, first..=last))?;
        Ok(crate::history_to_py(py, rows))
    }

    /// Writes the checkpoint at `step` as a safetensors file; returns `(tensors, file bytes)`.
    fn export_safetensors(
        &self,
        py: Python<'_>,
        step: u64,
        path: std::path::PathBuf,
    ) -> PyResult<(usize, u64)> {
        let r = self.with(py, |s| s.export_safetensors(step, &path))?;
        Ok((r.tensors, r.file_bytes))
    }

    fn __repr__(&self) -> String {
        format!(
            "<strata._native.RemoteStore {:?}>",
            self.inner.remote().url()
        )
    }
}

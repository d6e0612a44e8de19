//! `strata._native`: the native half of the `strata` Python package (ADR 0015).
//!
//! A thin layer over [`strata_store::Store`]; everything users call is in the Python
//! package (`python/strata/`), which converts NumPy arrays and torch tensors to the flat
//! `uint8` arrays this module takes and returns:
//!
//! - **Input** is a 1-D C-contiguous `uint8` NumPy array per tensor (the Python side makes it
//!   with `reshape(-1).view(np.uint8)`, no copy), read in place: the store encodes straight
//!   from the array's memory.
//! - **Output** is a 1-D `uint8` NumPy array that owns the bytes: a `Vec<u8>` of the
//!   tensor's size that [`Store::get_into`] filled, or one the store's checkpoint reader
//!   decoded, handed to NumPy as the array's memory (`PyArray1::from_vec`, no copy).
//! - The GIL is released (`Python::detach`) around every store call: encode, decode, I/O.
//! - Errors are Python exceptions: [`StrataError`] and its subclasses by the kind of the
//!   store's error ([`strata_store::StoreError`], ADR 0008), carrying its message. Nothing here
//!   panics on any input: no indexing, no unwrap.

use numpy::{PyArray1, PyReadonlyArray1};
use parking_lot::RwLock;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
mod load;
mod remote;

use strata_store::{
    AgePolicy, AgeRule, DType, Fidelity, OpenError, Options, Residual, RetainPolicy, Role,
    RoleRule, Store, StoreError, Tensor, TensorRef, Tier, TierPolicy,
};

create_exception!(
    strata,
    StrataError,
    PyException,
    "Base class of every error the Strata store reports."
);
create_exception!(
    strata,
    NotFound,
    StrataError,
    "A tensor, version, checkpoint, tag or policy rule that does not exist."
);
create_exception!(
    strata,
    InvalidInput,
    StrataError,
    "Input the store refused; nothing was changed."
);
create_exception!(
    strata,
    CheckpointExists,
    InvalidInput,
    "A checkpoint already exists at the step being saved; nothing was changed."
);
create_exception!(
    strata,
    Corrupt,
    StrataError,
    "Damaged stored data (a checksum, record, segment or chain does not hold)."
);
create_exception!(
    strata,
    InUse,
    StrataError,
    "The store file is open in another process or handle."
);
create_exception!(
    strata,
    RemoteFailure,
    StrataError,
    "A remote (object storage) could not be used: a bad URL, missing credentials, a failed request."
);
create_exception!(
    strata,
    Conflict,
    RemoteFailure,
    "The remote holds a different checkpoint (or version) at a step being pushed or pulled."
);
create_exception!(
    strata,
    TierError,
    StrataError,
    "A tiered read or operation that cannot give what was asked."
);

/// The Python exception for a store error: the class by kind, the store's message.
fn to_py(e: StoreError) -> PyErr {
    store_error_to_py(e)
}

/// [`to_py`], by value (remote errors carry store errors).
pub(crate) fn store_error_to_py(e: StoreError) -> PyErr {
    let msg = message_chain(&e);
    match e {
        StoreError::Remote(r) => remote::remote_to_py(*r),
        ref e => to_py_kind(e, msg),
    }
}

/// What the `InUse` error tells the user to do.
const IN_USE_HINT: &str =
    ": one process (and one handle) writes a store at a time; close the other \
handle (`store.close()`, or open it in a `with` block), or open this one read-only \
(`strata.open_read_only(path)`) to read beside the writer";

fn to_py_kind(e: &StoreError, msg: String) -> PyErr {
    match e {
        StoreError::Open(OpenError::InUse { .. }) => InUse::new_err(format!("{msg}{IN_USE_HINT}")),
        StoreError::Open(OpenError::NotFound { .. }) => NotFound::new_err(msg),
        StoreError::Invalid(strata_store::InvalidInput::CheckpointExists { .. }) => {
            CheckpointExists::new_err(msg)
        }
        _ if e.is_corrupt() => Corrupt::new_err(msg),
        StoreError::NotFound(_) => NotFound::new_err(msg),
        StoreError::Invalid(_) => InvalidInput::new_err(msg),
        StoreError::Tier(_) => TierError::new_err(msg),
        StoreError::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        _ => StrataError::new_err(msg),
    }
}

/// The error's message followed by its sources' (the store's transparent variants already
/// include their inner message once).
pub(crate) fn message_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

fn closed() -> PyErr {
    StrataError::new_err("the store is closed")
}

/// The store's dtype of a lower-case name (`"f32"`, `"bf16"`, ... as [`DType::name`]).
fn parse_dtype(name: &str) -> PyResult<DType> {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| PyTypeError::new_err(format!("unsupported dtype {name:?}")))
}

fn parse_tier(name: &str) -> PyResult<Tier> {
    Ok(match name {
        "exact" => Tier::Exact,
        "hot8" => Tier::Hot8,
        "warm7" => Tier::Warm7,
        "warm5" => Tier::Warm5,
        "cold3" => Tier::Cold3,
        "absent" => Tier::Absent,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown tier {name:?} (exact, hot8, warm7, warm5, cold3, absent)"
            )))
        }
    })
}

fn parse_residual(text: &str) -> PyResult<Residual> {
    match text {
        "none" => Ok(Residual::None),
        "exact" => Ok(Residual::Exact),
        _ => {
            let fraction = text
                .strip_prefix("topk:")
                .and_then(|f| f.parse::<f32>().ok())
                .filter(|f| (0.0..=1.0).contains(f))
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "unknown residual {text:?} (none, exact, topk:F with 0 <= F <= 1)"
                    ))
                })?;
            Ok(Residual::TopK { fraction })
        }
    }
}

/// Byte length of a tensor of `shape` and `dtype`, or an error if it overflows.
fn byte_len(dtype: DType, shape: &[u64]) -> PyResult<usize> {
    shape
        .iter()
        .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| PyValueError::new_err(format!("shape {shape:?} is too large")))
}

/// One tensor handed to Python: dtype name, shape, bytes as a `uint8` array.
pub(crate) type PyTensor<'py> = (&'static str, Vec<u64>, Bound<'py, PyArray1<u8>>);

/// A history query's answer: dtype name, and each version's step and element bytes.
pub(crate) type PyHistory<'py> = (&'static str, Vec<(u64, Bound<'py, PyArray1<u8>>)>);

/// Hands a decoded tensor's bytes to NumPy without copying them.
pub(crate) fn tensor_to_py(py: Python<'_>, t: Tensor) -> PyTensor<'_> {
    (t.dtype.name(), t.shape, PyArray1::from_vec(py, t.data))
}

/// The element range `start..end` a Python call asked for, refused when reversed.
pub(crate) fn element_range(start: u64, end: u64) -> PyResult<std::ops::Range<u64>> {
    if end < start {
        return Err(PyValueError::new_err(format!(
            "element range {start}..{end} is reversed"
        )));
    }
    Ok(start..end)
}

/// A history query's rows handed to Python (the dtype of the first row, `u8` if none).
pub(crate) fn history_to_py(
    py: Python<'_>,
    rows: Vec<(u64, strata_store::TensorSlice)>,
) -> PyHistory<'_> {
    let dtype = rows.first().map(|(_, sl)| sl.dtype.name()).unwrap_or("u8");
    let rows = rows
        .into_iter()
        .map(|(step, sl)| (step, PyArray1::from_vec(py, sl.data)))
        .collect();
    (dtype, rows)
}

/// A Strata store, open until `close()` (then every call raises `StrataError`).
#[pyclass(frozen, module = "strata._native", name = "Store")]
struct PyStore {
    /// `None` once closed. Reads and writes take the lock shared (the store serializes
    /// writes itself); `retain` (which compacts) and `close` take it exclusively.
    inner: RwLock<Option<Store>>,
    path: String,
}

impl PyStore {
    /// Runs `f` on the open store with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Store) -> strata_store::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let guard = self.inner.read();
            let store = guard.as_ref().ok_or_else(closed)?;
            f(store).map_err(to_py)
        })
    }

    /// Reads version `step` of `name` into a new buffer of its size, which becomes the
    /// NumPy array's memory (no second copy). The buffer is reserved fallibly, so a tensor too
    /// large for memory is a `MemoryError`, not an abort.
    fn read_into<'py>(&self, py: Python<'py>, name: &str, step: u64) -> PyResult<PyTensor<'py>> {
        Ok(self.read_with_fidelity(py, name, step)?.0)
    }

    /// [`PyStore::read_into`] and what the data is worth ([`Fidelity`]).
    fn read_with_fidelity<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        step: u64,
    ) -> PyResult<(PyTensor<'py>, Fidelity)> {
        let info = self.with(py, |s| s.version_info(name, step))?;
        let len = byte_len(info.dtype, &info.shape)?;
        let (data, fidelity) = py.detach(|| {
            let mut data = Vec::new();
            data.try_reserve_exact(len).map_err(|_| {
                PyMemoryError::new_err(format!("tensor {name:?} needs {len} bytes"))
            })?;
            data.resize(len, 0);
            let guard = self.inner.read();
            let store = guard.as_ref().ok_or_else(closed)?;
            let read = store.get_into(name, step, &mut data).map_err(to_py)?;
            Ok::<_, PyErr>((data, read.fidelity))
        })?;
        Ok((
            (info.dtype.name(), info.shape, PyArray1::from_vec(py, data)),
            fidelity,
        ))
    }
}

/// A [`Fidelity`] as a dict: `{"kind": "exact"}`, `{"kind": "aged", "rel_error": e}`,
/// `{"kind": "bounded", "bits": b,
/// "max_rel_error": e}`, `{"kind": "reconstructed", "depth": d}` or `{"kind": "zeros"}`.
pub(crate) fn fidelity_to_py(py: Python<'_>, f: Fidelity) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    match f {
        Fidelity::Exact => d.set_item("kind", "exact")?,
        Fidelity::Aged { rel_error } => {
            d.set_item("kind", "aged")?;
            d.set_item("rel_error", rel_error)?;
        }
        Fidelity::Bounded {
            bits,
            max_rel_error,
        } => {
            d.set_item("kind", "bounded")?;
            d.set_item("bits", bits)?;
            d.set_item("max_rel_error", max_rel_error)?;
        }
        Fidelity::Reconstructed { depth } => {
            d.set_item("kind", "reconstructed")?;
            d.set_item("depth", depth)?;
        }
        Fidelity::Zeros => d.set_item("kind", "zeros")?,
    }
    Ok(d)
}

#[pymethods]
impl PyStore {
    /// Opens (or creates) the store file at `path`; options left `None` keep the store's
    /// defaults ([`strata_store::Options`]).
    ///
    /// With `read_only`, opens an existing store to read beside its writer
    /// ([`Store::open_read_only_with`]): each read sees the writer's latest commit, and writes
    /// raise `InvalidInput`.
    #[new]
    // Python's keyword options, one argument each (PyO3 maps them by name).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path, *, block_bytes=None, max_chain=None, cache_bytes=None,
        db_cache_bytes=None, window_bytes=None, upload=None, read_only=false,
        newest_keyframe=None))]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        block_bytes: Option<u64>,
        max_chain: Option<u8>,
        cache_bytes: Option<usize>,
        db_cache_bytes: Option<usize>,
        window_bytes: Option<u64>,
        upload: Option<String>,
        read_only: bool,
        newest_keyframe: Option<bool>,
    ) -> PyResult<Self> {
        let d = if read_only {
            Options::for_reading()
        } else {
            Options::default()
        };
        let opts = Options {
            block_bytes: block_bytes.unwrap_or(d.block_bytes),
            max_chain: max_chain.unwrap_or(d.max_chain),
            cache_bytes: cache_bytes.unwrap_or(d.cache_bytes),
            db_cache_bytes: db_cache_bytes.unwrap_or(d.db_cache_bytes),
            window_bytes: window_bytes.unwrap_or(d.window_bytes),
            newest_keyframe: newest_keyframe.unwrap_or(d.newest_keyframe),
            upload: upload.map(strata_store::remote::UploadOptions::new),
            ..d
        };
        let shown = path.display().to_string();
        let store = py
            .detach(|| {
                if read_only {
                    Store::open_read_only_with(&path, opts)
                } else {
                    Store::open_with(&path, opts)
                }
            })
            .map_err(to_py)?;
        Ok(PyStore {
            inner: RwLock::new(Some(store)),
            path: shown,
        })
    }

    /// The store file.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Whether the store was opened read-only.
    #[getter]
    fn read_only(&self) -> PyResult<bool> {
        let guard = self.inner.read();
        Ok(guard.as_ref().ok_or_else(closed)?.is_read_only())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().is_none()
    }

    /// Closes the file (waits for calls in progress); later calls raise `StrataError`.
    fn close(&self, py: Python<'_>) {
        py.detach(|| drop(self.inner.write().take()));
    }

    /// Saves a checkpoint atomically from `(name, dtype, shape, uint8 array)` items,
    /// streamed through the store's checkpoint writer with the GIL released.
    fn save_checkpoint(
        &self,
        py: Python<'_>,
        step: u64,
        items: Vec<(String, String, Vec<u64>, PyReadonlyArray1<'_, u8>)>,
        metadata: &str,
    ) -> PyResult<()> {
        let mut tensors = Vec::with_capacity(items.len());
        for (name, dtype, shape, arr) in &items {
            let dtype = parse_dtype(dtype)?;
            let bytes = arr.as_slice().map_err(|_| {
                PyValueError::new_err(format!("tensor {name:?}: the array is not contiguous"))
            })?;
            tensors.push((
                name.as_str(),
                TensorRef {
                    dtype,
                    shape,
                    bytes,
                },
            ));
        }
        self.with(py, |s| s.save_checkpoint(step, &tensors, metadata))
    }

    /// Saves the checkpoint at `step` atomically from the checkpoints of other stores:
    /// `sources` are `(store path, step)`, each opened read-only and copied tensor by tensor
    /// in its saved order, so memory holds one batch of decoded blocks and the write window,
    /// whatever the checkpoint's size (a source is read once, front to back: it gets no block
    /// cache). Names must not repeat across the sources.
    fn save_checkpoint_from(
        &self,
        py: Python<'_>,
        step: u64,
        sources: Vec<(std::path::PathBuf, u64)>,
        metadata: &str,
    ) -> PyResult<usize> {
        let read_once = Options {
            cache_bytes: 0,
            ..Options::for_reading()
        };
        self.with(py, |s| {
            let mut w = s.begin_checkpoint(step, metadata)?;
            let mut copied = 0;
            for (path, source_step) in &sources {
                let source = Store::open_read_only_with(path, read_once.clone())?;
                for item in source.read_checkpoint(*source_step)? {
                    let (name, tensor) = item?;
                    w.put(&name, &tensor.as_ref())?;
                    copied += 1;
                }
            }
            w.commit()?;
            Ok(copied)
        })
    }

    /// Writes one version of one tensor (outside any checkpoint).
    fn put(
        &self,
        py: Python<'_>,
        name: &str,
        step: u64,
        dtype: &str,
        shape: Vec<u64>,
        data: PyReadonlyArray1<'_, u8>,
    ) -> PyResult<()> {
        let dtype = parse_dtype(dtype)?;
        let bytes = data
            .as_slice()
            .map_err(|_| PyValueError::new_err("the array is not contiguous"))?;
        self.with(py, |s| {
            s.put(
                name,
                step,
                &TensorRef {
                    dtype,
                    shape: &shape,
                    bytes,
                },
            )
        })
    }

    /// `(dtype, shape, bytes)` of version `step` of `name`.
    fn get<'py>(&self, py: Python<'py>, name: &str, step: u64) -> PyResult<PyTensor<'py>> {
        self.read_into(py, name, step)
    }

    /// `((dtype, shape, bytes), fidelity)` of version `step` of `name`: the fidelity as a dict
    /// (`kind` "exact", "bounded" with `bits` and `max_rel_error`, "reconstructed" with
    /// `depth`, or "zeros").
    fn get_with_fidelity<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        step: u64,
    ) -> PyResult<(PyTensor<'py>, Bound<'py, PyDict>)> {
        let (t, f) = self.read_with_fidelity(py, name, step)?;
        Ok((t, fidelity_to_py(py, f)?))
    }

    /// `(step, dtype, shape, bytes)` of the latest version of `name` at or before `step`.
    fn get_at<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        step: u64,
    ) -> PyResult<(u64, PyTensor<'py>)> {
        let found = self.with(py, |s| s.step_at_or_before(name, step))?;
        Ok((found, self.read_into(py, name, found)?))
    }

    /// `(dtype, shape)` of version `step` of `name`, without reading data.
    fn info(&self, py: Python<'_>, name: &str, step: u64) -> PyResult<(&'static str, Vec<u64>)> {
        let info = self.with(py, |s| s.version_info(name, step))?;
        Ok((info.dtype.name(), info.shape))
    }

    /// Bytes of the flat elements `start..end` of version `step` of `name`; only the blocks
    /// holding them are decoded.
    fn get_range<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        step: u64,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let elems = element_range(start, end)?;
        let slice = self.with(py, |s| s.get_range(name, step, elems))?;
        Ok(PyArray1::from_vec(py, slice.data))
    }

    /// `(metadata, [(name, dtype, shape, bytes)])` of the checkpoint at `step`: the arrays
    /// are allocated first (NumPy's, not zeroed) and the store decodes every block straight
    /// into them, in parallel, with the GIL released
    /// ([`strata_store::CheckpointReader::read_into`]): no copy, no Python work per block.
    fn load_checkpoint<'py>(
        &self,
        py: Python<'py>,
        step: u64,
    ) -> PyResult<(String, Vec<(String, PyTensor<'py>)>)> {
        load::load_checkpoint(self, py, step)
    }

    /// `(metadata, [tensor names])` of the checkpoint at `step`.
    fn checkpoint_info(&self, py: Python<'_>, step: u64) -> PyResult<(String, Vec<String>)> {
        let info = self.with(py, |s| s.checkpoint_info(step))?;
        Ok((info.metadata, info.tensors))
    }

    /// Steps of every checkpoint, ascending.
    fn checkpoints(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with(py, |s| s.checkpoints())
    }

    /// Names of every tensor.
    fn tensors(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with(py, |s| s.tensors())
    }

    /// Steps of every version of `name`, ascending.
    fn versions(&self, py: Python<'_>, name: &str) -> PyResult<Vec<u64>> {
        self.with(py, |s| {
            Ok(s.versions(name)?.into_iter().map(|v| v.step).collect())
        })
    }

    /// Tags as `(tag, step)` pairs.
    fn tags(&self, py: Python<'_>) -> PyResult<Vec<(String, u64)>> {
        self.with(py, |s| s.tags())
    }

    /// Names the checkpoint at `step` `tag`.
    fn tag(&self, py: Python<'_>, tag: &str, step: u64) -> PyResult<()> {
        self.with(py, |s| s.tag(tag, step))
    }

    /// Removes a tag.
    fn untag(&self, py: Python<'_>, tag: &str) -> PyResult<()> {
        self.with(py, |s| s.untag(tag))
    }

    /// Deletes version `step` of `name`.
    fn delete(&self, py: Python<'_>, name: &str, step: u64) -> PyResult<()> {
        self.with(py, |s| s.delete(name, step))
    }

    /// Deletes the checkpoint at `step` with its tensor versions and tags, in one transaction.
    /// Returns the number of versions deleted.
    fn delete_checkpoint(&self, py: Python<'_>, step: u64) -> PyResult<usize> {
        self.with(py, |s| s.delete_checkpoint(step))
    }

    /// Elements `start..end` of every version of `name` with a step in `first..=last`:
    /// `(dtype, [(step, bytes)])`.
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
        let rows = self.with(py, |s| s.history(name, elems, first..=last))?;
        Ok(history_to_py(py, rows))
    }

    /// Keeps the `keep_last` latest checkpoints, those whose step is a multiple of
    /// `keep_every`, and (if `keep_tagged`) the tagged ones; deletes the rest and compacts.
    #[pyo3(signature = (keep_last, keep_every, keep_tagged))]
    fn retain<'py>(
        &self,
        py: Python<'py>,
        keep_last: Option<usize>,
        keep_every: Option<u64>,
        keep_tagged: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let policy = RetainPolicy {
            keep_last,
            keep_every,
            keep_tagged,
        };
        let report = py.detach(|| {
            let mut guard = self.inner.write();
            let store = guard.as_mut().ok_or_else(closed)?;
            store.retain(&policy).map_err(to_py)
        })?;
        let d = PyDict::new(py);
        d.set_item("kept", report.kept)?;
        d.set_item("removed", report.removed)?;
        d.set_item("versions_removed", report.versions_removed)?;
        d.set_item("file_bytes_before", report.file_bytes_before)?;
        d.set_item("file_bytes_after", report.file_bytes_after)?;
        d.set_item("compacted", report.compacted)?;
        d.set_item("compaction_deferred", report.compaction_deferred)?;
        Ok(d)
    }

    /// Ages old checkpoints ([`Store::age`]), or with `dry_run` measures what it would do
    /// and rolls it back ([`Store::age_dry_run`]): `rules` are (pattern, budget or None for
    /// exact), first match first.
    #[pyo3(signature = (keep_exact_last, keep_exact_every, keep_tagged, budget, update_budget, rules, steps, dry_run, first_moment_budget, second_moment_budget, roles))]
    #[allow(clippy::too_many_arguments)]
    fn age<'py>(
        &self,
        py: Python<'py>,
        keep_exact_last: usize,
        keep_exact_every: Option<u64>,
        keep_tagged: bool,
        budget: f64,
        update_budget: Option<f64>,
        rules: Vec<(String, Option<f64>)>,
        steps: Option<Vec<u64>>,
        dry_run: bool,
        first_moment_budget: Option<f64>,
        second_moment_budget: Option<f64>,
        roles: Vec<(String, String)>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let roles = roles
            .into_iter()
            .map(|(pattern, role)| {
                Role::parse(&role).map(|role| RoleRule { pattern, role }).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "unknown role {role:?}: one of weight, first-moment, second-moment, counter, state"
                    ))
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let policy = AgePolicy {
            keep_exact_last,
            keep_exact_every,
            keep_tagged,
            budget,
            update_budget,
            rules: rules
                .into_iter()
                .map(|(pattern, budget)| AgeRule { pattern, budget })
                .collect(),
            steps,
            first_moment_budget,
            second_moment_budget,
            roles,
            ..AgePolicy::default()
        };
        let r = py.detach(|| {
            let mut guard = self.inner.write();
            let store = guard.as_mut().ok_or_else(closed)?;
            if dry_run {
                store.age_dry_run(&policy).map_err(to_py)
            } else {
                store.age(&policy).map_err(to_py)
            }
        })?;
        let d = PyDict::new(py);
        d.set_item("aged", r.aged)?;
        d.set_item("kept", r.kept)?;
        d.set_item("versions_aged", r.versions_aged)?;
        d.set_item("versions_exact", r.versions_exact)?;
        d.set_item("blocks_unmet", r.blocks_unmet)?;
        d.set_item("max_rel_error", r.max_rel_error)?;
        d.set_item("stored_bytes_before", r.stored_bytes_before)?;
        d.set_item("stored_bytes_after", r.stored_bytes_after)?;
        d.set_item("file_bytes_before", r.file_bytes_before)?;
        d.set_item("file_bytes_after", r.file_bytes_after)?;
        d.set_item("compacted", r.compacted)?;
        d.set_item("compaction_deferred", r.compaction_deferred)?;
        d.set_item("dry_run", dry_run)?;
        Ok(d)
    }

    /// Compacts the file (moves live pages down, truncates the free tail): it shrinks after
    /// deletes and after the growth slack of large writes. Waits for calls in progress.
    /// Returns whether anything moved.
    fn compact(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| {
            let mut guard = self.inner.write();
            let store = guard.as_mut().ok_or_else(closed)?;
            store.compact().map_err(to_py)
        })
    }

    /// Saves a safetensors file as the checkpoint at `step`; returns `(tensors, raw bytes)`.
    fn import_safetensors(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        step: u64,
    ) -> PyResult<(usize, u64)> {
        let r = self.with(py, |s| s.import_safetensors(&path, step))?;
        Ok((r.tensors, r.raw_bytes))
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

    /// Sets the tier policy of tensors whose names match `pattern`: `tier` is where they
    /// start ("exact" for lossless), `pinned` keeps them there, `residual` is "none",
    /// "exact" or "topk:F".
    #[pyo3(signature = (pattern, tier, residual, pinned))]
    fn set_policy(
        &self,
        py: Python<'_>,
        pattern: &str,
        tier: &str,
        residual: &str,
        pinned: bool,
    ) -> PyResult<()> {
        let tier = parse_tier(tier)?;
        let residual = parse_residual(residual)?;
        let policy = if tier == Tier::Exact {
            TierPolicy::exact()
        } else if pinned {
            TierPolicy::pinned(tier)
        } else {
            TierPolicy::tiered(tier)
        }
        .with_residual(residual);
        self.with(py, |s| s.set_policy(pattern, policy))
    }

    /// Removes the policy rule of `pattern`.
    fn remove_policy(&self, py: Python<'_>, pattern: &str) -> PyResult<()> {
        self.with(py, |s| s.remove_policy(pattern))
    }

    /// One tier maintenance pass at `now_ms` (the store's clock when `None`).
    #[pyo3(signature = (now_ms=None))]
    fn maintain<'py>(&self, py: Python<'py>, now_ms: Option<u64>) -> PyResult<Bound<'py, PyDict>> {
        let before = self.with(py, |s| s.file_bytes())?;
        // Beside reads (a shared handle), as the store's maintain runs.
        let r = self.with(py, |s| {
            let now = now_ms.unwrap_or_else(|| s.options().tiering.clock.now());
            s.maintain(now)
        })?;
        // Re-encoded blocks leave their old pages free: give them back (exclusive). The pass
        // is committed: a compaction that cannot run is reported, not raised (ADR 0024).
        let mut compaction_deferred = None;
        if r.bytes_written > 0 {
            let compacted = py.detach(|| {
                let mut guard = self.inner.write();
                let s = guard.as_mut().ok_or_else(closed)?;
                Ok::<_, PyErr>(s.compact_if_idle().map_err(|e| e.to_string()))
            })?;
            compaction_deferred = compacted.err();
        }
        let after = self.with(py, |s| s.file_bytes())?;
        let d = PyDict::new(py);
        d.set_item("moves", r.moves)?;
        d.set_item("promoted", r.promoted)?;
        d.set_item("demoted", r.demoted)?;
        d.set_item("converted", r.converted)?;
        d.set_item("absent", r.absent)?;
        d.set_item("bytes_written", r.bytes_written)?;
        d.set_item("deferred", r.deferred)?;
        d.set_item("file_bytes_before", before)?;
        d.set_item("file_bytes_after", after)?;
        d.set_item("compaction_deferred", compaction_deferred)?;
        Ok(d)
    }

    /// Checks every block, record and segment: a dict with counts and `issues` (strings).
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.with(py, |s| s.verify())?;
        let d = PyDict::new(py);
        d.set_item("ok", r.is_ok())?;
        d.set_item("versions", r.versions)?;
        d.set_item("blocks", r.blocks)?;
        d.set_item("segments", r.segments)?;
        d.set_item("checkpoints", r.checkpoints)?;
        let issues: Vec<String> = r.issues.iter().map(|i| i.to_string()).collect();
        d.set_item("issues", issues)?;
        Ok(d)
    }

    /// Raw, stored, file and on-disk bytes, counts and the ratio (raw bytes / bytes on
    /// disk, as `strata stats` says it), as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, |s| s.stats())?;
        let d = PyDict::new(py);
        d.set_item("raw_bytes", s.raw_bytes)?;
        d.set_item("stored_bytes", s.stored_bytes)?;
        d.set_item("file_bytes", s.file_bytes)?;
        d.set_item("disk_bytes", s.disk_bytes)?;
        d.set_item("segments", s.segments)?;
        d.set_item("versions", s.versions)?;
        d.set_item("checkpoints", s.checkpoints)?;
        d.set_item("tensors", s.tensors.len())?;
        d.set_item("ratio", s.ratio())?;
        d.set_item("tier_bytes", s.tier_bytes)?;
        d.set_item("packed_bytes", s.packed_bytes)?;
        Ok(d)
    }

    /// Waits until every committed checkpoint is in the `upload` remote; raises the latest
    /// upload error if one is still not there.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| s.flush())
    }

    /// Pushes the checkpoints the remote at `url` lacks: a dict report.
    fn push<'py>(&self, py: Python<'py>, url: &str) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.inner.read();
        let store = guard.as_ref().ok_or_else(closed)?;
        remote::push(py, store, url)
    }

    /// Pushes checkpoint `step` as part `part` of the remote's checkpoint `step`.
    fn push_part<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        step: u64,
        part: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.inner.read();
        let store = guard.as_ref().ok_or_else(closed)?;
        remote::push_part(py, store, url, step, part)
    }

    /// Pulls the checkpoints of the remote at `url` this store lacks: a dict report.
    fn pull<'py>(&self, py: Python<'py>, url: &str) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.inner.read();
        let store = guard.as_ref().ok_or_else(closed)?;
        remote::pull(py, store, url)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<strata._native.Store {:?} ({state})>", self.path)
    }
}

/// The native module: the `Store` class and the exception classes.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyStore>()?;
    m.add_class::<remote::PyRemoteStore>()?;
    m.add_function(wrap_pyfunction!(remote::commit_parts, m)?)?;
    m.add_function(wrap_pyfunction!(remote::remote_retain, m)?)?;
    m.add_function(wrap_pyfunction!(remote::remote_gc, m)?)?;
    m.add("RemoteFailure", py.get_type::<RemoteFailure>())?;
    m.add("Conflict", py.get_type::<Conflict>())?;
    m.add("StrataError", py.get_type::<StrataError>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("Corrupt", py.get_type::<Corrupt>())?;
    m.add("InUse", py.get_type::<InUse>())?;
    m.add("TierError", py.get_type::<TierError>())?;
    m.add("CheckpointExists", py.get_type::<CheckpointExists>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

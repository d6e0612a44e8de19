"""Strata: an embedded store for tensors that change over time, from Python.

>>> import strata
>>> with strata.Store("run.strata") as st:
...     st.save_checkpoint(1000, model.state_dict(), metadata={"loss": 1.93})
...     w = st.get("lm_head.weight", step=1000, framework="pt")

See ``python/README.md`` for the API, the dtype table and the drop-ins
(``strata.torch``, ``strata.hf``, ``strata.lightning``), which are imported on demand.
"""

from __future__ import annotations

from . import _native
from ._flatten import SEP, flatten, unflatten
from ._native import (
    CheckpointExists,
    Conflict,
    Corrupt,
    InUse,
    InvalidInput,
    NotFound,
    RemoteFailure,
    StrataError,
    TierError,
)
from ._remote import RemoteStore, commit_parts, open_remote, remote_gc, remote_retain
from ._runs import StaleCheckpoint
from ._store import ReadOnlyStore, StepReader, Store, TensorSlice, open, open_read_only

__version__: str = _native.__version__

__all__ = [
    "Store",
    "ReadOnlyStore",
    "StepReader",
    "TensorSlice",
    "open",
    "open_read_only",
    "flatten",
    "unflatten",
    "SEP",
    "StrataError",
    "NotFound",
    "InvalidInput",
    "CheckpointExists",
    "StaleCheckpoint",
    "Corrupt",
    "InUse",
    "TierError",
    "RemoteFailure",
    "Conflict",
    "RemoteStore",
    "open_remote",
    "commit_parts",
    "remote_retain",
    "remote_gc",
    "__version__",
]

"""``torch.distributed.checkpoint`` (DCP) storage for a Strata store (ADR 0016).

>>> dcp.save(state_dict, storage_writer=StrataStorageWriter("run.strata", step=1000))
>>> dcp.load(state_dict, storage_reader=StrataStorageReader("run.strata", step=1000))

A store has one writer process at a time, so ranks do not write it directly:

- **save**: each rank writes the items DCP planned for it (tensor chunks, and serialized
  non-tensor objects as ``uint8`` tensors) into its own *staging store*, a file beside the store
  named ``<store>.dcp-<step>-rank<N>.staging`` (no contention: one file per rank). The
  coordinator's ``finish`` then copies every staging store, tensor by tensor (memory holds one
  batch of blocks, not the checkpoint), into one checkpoint at ``step`` of the real store,
  atomically, with DCP's ``Metadata`` pickled into the checkpoint metadata (key
  ``strata.dcp.metadata``, base64), and deletes the staging files. A crash before ``finish``
  commits leaves the store as it was (and staging files, removed by the next save of that step).
- **runs** (ADR 0026): a save at ``step`` into a store that holds checkpoints at ``step`` or
  later is refused by the coordinator before any rank writes (:class:`strata.CheckpointExists`,
  raised by ``dcp.save`` on every rank), unless ``overwrite=True``, which deletes them when the
  new checkpoint is committed. The checkpoint's metadata names its run (``run_id``).
- **load**: each rank opens the store read-only for its reads, so ranks read in parallel (and
  beside a process that writes the store).
- **with a remote** (``remote="s3://bucket/prefix"`` or ``file:///path``, ADR 0018): each rank
  pushes its staging store as its *part* of the remote's checkpoint at ``step``
  (``Store.push_part``, ranks on any machines), and the coordinator's ``finish`` joins the parts
  (``strata.commit_parts``): the checkpoint appears in the remote whole or not at all, and the
  local store is not written. Loads read the remote through a private cache per process.

Names in the store: a tensor item is stored under its fully qualified name, a chunk of a
sharded tensor under ``<fqn>@<offset>,<offset>,...``, a non-tensor object under
``<fqn>`` as bytes (``torch.save`` format, as DCP serializes it).
"""

from __future__ import annotations

import base64
import dataclasses
import io
import os
import pickle
import shutil
import tempfile
import time
from typing import Any

import numpy as np
import torch
from torch.futures import Future
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult

from ._convert import check_step
from ._handles import reading
from ._native import InUse, NotFound
from ._remote import RemoteStore, commit_parts
from ._runs import RunWrites
from ._store import Store

__all__ = ["StrataStorageWriter", "StrataStorageReader"]

METADATA_KEY = "strata.dcp.metadata"


def _name(index: MetadataIndex, whole: bool) -> str:
    if whole or index.offset is None:
        return index.fqn
    return index.fqn + "@" + ",".join(str(int(o)) for o in index.offset)


def _staging_path(store_path: str, step: int, rank_key: str) -> str:
    return f"{store_path}.dcp-{step}-{rank_key}.staging"


def _open(path: str, timeout: float) -> Store:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return Store(path)
        except InUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _done(value: Any) -> Future:
    fut: Future = Future()  # DCP waits with torch.futures' .wait()
    fut.set_result(value)
    return fut


class StrataStorageWriter(StorageWriter):
    """Writes a DCP checkpoint as the store checkpoint at ``step`` (see the module doc)."""

    def __init__(self, store_path: str | os.PathLike[str], step: int, open_timeout: float = 60.0,
                 remote: str | None = None, overwrite: bool = False, run_id: str | None = None):
        super().__init__()
        self.store_path = os.path.abspath(os.fspath(store_path))
        self.step = check_step(step)
        self.open_timeout = open_timeout
        self.remote = remote
        self.run = RunWrites("StrataStorageWriter", run_id, overwrite)
        self.is_coordinator = False

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.store_path = os.path.abspath(os.fspath(checkpoint_id))

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # The coordinator refuses a save behind the store's checkpoints before any rank writes.
        if self.remote is None and os.path.exists(self.store_path):
            with reading(self.store_path) as st:
                self.run.begin(st, self.step - 1 if self.step > 0 else None, adopt=False,
                               doing=f"saves step {self.step}")
        # Each rank's staging store is named by its position in the global plan.
        return [dataclasses.replace(p, storage_data=f"rank{i}") for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        staging = _staging_path(self.store_path, self.step, str(plan.storage_data))
        if os.path.exists(staging):
            os.remove(staging)
        tensors: dict[str, Any] = {}
        results = []
        for item in plan.items:
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data.read())
                name = _name(item.index, True)
                tensors[name] = np.frombuffer(raw, dtype=np.uint8)
                size = len(raw)
            else:
                t = data.detach()
                whole = item.type == WriteItemType.TENSOR
                name = _name(item.index, whole)
                tensors[name] = t
                size = t.numel() * t.element_size()
            results.append(WriteResult(index=item.index, size_in_bytes=size,
                                       storage_data=(name, staging)))
        if tensors:
            with Store(staging) as st:
                if self.remote is None:
                    st.save_checkpoint(0, tensors)
                else:
                    st.save_checkpoint(self.step, tensors)
                    st.push_part(self.remote, self.step, str(plan.storage_data))
            if self.remote is not None:
                os.remove(staging)
        return _done(results)

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        names: dict[MetadataIndex, str] = {}
        stagings: dict[str, list[str]] = {}
        for rank_results in results:
            for wr in rank_results:
                name, staging = wr.storage_data
                names[wr.index] = name
                stagings.setdefault(staging, []).append(name)
        metadata.storage_data = names
        blob = base64.b64encode(pickle.dumps(metadata, protocol=4)).decode("ascii")
        if self.remote is not None:
            commit_parts(self.remote, self.step, {METADATA_KEY: blob})
            return
        with _open(self.store_path, self.open_timeout) as st:
            self.run.claim(st)
            meta = {METADATA_KEY: blob, **self.run.stamp(self.step)}
            st.save_checkpoint_from(self.step, [(s, 0) for s in stagings], metadata=meta)
        for staging in stagings:
            os.remove(staging)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return os.fspath(checkpoint_id).endswith(".strata")

    def storage_meta(self) -> Any:
        return None


class _RemoteSource:
    """A RemoteStore over a temporary cache folder, for one DCP load in one process."""

    def __init__(self, url: str):
        self.dir = tempfile.mkdtemp(prefix="strata-dcp-")
        self.remote = RemoteStore(url, cache_dir=self.dir)

    def __enter__(self) -> RemoteStore:
        return self.remote

    def __exit__(self, *exc: Any) -> None:
        del self.remote
        shutil.rmtree(self.dir, ignore_errors=True)


class StrataStorageReader(StorageReader):
    """Reads the DCP checkpoint at ``step`` (the latest when None) of a store."""

    def __init__(
        self, store_path: str | os.PathLike[str], step: int | None = None,
        remote: str | None = None,
    ):
        super().__init__()
        self.store_path = os.path.abspath(os.fspath(store_path))
        self.step = None if step is None else check_step(step)
        self.remote = remote
        self.storage_data: dict[MetadataIndex, str] = {}

    def _source(self) -> Any:
        """The store opened read-only, or a reader of the remote with a private cache
        (removed on close)."""
        if self.remote is None:
            return reading(self.store_path)
        return _RemoteSource(self.remote)

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.store_path = os.path.abspath(os.fspath(checkpoint_id))

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        with self._source() as st:
            if self.step is None:
                self.step = st.latest_step()
                if self.step is None:
                    raise NotFound(f"store {self.store_path} has no checkpoint")
            meta = st.metadata(self.step)
        if not isinstance(meta, dict) or METADATA_KEY not in meta:
            raise NotFound(f"checkpoint {self.step} of {self.store_path} was not saved by DCP")
        md = pickle.loads(base64.b64decode(meta[METADATA_KEY]))
        self.storage_data = md.storage_data
        return md

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        if self.step is None:
            self.read_metadata()
        step = self.step
        with self._source() as st:
            for req in plan.items:
                name = self.storage_data[req.storage_index]
                if req.type == LoadItemType.BYTE_IO:
                    raw = st.get(name, step)
                    planner.load_bytes(req, io.BytesIO(raw.tobytes()))
                    continue
                tensor = st.get(name, step, framework="pt")
                tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
                target = planner.resolve_tensor(req).detach()
                if target.size() != tensor.size():
                    raise ValueError(
                        f"{req.storage_index}: stored {tuple(tensor.size())}, "
                        f"asked {tuple(target.size())}"
                    )
                target.copy_(tensor)
                planner.commit_tensor(req, target)
        return _done(None)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return os.fspath(checkpoint_id).endswith(".strata")

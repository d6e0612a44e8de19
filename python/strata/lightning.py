"""``StrataCheckpointIO``: Lightning's ``CheckpointIO`` writing checkpoints to a Strata store.

>>> trainer = L.Trainer(plugins=[StrataCheckpointIO("run.strata")],
...                     callbacks=[ModelCheckpoint(every_n_train_steps=10, save_top_k=-1)])

How a Lightning checkpoint (a nested dict) is stored:

- Every tensor (model weights, optimizer moments and step counters, ...) is taken out by
  :func:`strata.flatten` and named by its path joined with ``/``
  (``state_dict/layer.weight``, ``optimizer_states/0/state/0/exp_avg``); they form one
  checkpoint of the store at ``checkpoint["global_step"]``, written atomically.
- The rest (epoch and step counters, loop state, param groups, hyper-parameters, callback
  state: anything that is not a tensor) is pickled and kept, base64-encoded, under the key
  ``"strata.lightning.skeleton"`` of the checkpoint's JSON metadata. Loading unpickles it, so
  load only stores you trust (as with ``torch.load(weights_only=False)``).
- At the path Lightning asks for, a small JSON *pointer file* is written
  (``{"strata_store": ..., "step": ...}``), so Lightning's file logic (``ModelCheckpoint``,
  ``ckpt_path=``) works unchanged; ``load_checkpoint(path)`` follows it.
- ``remove_checkpoint(path)`` deletes the pointer file and its tag; the store's checkpoint is
  deleted when no other pointer (tag ``lightning:<path>``) refers to its step.
- A second save at a step already in the store (e.g. ``last.ckpt`` beside
  ``step=N.ckpt``) only adds a pointer: the checkpoint first written at that step is kept.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
from typing import Any

from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

from ._flatten import flatten, unflatten
from ._native import NotFound
from ._store import Store

__all__ = ["StrataCheckpointIO"]

SKELETON_KEY = "strata.lightning.skeleton"


class StrataCheckpointIO(CheckpointIO):
    """Saves Lightning checkpoints into the store at ``store_path`` (opened on first use,
    kept open until ``teardown``)."""

    def __init__(self, store_path: str | os.PathLike[str]):
        super().__init__()
        self.store_path = os.path.abspath(os.fspath(store_path))
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None or self._store.closed:
            self._store = Store(self.store_path)
        return self._store

    @staticmethod
    def _tag(path: str | os.PathLike[str]) -> str:
        return "lightning:" + os.path.abspath(os.fspath(path))

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("StrataCheckpointIO takes no storage_options")
        step = int(checkpoint.get("global_step", 0))
        st = self.store
        if step not in st.steps():
            tensors, skeleton = flatten(checkpoint)
            blob = base64.b64encode(pickle.dumps(skeleton, protocol=4)).decode("ascii")
            st.save_checkpoint(step, tensors, metadata={SKELETON_KEY: blob})
        st.tag(self._tag(path), step)
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"strata_store": self.store_path, "step": step}, f)
        os.replace(tmp, path)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        with open(os.fspath(path)) as f:
            pointer = json.load(f)
        step = int(pointer["step"])
        st = self.store
        meta = st.metadata(step)
        if not isinstance(meta, dict) or SKELETON_KEY not in meta:
            raise NotFound(f"checkpoint {step} of {self.store_path} was not saved by Lightning")
        skeleton = pickle.loads(base64.b64decode(meta[SKELETON_KEY]))
        tensors = st.load_checkpoint(step, framework="pt")
        if map_location is not None:
            import torch

            tensors = {k: v.to(map_location) if isinstance(map_location, (str, torch.device))
                       else v for k, v in tensors.items()}
        return unflatten(skeleton, tensors)

    def remove_checkpoint(self, path: Any) -> None:
        path = os.fspath(path)
        st = self.store
        tag = self._tag(path)
        step = st.tags().get(tag)
        if step is not None:
            st.untag(tag)
            others = [t for t, s in st.tags().items() if s == step and t.startswith("lightning:")]
            if not others and step in st.steps():
                st.delete_checkpoint(step)
        if os.path.exists(path):
            os.remove(path)

    def teardown(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

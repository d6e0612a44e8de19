"""``StrataCheckpointIO``: Lightning's ``CheckpointIO`` writing checkpoints to a Strata store.

>>> trainer = L.Trainer(plugins=[StrataCheckpointIO("run.strata")],
...                     callbacks=[ModelCheckpoint(every_n_train_steps=10, save_top_k=-1)])

How a Lightning checkpoint (a nested dict) is stored:

- Every tensor (model weights, optimizer moments and step counters, ...) is taken out by
  :func:`strata.flatten` and named by its path joined with ``/``
  (``state_dict/layer.weight``, ``optimizer_states/0/state/0/exp_avg``); they form one
  checkpoint of the store at ``checkpoint["global_step"]``, written atomically, with the run's
  id and the checkpoint's own (``strata.run_id``, ``strata.checkpoint_id``) in its metadata.
- The rest (epoch and step counters, loop state, param groups, hyper-parameters, callback
  state: anything that is not a tensor) is pickled and kept, base64-encoded, under the key
  ``"strata.lightning.skeleton"`` of the checkpoint's JSON metadata.
- At the path Lightning asks for, a small *pointer file* is written: a ``torch.save`` file
  holding that rest and, in place of the tensors, a call that reads them from the store
  (``strata.lightning.load_pointer``). ``torch.load`` on it therefore gives the whole
  checkpoint dict, so Lightning's own loaders work with it: ``ckpt_path=`` of ``fit``,
  ``validate``, ``test`` and ``predict`` (with or without this plugin) and
  ``LightningModule.load_from_checkpoint``.
  ``weights_only=True`` loads (torch's default) need ``import strata.lightning`` first, which
  allows ``load_pointer`` and the tensor placeholder among torch's safe globals; the rest is
  unpickled under the caller's ``weights_only`` rules as any checkpoint is.
- A pointer names the checkpoint's id: if its step was since replaced by another run (or
  deleted), loading it raises :class:`strata.StaleCheckpoint` rather than give another run's
  weights.
- ``remove_checkpoint(path)`` deletes the pointer file and its tag; the store's checkpoint is
  deleted when no other pointer (tag ``lightning:<path>``) refers to its step.
- A second save at a step this run already wrote (``last.ckpt`` beside ``step=N.ckpt``) only
  adds a pointer. Checkpoints in the store that this run did not write, after the step it
  resumed from (all, for a fresh run), make the first save raise
  :class:`strata.CheckpointExists`, unless ``overwrite=True`` (which deletes them; ADR 0026).

What does not follow the pointer: ``torch.load(path, map_location=...)`` by hand loads the
tensors on the CPU (the plugin's ``load_checkpoint`` does apply ``map_location``); a pointer
names its store by absolute path, so moving the store breaks its pointers; loading needs
``strata`` installed.
"""

from __future__ import annotations

import base64
import os
import pickle
from typing import Any

import torch
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

from ._flatten import Slot, flatten, unflatten
from ._handles import reading
from ._runs import RunWrites, check_pointer
from ._store import Store

__all__ = ["StrataCheckpointIO", "load_pointer"]

SKELETON_KEY = "strata.lightning.skeleton"


def load_pointer(store_path: str, step: int, checkpoint_id: str, run_id: str,
                 skeleton: Any) -> Any:
    """What ``torch.load`` of a pointer file calls: the checkpoint at ``step`` of the store at
    ``store_path``, its tensors put back into ``skeleton``. Raises
    :class:`strata.StaleCheckpoint` if that step no longer holds checkpoint ``checkpoint_id``."""
    with reading(store_path) as st:
        check_pointer(st, step, checkpoint_id, run_id, "a Lightning checkpoint file")
        tensors = st.load_checkpoint(step, framework="pt")
    return unflatten(skeleton, tensors)


class _Pointer:
    """Pickles as a call of :func:`load_pointer` (what a pointer file holds)."""

    def __init__(self, *args: Any):
        self.args = args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (load_pointer, self.args)


# A pointer file loads under torch.load(weights_only=True) once this module is imported (torch
# before 2.4 has no safe globals, and loads with weights_only=False by default).
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([load_pointer, Slot])


class StrataCheckpointIO(CheckpointIO):
    """Saves Lightning checkpoints into the store at ``store_path`` (opened on first use,
    kept open until ``teardown``). ``overwrite`` and ``run_id``: see the module doc."""

    def __init__(self, store_path: str | os.PathLike[str], overwrite: bool = False,
                 run_id: str | None = None):
        super().__init__()
        self.store_path = os.path.abspath(os.fspath(store_path))
        self.run = RunWrites("StrataCheckpointIO", run_id, overwrite)
        self._start: int | None = None  # the step a load before the first save resumed from
        self._begun = False
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
        if not self._begun:
            self.run.begin(st, self._start)
            self._begun = True
        if self.run.written(step) is None:
            tensors, skeleton = flatten(checkpoint)
            self.run.claim(st)
            blob = base64.b64encode(pickle.dumps(skeleton, protocol=4)).decode("ascii")
            meta = {SKELETON_KEY: blob, **self.run.stamp(step)}
            st.save_checkpoint(step, tensors, metadata=meta)
        else:
            # A second save at the step (last.ckpt) points to the checkpoint written first,
            # with the skeleton that names its tensors.
            skeleton = pickle.loads(base64.b64decode(st.metadata(step)[SKELETON_KEY]))
        st.tag(self._tag(path), step)
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp"
        pointer = _Pointer(self.store_path, step, self.run.written(step), self.run.run_id, skeleton)
        torch.save(pointer, tmp)
        os.replace(tmp, path)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Loads a pointer file (or any ``torch.save`` checkpoint) with ``torch.load``. A load
        before this run's first save is where the run resumes: later steps in the store that it
        did not write are refused or (``overwrite``) deleted by that save."""
        checkpoint = torch.load(os.fspath(path), map_location=map_location,
                                weights_only=weights_only)
        if map_location is not None:
            checkpoint = _move(checkpoint, map_location)
        if not self._begun and isinstance(checkpoint, dict) and "global_step" in checkpoint:
            self._start = int(checkpoint["global_step"])
        return checkpoint

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


def _move(obj: Any, map_location: Any) -> Any:
    """``obj`` with its CPU tensors moved as ``map_location`` (a device or device name) says;
    other forms of it (a dict or a function) were applied by ``torch.load`` to what it read
    itself."""
    if not isinstance(map_location, (str, torch.device)):
        return obj
    tensors, skeleton = flatten(obj)
    moved = {k: v.to(map_location) if torch.is_tensor(v) else v for k, v in tensors.items()}
    return unflatten(skeleton, moved)


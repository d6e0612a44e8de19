"""Hugging Face ``transformers`` integration.

- :class:`StrataCallback`: a ``TrainerCallback`` that saves the model's ``state_dict`` into a
  Strata store at every ``on_save`` (the Trainer's ``save_steps``), at step
  ``state.global_step``, with the epoch and the last logged values as metadata, and (by default)
  the optimizer's and LR scheduler's state: their tensors under ``__trainer__/...`` (flattened
  by :func:`strata.flatten`), the rest pickled in the metadata. The Trainer's own checkpoint
  folders are still written (they hold RNG state too).
- :func:`load_into_model`: loads any step of the store into a model (``load_state_dict``), and
  into an optimizer and scheduler when given; :func:`load_trainer_state` returns their saved
  state dicts.

Tied weights (e.g. ``lm_head.weight`` and the input embedding) appear under both names in a
``state_dict`` and are stored under both names.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

import base64
import pickle

from ._flatten import SEP, flatten, unflatten
from ._native import NotFound
from ._store import Store

__all__ = ["StrataCallback", "load_into_model", "load_trainer_state"]

#: Prefix of the optimizer's and scheduler's tensors in a checkpoint.
TRAINER_PREFIX = "__trainer__" + SEP
#: Metadata key of their pickled skeleton.
TRAINER_KEY = "strata.hf.trainer_state"


class StrataCallback(TrainerCallback):
    """Saves ``model.state_dict()`` into the store at ``store_path`` on every ``on_save``,
    with the optimizer's and scheduler's state unless ``save_optimizer=False``.
    ``asynchronous=True`` copies the tensors and writes them in a background thread."""

    def __init__(self, store_path: str | os.PathLike[str], asynchronous: bool = False,
                 save_optimizer: bool = True):
        self.store_path = os.fspath(store_path)
        self.asynchronous = asynchronous
        self.save_optimizer = save_optimizer
        self._store: Store | None = None
        self._pending: list[Any] = []

    @property
    def store(self) -> Store:
        if self._store is None or self._store.closed:
            self._store = Store(self.store_path)
        return self._store

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any):
        if model is None or not getattr(state, "is_world_process_zero", True):
            return control
        step = int(state.global_step)
        if step in self.store.steps():
            return control
        meta: dict[str, Any] = {"epoch": state.epoch, "global_step": step}
        if state.log_history:
            meta["log"] = state.log_history[-1]
        sd = dict(model.state_dict())
        optimizer, scheduler = kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        if self.save_optimizer and optimizer is not None:
            state = {"optimizer": optimizer.state_dict()}
            if scheduler is not None:
                state["lr_scheduler"] = scheduler.state_dict()
            tensors, skeleton = flatten(state)
            for name, t in tensors.items():
                sd[TRAINER_PREFIX + name] = t
            meta[TRAINER_KEY] = base64.b64encode(pickle.dumps(skeleton, protocol=4)).decode("ascii")
        if self.asynchronous:
            self._pending.append(self.store.save_checkpoint_async(step, sd, metadata=meta))
        else:
            self.store.save_checkpoint(step, sd, metadata=meta)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any):
        for fut in self._pending:
            fut.result()
        self._pending.clear()
        if self._store is not None:
            self._store.close()
            self._store = None
        return control


def _load(store_path: str | os.PathLike[str], step: int | None) -> tuple[int, dict, Any]:
    with Store(store_path) as st:
        if step is None:
            step = st.latest_step()
            if step is None:
                raise NotFound(f"store {os.fspath(store_path)} has no checkpoint")
        return step, st.load_checkpoint(step, framework="pt"), st.metadata(step)


def _split(sd: dict, meta: Any, step: int) -> tuple[dict, dict[str, Any] | None]:
    model = {k: v for k, v in sd.items() if not k.startswith(TRAINER_PREFIX)}
    if not isinstance(meta, dict) or TRAINER_KEY not in meta:
        return model, None
    skeleton = pickle.loads(base64.b64decode(meta[TRAINER_KEY]))
    tensors = {k[len(TRAINER_PREFIX):]: v for k, v in sd.items() if k.startswith(TRAINER_PREFIX)}
    return model, unflatten(skeleton, tensors)


def load_trainer_state(store_path: str | os.PathLike[str], step: int | None = None) -> dict[str, Any]:
    """The optimizer's (``"optimizer"``) and scheduler's (``"lr_scheduler"``) state dicts saved
    at ``step`` (latest when None). Raises :class:`strata.NotFound` if none were saved."""
    step, sd, meta = _load(store_path, step)
    _, state = _split(sd, meta, step)
    if state is None:
        raise NotFound(f"checkpoint {step} of {os.fspath(store_path)} holds no optimizer state")
    return state


def load_into_model(
    model: Any, store_path: str | os.PathLike[str], step: int | None = None, strict: bool = True,
    optimizer: Any = None, lr_scheduler: Any = None,
) -> int:
    """Loads the checkpoint at ``step`` (latest when None) into ``model``, and the saved
    optimizer and scheduler state into ``optimizer`` and ``lr_scheduler`` when given (raising
    :class:`strata.NotFound` if the checkpoint holds none); returns the step."""
    step, sd, meta = _load(store_path, step)
    weights, state = _split(sd, meta, step)
    model.load_state_dict(weights, strict=strict)
    if optimizer is not None or lr_scheduler is not None:
        if state is None:
            raise NotFound(f"checkpoint {step} of {os.fspath(store_path)} holds no optimizer state")
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
        if lr_scheduler is not None and "lr_scheduler" in state:
            lr_scheduler.load_state_dict(state["lr_scheduler"])
    return step

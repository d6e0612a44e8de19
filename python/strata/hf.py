"""Hugging Face ``transformers`` integration.

- :class:`StrataCallback`: a ``TrainerCallback`` that saves the model's ``state_dict`` into a
  Strata store at every ``on_save`` (the Trainer's ``save_steps``), at step
  ``state.global_step``, with the epoch and the last logged values as metadata. The Trainer's
  own checkpoint folders are still written (they hold optimizer and RNG state); the store keeps
  the weights' history compactly.
- :func:`load_into_model`: loads any step of the store into a model (``load_state_dict``).

Tied weights (e.g. ``lm_head.weight`` and the input embedding) appear under both names in a
``state_dict`` and are stored under both names.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from ._native import NotFound
from ._store import Store

__all__ = ["StrataCallback", "load_into_model"]


class StrataCallback(TrainerCallback):
    """Saves ``model.state_dict()`` into the store at ``store_path`` on every ``on_save``.
    ``asynchronous=True`` copies the weights and writes them in a background thread."""

    def __init__(self, store_path: str | os.PathLike[str], asynchronous: bool = False):
        self.store_path = os.fspath(store_path)
        self.asynchronous = asynchronous
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
        sd = model.state_dict()
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


def load_into_model(
    model: Any, store_path: str | os.PathLike[str], step: int | None = None, strict: bool = True
) -> int:
    """Loads the checkpoint at ``step`` (latest when None) into ``model``; returns the step."""
    with Store(store_path) as st:
        if step is None:
            step = st.latest_step()
            if step is None:
                raise NotFound(f"store {os.fspath(store_path)} has no checkpoint")
        sd = st.load_checkpoint(step, framework="pt")
    model.load_state_dict(sd, strict=strict)
    return step

"""Drop-ins for ``safetensors.torch``: ``save_file``, ``load_file``, ``safe_open``,
``save_model``, ``load_model``, with the same signatures, writing to and reading from a Strata
store instead of a safetensors file.

The file name is the store. Which step (the extra keyword ``step=``):

- ``save_file(tensors, filename, metadata=None, *, step=None)`` and ``save_model``:
  ``step=None`` saves at the latest checkpoint's step + 1 (0 in a new store); a step that
  exists raises :class:`strata.CheckpointExists`.
- ``load_file(filename, device="cpu", *, step=None)``, ``load_model`` and
  ``safe_open(..., step=None)``: ``step=None`` reads the latest checkpoint. They open the store
  read-only (or use this process's open writer of it), so they work beside a writer in
  another process, and a missing file is :class:`strata.NotFound` (nothing is created).

Unlike safetensors, tensors sharing storage (tied weights) are accepted and stored once per
name (``save_model`` keeps every name of the ``state_dict``, so ``load_model`` finds them
all); ``metadata`` is a ``dict[str, str]`` as in safetensors.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ._handles import reading, writer_of
from ._native import NotFound
from ._store import ReadOnlyStore, StepReader, Store

__all__ = ["save_file", "load_file", "safe_open", "save_model", "load_model"]


def _next_step(st: Store) -> int:
    latest = st.latest_step()
    return 0 if latest is None else latest + 1


def save_file(
    tensors: dict[str, Any],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    step: int | None = None,
) -> int:
    """Saves ``tensors`` as one checkpoint of the store ``filename``; returns the step."""
    if metadata is not None and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError("metadata must be a dict[str, str], as in safetensors")
    with Store(filename) as st:
        step = _next_step(st) if step is None else step
        st.save_checkpoint(step, tensors, metadata=metadata)
    return step


def load_file(
    filename: str | os.PathLike[str], device: str | int = "cpu", *, step: int | None = None
) -> dict[str, Any]:
    """The checkpoint at ``step`` (latest when None) as name -> torch tensor on ``device``."""
    with reading(filename) as st:
        if step is None:
            step = st.latest_step()
            if step is None:
                raise NotFound(f"store {os.fspath(filename)} has no checkpoint")
        out = st.load_checkpoint(step, framework="pt")
    if device != "cpu":
        out = {k: v.to(device) for k, v in out.items()}
    return out


def save_model(
    model: Any,
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    force_contiguous: bool = False,
    *,
    step: int | None = None,
) -> int:
    """Saves ``model.state_dict()`` as one checkpoint of the store ``filename`` (every name,
    tied weights included); returns the step. ``force_contiguous`` is accepted for
    safetensors' signature: non-contiguous tensors are always copied contiguous."""
    return save_file(model.state_dict(), filename, metadata, step=step)


def load_model(
    model: Any,
    filename: str | os.PathLike[str],
    strict: bool = True,
    device: str | int = "cpu",
    *,
    step: int | None = None,
) -> tuple[list[str], list[str]]:
    """Loads the checkpoint at ``step`` (latest when None) into ``model``; returns
    ``(missing, unexpected)`` key lists. With ``strict``, either being non-empty raises
    ``RuntimeError``, as in safetensors."""
    missing, unexpected = model.load_state_dict(load_file(filename, device, step=step),
                                                strict=False)
    missing, unexpected = list(missing), list(unexpected)
    if strict and (missing or unexpected):
        parts = [f"Error(s) in loading state_dict for {type(model).__name__}:"]
        if missing:
            parts.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing))
        if unexpected:
            parts.append("Unexpected key(s) in state_dict: "
                         + ", ".join(f'"{k}"' for k in unexpected))
        raise RuntimeError("\n    ".join(parts))
    return missing, unexpected


class _SafeOpen(StepReader):
    """``safe_open`` over a store: safetensors' metadata type; closes the store on exit when it
    opened it."""

    def __init__(self, store: Any, step: int, framework: str, device: Any, owned: bool):
        super().__init__(store, step, framework)
        self._device, self._owned = device, owned

    def get_tensor(self, name: str) -> Any:
        t = super().get_tensor(name)
        return t if self._device == "cpu" else t.to(self._device)

    def metadata(self) -> dict[str, str] | None:
        """The metadata as safetensors gives it: a dict of strings, or None."""
        value = super().metadata()
        if value == {}:
            return None
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
        return {"metadata": str(value)}

    def __exit__(self, *exc: Any) -> None:
        if self._owned:
            self._store.close()


def safe_open(
    filename: str | os.PathLike[str],
    framework: str = "pt",
    device: str | int = "cpu",
    *,
    step: int | None = None,
) -> StepReader:
    """Like ``safetensors.safe_open``: ``keys()``, ``get_tensor``, ``get_slice``,
    ``metadata()`` of the checkpoint at ``step`` (latest when None). Use it in a ``with``
    block: leaving it closes the store (opened read-only, unless this process writes it)."""
    st = writer_of(filename)
    owned = st is None
    if owned:
        st = ReadOnlyStore(filename)
    try:
        reader = st.open_step(step, framework=framework)
    except BaseException:
        if owned:
            st.close()
        raise
    return _SafeOpen(st, reader.step, reader.framework, device, owned)


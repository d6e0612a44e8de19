"""Drop-ins for ``safetensors.torch``: ``save_file``, ``load_file``, ``safe_open``, with the
same signatures, writing to and reading from a Strata store instead of a safetensors file.

The file name is the store. Which step (the extra keyword ``step=``):

- ``save_file(tensors, filename, metadata=None, *, step=None)``: ``step=None`` saves at the
  latest checkpoint's step + 1 (0 in a new store); a step that exists raises
  :class:`strata.InvalidInput`.
- ``load_file(filename, device="cpu", *, step=None)`` and ``safe_open(..., step=None)``:
  ``step=None`` reads the latest checkpoint.

Unlike safetensors, tensors sharing storage (tied weights) are accepted and stored once per
name; ``metadata`` is a ``dict[str, str]`` as in safetensors.
"""

from __future__ import annotations

import os
from typing import Any

from ._store import StepReader, Store

__all__ = ["save_file", "load_file", "safe_open"]


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
    with Store(filename) as st:
        if step is None:
            step = st.latest_step()
            if step is None:
                from . import NotFound

                raise NotFound(f"store {os.fspath(filename)} has no checkpoint")
        out = st.load_checkpoint(step, framework="pt")
    if device != "cpu":
        out = {k: v.to(device) for k, v in out.items()}
    return out


class _SafeOpen(StepReader):
    """``safe_open`` over a store: closes the store on exit."""

    def __init__(self, store: Store, step: int, framework: str, device: Any):
        super().__init__(store, step, framework)
        self._device = device

    def get_tensor(self, name: str) -> Any:
        t = super().get_tensor(name)
        return t if self._device == "cpu" else t.to(self._device)

    def __exit__(self, *exc: Any) -> None:
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
    block: leaving it closes the store."""
    st = Store(filename)
    try:
        reader = st.open_step(step, framework=framework)
    except BaseException:
        st.close()
        raise
    return _SafeOpen(st, reader.step, reader.framework, device)


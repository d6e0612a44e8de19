"""Nested containers <-> flat tensor dicts.

:func:`flatten` walks dicts (keys of any type), lists and tuples, takes out every torch tensor
and NumPy array and names it by its path: the keys joined with ``SEP`` (``"/"``), e.g.
``optimizer_states/0/state/3/exp_avg``. What is left (the *skeleton*: counters, strings, param
groups, nested dicts) keeps a :class:`Slot` where each tensor was. :func:`unflatten` puts
the tensors back. The Lightning drop-in stores the tensors as a checkpoint and the skeleton,
pickled, in the checkpoint's metadata.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._convert import is_torch_tensor

SEP = "/"


class Slot:
    """Where a tensor was in a skeleton: the name it was stored under."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (Slot, (self.name,))

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


def _is_tensor(x: Any) -> bool:
    return is_torch_tensor(x) or (isinstance(x, np.ndarray) and x.dtype.kind in "fiub")


def flatten(obj: Any, sep: str = SEP) -> tuple[dict[str, Any], Any]:
    """``(tensors, skeleton)``: every tensor of ``obj`` by path, and ``obj`` without them.
    Two paths that print the same (keys ``1`` and ``"1"``) get a ``~N`` suffix."""
    tensors: dict[str, Any] = {}

    def name_for(path: list[str]) -> str:
        base = sep.join(path) if path else "tensor"
        name, n = base, 1
        while name in tensors:
            name = f"{base}~{n}"
            n += 1
        return name

    def walk(x: Any, path: list[str]) -> Any:
        if _is_tensor(x):
            name = name_for(path)
            tensors[name] = x
            return Slot(name)
        if isinstance(x, dict):
            items = [(k, walk(v, path + [str(k)])) for k, v in x.items()]
            try:
                out = type(x)()
                out.update(items)
                return out
            except Exception:
                return dict(items)
        if isinstance(x, list):
            return [walk(v, path + [str(i)]) for i, v in enumerate(x)]
        if isinstance(x, tuple):
            items = [walk(v, path + [str(i)]) for i, v in enumerate(x)]
            if hasattr(x, "_fields"):
                return type(x)(*items)
            return tuple(items)
        return x

    skeleton = walk(obj, [])
    return tensors, skeleton


def unflatten(skeleton: Any, tensors: dict[str, Any]) -> Any:
    """``obj`` back from :func:`flatten`'s output (tensors looked up by slot name)."""

    def walk(x: Any) -> Any:
        if isinstance(x, Slot):
            return tensors[x.name]
        if isinstance(x, dict):
            items = [(k, walk(v)) for k, v in x.items()]
            try:
                out = type(x)()
                out.update(items)
                return out
            except Exception:
                return dict(items)
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple):
            items = [walk(v) for v in x]
            if hasattr(x, "_fields"):
                return type(x)(*items)
            return tuple(items)
        return x

    return walk(skeleton)

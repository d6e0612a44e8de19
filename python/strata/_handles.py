"""The stores this process holds open for writing, by file.

A store has one writer handle at a time (another open gets :class:`strata.InUse`). Keeping
track of this process's writer handles lets :func:`open_native` release handles that are only
waiting for the garbage collector (a reference cycle) and say where a live one was opened when
it cannot, and lets :func:`reading` serve reads in this process (a loader beside a training
callback) from that handle instead of a second open.
"""

from __future__ import annotations

import gc
import os
import threading
import traceback
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import _native

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
# realpath -> (weak reference to the Python Store, "file:line" where it was opened)
_writers: dict[str, tuple[weakref.ref[Any], str]] = {}


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def _opened_at() -> str:
    """The innermost caller outside this package, as ``file:line``."""
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(_PACKAGE + os.sep):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def open_native(path: str, **options: Any) -> Any:
    """``_native.Store(path, **options)``; on ``InUse``, collects garbage (a handle that is
    unreachable but not yet freed) and tries once more, then names this process's live writer
    of the file, if there is one, in the error."""
    try:
        return _native.Store(path, **options)
    except _native.InUse:
        gc.collect()
    try:
        return _native.Store(path, **options)
    except _native.InUse as e:
        entry = _writers.get(_key(path))
        holder = entry[0]() if entry else None
        if holder is None or holder.closed:
            raise
        raise _native.InUse(
            f"{e}. This process holds it: the strata.Store opened at {entry[1]} is not closed"
        ) from None


def register(store: Any) -> None:
    """Records ``store`` (a writer just opened) as this process's writer of its file."""
    with _lock:
        _writers[_key(store.path)] = (weakref.ref(store), _opened_at())


def unregister(store: Any) -> None:
    """Forgets ``store`` (closing)."""
    with _lock:
        key = _key(store.path)
        entry = _writers.get(key)
        if entry is not None and entry[0]() in (store, None):
            del _writers[key]


def writer_of(path: str | os.PathLike[str]) -> Any:
    """This process's open writer :class:`strata.Store` of ``path``, or None."""
    entry = _writers.get(_key(path))
    store = entry[0]() if entry else None
    return None if store is None or store.closed else store


@contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[Any]:
    """A handle to read the store at ``path``: this process's writer if it has one open (left
    open), else a read-only open (closed on exit)."""
    store = writer_of(path)
    if store is not None:
        yield store
        return
    from ._store import ReadOnlyStore

    with ReadOnlyStore(path) as reader:
        yield reader

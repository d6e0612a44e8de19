"""Remotes in object storage from Python: :class:`RemoteStore` (read a remote without a
local copy) and the remote's upkeep (:func:`commit_parts`, :func:`remote_retain`,
:func:`remote_gc`). Pushing and pulling are :meth:`strata.Store.push` and
:meth:`strata.Store.pull`; automatic upload is ``Store(path, upload=url)``.

URLs: ``s3://bucket/prefix`` (endpoint, region and credentials from the ``AWS_*``
environment variables, ``AWS_ENDPOINT_URL`` for an S3-compatible server) or
``file:///path``.
"""

from __future__ import annotations

import os
from typing import Any

from . import _native
from ._convert import check_step
from ._store import _Reads


def _default_cache_dir() -> str:
    base = os.environ.get("STRATA_CACHE_DIR")
    if base:
        return base
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "strata", "remote")


class RemoteStore(_Reads):
    """A remote opened for reading: the read methods of :class:`strata.Store` (``get``,
    ``get_at``, ``load_checkpoint``, ``open_step``, ``history``, ``steps``, ``tags``,
    ``export_safetensors``, ...). A read fetches only the segments of the versions it
    decodes, into a local cache (``cache_dir``, default ``$STRATA_CACHE_DIR`` or
    ``~/.cache/strata/remote``) of at most ``cache_bytes`` (default 4 GiB)."""

    def __init__(self, url: str, cache_dir: str | os.PathLike[str] | None = None,
                 cache_bytes: int | None = None):
        if cache_bytes is not None:
            check_step(cache_bytes, "cache_bytes")
        directory = os.fspath(cache_dir) if cache_dir is not None else _default_cache_dir()
        self._s = _native.RemoteStore(url, directory, cache_bytes)

    @property
    def url(self) -> str:
        return self._s.url

    def counts(self) -> dict[str, int]:
        """Requests made and bytes moved so far: ``requests``, ``bytes_in``, ``bytes_out``."""
        return self._s.counts()

    def close(self) -> None:
        """Nothing to release but the cache file, which goes with the object."""

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"strata.RemoteStore({self.url!r})"


def open_remote(url: str, cache_dir: str | os.PathLike[str] | None = None,
                cache_bytes: int | None = None) -> RemoteStore:
    """Opens the remote at ``url`` for reading; same as ``RemoteStore(url, ...)``."""
    return RemoteStore(url, cache_dir, cache_bytes)


def commit_parts(url: str, step: int, metadata: Any = None) -> int:
    """Joins the parts pushed for ``step`` (:meth:`strata.Store.push_part`) into one
    checkpoint, visible whole or not at all; returns its number of tensors."""
    from ._store import _metadata_text

    return _native.commit_parts(url, check_step(step), _metadata_text(metadata))


def remote_retain(url: str, max_to_keep: int | None = None, keep_period: int | None = None,
                  keep_tagged: bool = True) -> list[int]:
    """Deletes the remote's checkpoints the policy does not keep (Orbax's names, as
    :meth:`strata.Store.retain`); their segments go at the next :func:`remote_gc` past its
    grace period. Returns the deleted steps."""
    if max_to_keep is not None:
        max_to_keep = check_step(max_to_keep, "max_to_keep")
    if keep_period is not None:
        keep_period = check_step(keep_period, "keep_period")
    return _native.remote_retain(url, max_to_keep, keep_period, bool(keep_tagged))


def remote_gc(url: str, grace_seconds: float = 86400.0) -> dict[str, int]:
    """Deletes segments no checkpoint names, and old trash and parts, once older than
    ``grace_seconds`` (at least one hour)."""
    return _native.remote_gc(url, float(grace_seconds))

"""The Python-facing :class:`Store`, over the native module."""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Iterator

import numpy as np

from . import _handles, _native
from ._convert import (
    check_framework,
    check_name,
    check_step,
    from_bytes,
    snapshot,
    to_bytes,
)

_PY_TIERS = ("exact", "hot8", "warm7", "warm5", "cold3", "absent")


def _metadata_text(metadata: Any) -> str:
    if metadata is None:
        return ""
    if isinstance(metadata, str):
        return metadata
    if isinstance(metadata, Mapping):
        return json.dumps(metadata, sort_keys=True)
    raise TypeError(f"metadata must be a dict or str, not {type(metadata).__name__}")


def _metadata_value(text: str) -> Any:
    if text == "":
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def _items(tensors: Any) -> list[tuple[str, str, list[int], np.ndarray]]:
    if not isinstance(tensors, Mapping):
        raise TypeError(
            f"tensors must be a mapping of name -> tensor (e.g. a state_dict), "
            f"not {type(tensors).__name__}"
        )
    items = []
    for name, value in tensors.items():
        check_name(name)
        if isinstance(value, Mapping):
            raise TypeError(
                f"tensor {name!r} is a nested dict: flatten it first "
                "(strata.flatten joins keys with '/')"
            )
        try:
            dtype, shape, data = to_bytes(value)
        except TypeError as e:
            raise TypeError(f"tensor {name!r}: {e}") from None
        items.append((name, dtype, shape, data))
    return items


class _Reads:
    """The read methods shared by :class:`Store` and :class:`strata.RemoteStore`, over a
    native object (``self._s``) with the same read calls."""

    _s: Any

    # -- reads -----------------------------------------------------------------------------
    def get(
        self, name: str, step: int, framework: str = "np", with_fidelity: bool = False
    ) -> Any:
        """The tensor ``name`` at exactly ``step`` (``framework``: ``"np"`` or ``"pt"``).
        Raises :class:`strata.NotFound` if there is no such version.

        Checkpoints are bit-exact; a tensor under a tier policy (``set_policy``) may have been
        quantized by ``maintain``. With ``with_fidelity=True`` the result is
        ``(tensor, fidelity)``, the fidelity a dict: ``{"kind": "exact"}``,
        ``{"kind": "aged", "rel_error": 0.003}`` (a checkpoint aged by :meth:`Store.age`: the
        relative error measured when it was aged),
        ``{"kind": "bounded", "bits": 5, "max_rel_error": 0.033}`` (each element within that
        fraction of its group's largest magnitude), ``{"kind": "reconstructed", "depth": d}``
        or ``{"kind": "zeros"}``."""
        check_framework(framework)
        if with_fidelity:
            (dtype, shape, data), fidelity = self._s.get_with_fidelity(
                check_name(name), check_step(step)
            )
            return from_bytes(dtype, shape, data, framework), fidelity
        dtype, shape, data = self._s.get(check_name(name), check_step(step))
        return from_bytes(dtype, shape, data, framework)

    def get_at(self, name: str, step: int, framework: str = "np") -> tuple[int, Any]:
        """``(found_step, tensor)``: the latest version of ``name`` at or before ``step``."""
        check_framework(framework)
        found, (dtype, shape, data) = self._s.get_at(check_name(name), check_step(step))
        return found, from_bytes(dtype, shape, data, framework)

    def load_checkpoint(self, step: int, framework: str = "np") -> dict[str, Any]:
        """Every tensor of the checkpoint at ``step`` (name -> tensor, in saved order)."""
        check_framework(framework)
        _meta, tensors = self._s.load_checkpoint(check_step(step))
        return {name: from_bytes(d, s, b, framework) for name, (d, s, b) in tensors}

    def iter_checkpoint(self, step: int, framework: str = "np") -> Iterator[tuple[str, Any]]:
        """``(name, tensor)`` of every tensor of the checkpoint at ``step``, one at a time, in
        saved order: memory holds one tensor, whatever the checkpoint's size."""
        check_framework(framework)
        for name in self.keys(step):
            dtype, shape, data = self._s.get(name, check_step(step))
            yield name, from_bytes(dtype, shape, data, framework)

    def metadata(self, step: int) -> Any:
        """The checkpoint's metadata: the dict saved (JSON), the raw text otherwise."""
        text, _names = self._s.checkpoint_info(check_step(step))
        return _metadata_value(text)

    def keys(self, step: int) -> list[str]:
        """Tensor names of the checkpoint at ``step``."""
        return self._s.checkpoint_info(check_step(step))[1]

    def open_step(self, step: int | None = None, framework: str = "np") -> StepReader:
        """A reader of one checkpoint shaped like safetensors' ``safe_open``; ``step=None``
        is the latest checkpoint."""
        if step is None:
            step = self.latest_step()
            if step is None:
                raise _native.NotFound("the store has no checkpoint")
        return StepReader(self, check_step(step), check_framework(framework))

    def steps(self) -> list[int]:
        """Steps of every checkpoint, ascending."""
        return self._s.checkpoints()

    def latest_step(self) -> int | None:
        """The latest checkpoint's step, or None for a store without checkpoints."""
        steps = self._s.checkpoints()
        return steps[-1] if steps else None

    def tensors(self) -> list[str]:
        """Names of every tensor in the store."""
        return self._s.tensors()

    def versions(self, name: str) -> list[int]:
        """Steps of every version of ``name``."""
        return self._s.versions(check_name(name))

    def history(
        self,
        name: str,
        index: int | slice,
        steps: tuple[int, int] | None = None,
        framework: str = "np",
    ) -> list[tuple[int, Any]]:
        """Flat element(s) ``index`` (an int or a slice of the flattened tensor) of every
        version of ``name`` with a step in ``steps = (first, last)`` (all when None):
        ``[(step, values)]``, each version decoded once."""
        check_framework(framework)
        if isinstance(index, slice):
            if index.step not in (None, 1):
                raise ValueError("history takes a contiguous slice (step 1)")
            start = check_step(index.start or 0, "index")
            if index.stop is None:
                raise ValueError("history needs a slice with an end")
            end = check_step(index.stop, "index")
        else:
            start = check_step(index, "index")
            end = start + 1
        first, last = (0, 2**64 - 1) if steps is None else steps
        dtype, rows = self._s.history(
            check_name(name), start, end, check_step(first), check_step(last)
        )
        return [(s, from_bytes(dtype, (end - start,), b, framework)) for s, b in rows]

    def tags(self) -> dict[str, int]:
        """tag -> step."""
        return dict(self._s.tags())

    # -- safetensors ----------------------------------------------------------------------
    def export_safetensors(self, step: int, path: str | os.PathLike[str]) -> int:
        """Writes the checkpoint at ``step`` as a safetensors file; returns its size."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return self._s.export_safetensors(check_step(step), os.fspath(path))[1]


class _File(_Reads):
    """What a store file opened in this process has, written or read-only: its path, closing
    (also as a context manager), :meth:`verify` and :meth:`stats`. The file is released on
    :meth:`close`, at the end of a ``with`` block, or when the object is garbage collected."""

    @property
    def path(self) -> str:
        return self._s.path

    @property
    def closed(self) -> bool:
        return self._s.closed

    def close(self) -> None:
        """Closes the file (waits for calls in progress); later calls raise
        :class:`strata.StrataError`."""
        self._s.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def verify(self) -> dict[str, Any]:
        """Decodes every block and checks every record: a dict with ``ok`` and ``issues``."""
        return self._s.verify()

    def stats(self) -> dict[str, Any]:
        """Sizes and counts, as ``strata stats`` gives them: ``raw_bytes`` (every version,
        uncompressed), ``stored_bytes`` (segments and records), ``file_bytes`` (the file's
        length), ``disk_bytes`` (what it takes on disk), ``ratio`` (``raw_bytes / disk_bytes``,
        the store's one compression ratio), ``segments``, ``versions``, ``checkpoints``,
        ``tensors`` and ``tier_bytes``."""
        return self._s.stats()


def _check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in options.items():
        if v is not None:
            check_step(v, k)
    return dict(options)


class _Unset:
    """An argument left out (where ``None`` means something else)."""


_UNSET = _Unset()
#: Store.age's budgets by default, and with training_state=True (Rust's
#: AgePolicy::default() and AgePolicy::training_state(); ADR 0027).
_AGE_DEFAULTS = {
    "budget": 1e-3,
    "update_budget": 0.5,
    "first_moment_budget": 1e-2,
    "second_moment_budget": 1e-2,
}
_TRAINING_STATE = {
    "budget": 5e-2,
    "update_budget": 0.8,
    "first_moment_budget": 1.0,
    "second_moment_budget": 0.5,
}


class ReadOnlyStore(_File):
    """A store opened to read beside the process that writes it (:func:`strata.open_read_only`):
    an evaluation job, a monitor or a notebook while a trainer saves checkpoints.

    It has the read methods of :class:`Store` (``get``, ``get_at``, ``load_checkpoint``,
    ``iter_checkpoint``, ``open_step``, ``metadata``, ``steps``, ``latest_step``, ``history``,
    ``tags``, ``export_safetensors``, ``verify``, ``stats``) and no write method. Any number of
    processes may hold one while one writer holds the store. Each call sees the writer's latest
    commit, every checkpoint whole or not at all: ``steps()`` grows as the trainer saves.

    The file must exist (:class:`strata.NotFound` otherwise; nothing is created). A store whose
    last writer crashed is recovered first, as its next writer would (the one case where a
    read-only open writes to the file). Options: ``cache_bytes`` and ``db_cache_bytes``, as
    for :class:`Store`; ``db_cache_bytes`` defaults to 2 MiB here (a reader reads each page
    about once; ADR 0031).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cache_bytes: int | None = None,
        db_cache_bytes: int | None = None,
    ):
        opts = _check_options({"cache_bytes": cache_bytes, "db_cache_bytes": db_cache_bytes})
        self._s = _native.Store(os.fspath(path), read_only=True, **opts)

    def __enter__(self) -> ReadOnlyStore:
        return self

    def __repr__(self) -> str:
        return f"strata.ReadOnlyStore({self.path!r}{', closed' if self.closed else ''})"


class Store(_File):
    """A Strata store file: tensors versioned by step, checkpoints, tags, tiers.

    ``Store(path)`` opens or creates the file to write; one writer at a time (another gets
    :class:`strata.InUse`, whose message says where this process opened the one it holds).
    Other processes read beside it with :func:`strata.open_read_only`. Use it as a context
    manager or call :meth:`close`; a handle that is garbage collected releases the file too.
    Every encode, decode and file operation runs with the GIL released.

    Options (keyword-only, the store's defaults when None): ``block_bytes`` (raw bytes per
    block, 1 MiB), ``max_chain`` (most segments decoded per block read, 6), ``cache_bytes``
    (decoded-block cache, 256 MiB), ``db_cache_bytes`` (redb's page cache, 64 MiB),
    ``window_bytes`` (raw bytes a write encodes at once, 128 MiB: lower it to lower a save's
    peak memory), ``upload`` (a remote URL, ``s3://bucket/prefix`` or ``file:///path``: each
    checkpoint saved is pushed there in the background; :meth:`flush` and :meth:`close` wait
    for the uploads), ``newest_keyframe`` (True: a save stores the newest checkpoint as
    keyframes where a keyframe costs about a delta, and re-encodes the one before against it,
    so that resuming reads no chain; False: forward chains only, faster saves, the newest
    read through up to ``max_chain`` segments; ADR 0006 has the figures).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        block_bytes: int | None = None,
        max_chain: int | None = None,
        cache_bytes: int | None = None,
        db_cache_bytes: int | None = None,
        window_bytes: int | None = None,
        upload: str | None = None,
        newest_keyframe: bool | None = None,
    ):
        if upload is not None and not isinstance(upload, str):
            raise TypeError("upload must be a URL string")
        if newest_keyframe is not None and not isinstance(newest_keyframe, bool):
            raise TypeError("newest_keyframe must be True or False")
        opts = _check_options({
            "block_bytes": block_bytes,
            "max_chain": max_chain,
            "cache_bytes": cache_bytes,
            "db_cache_bytes": db_cache_bytes,
            "window_bytes": window_bytes,
        })
        self._s = _handles.open_native(
            os.fspath(path), upload=upload, newest_keyframe=newest_keyframe, **opts
        )
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        _handles.register(self)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Waits for pending async saves and uploads, then closes the file. An upload that
        failed is raised (as by :meth:`flush`) after the file is closed.

        Closing trims the room the file keeps for growth when its length exceeds what it takes
        on disk by more than a tenth and that grew by a quarter since the last trim, so that
        ``ls -l`` tells its size without a pass over the whole file at every small save; a
        reader in another process in the middle of a read defers that to a later close, and
        the close still succeeds (ADRs 0028, 0036). It also gives back the pages this handle's
        deletions freed (``retain`` keeping room for a next save that a closing handle will
        not write, ``delete_checkpoint``) when they are over a tenth of the stored bytes (ADR
        0038). A handle that is garbage collected does the
        same. :meth:`compact` trims on demand."""
        ex = self._executor
        if ex is not None:
            ex.shutdown(wait=True)
            self._executor = None
        _handles.unregister(self)
        try:
            if not self._s.closed:
                self._s.flush()
        finally:
            self._s.close()

    # -- remotes ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Waits until every checkpoint saved so far is in the ``upload`` remote (at once
        without one); raises :class:`strata.RemoteFailure` if one is still not there (it is
        retried with the next checkpoint and here)."""
        self._s.flush()

    def push(self, url: str) -> dict[str, Any]:
        """Sends the checkpoints the remote at ``url`` lacks (only the segments it lacks),
        and their tags. Raises :class:`strata.Conflict` if it holds a different checkpoint at
        one of this store's steps."""
        return self._s.push(url)

    def push_part(self, url: str, step: int, part: str) -> dict[str, Any]:
        """Pushes the checkpoint at ``step`` as part ``part`` (e.g. ``"rank3"``) of the
        remote's checkpoint ``step``; :func:`strata.commit_parts` joins the parts."""
        return self._s.push_part(url, check_step(step), part)

    def pull(self, url: str) -> dict[str, Any]:
        """Brings the checkpoints of the remote at ``url`` this store lacks, and its tags."""
        return self._s.pull(url)

    def __enter__(self) -> Store:
        return self

    def __repr__(self) -> str:
        return f"strata.Store({self.path!r}{', closed' if self.closed else ''})"

    # -- writes ----------------------------------------------------------------------------
    def save_checkpoint(self, step: int, tensors: Mapping[str, Any], metadata: Any = None) -> None:
        """Saves ``tensors`` (name -> numpy array or torch tensor, e.g. a state_dict) as the
        checkpoint at ``step``, atomically: after a crash all of it is there or none.

        Contiguous CPU inputs are read in place; others are copied to CPU contiguous first.
        ``metadata`` is a JSON-serializable dict (or a str), read back by :meth:`metadata`.
        Tensors sharing storage (tied weights) are stored once per name.
        """
        step = check_step(step)
        items = _items(tensors)
        self._s.save_checkpoint(step, items, _metadata_text(metadata))

    def save_checkpoint_from(
        self,
        step: int,
        sources: Iterable[tuple[str | os.PathLike[str], int]],
        metadata: Any = None,
    ) -> int:
        """Saves the checkpoint at ``step``, atomically, from checkpoints of other stores:
        ``sources`` are ``(store path, step)`` pairs, each store opened read-only and copied
        tensor by tensor in its saved order, so memory holds a batch of blocks, not the
        checkpoint. Tensor names must not repeat across the sources. Returns the number of
        tensors."""
        step = check_step(step)
        pairs = [(os.fspath(p), check_step(s)) for p, s in sources]
        return self._s.save_checkpoint_from(step, pairs, _metadata_text(metadata))

    def save_checkpoint_async(
        self, step: int, tensors: Mapping[str, Any], metadata: Any = None
    ) -> concurrent.futures.Future[None]:
        """Copies ``tensors`` to private CPU buffers now, then saves them in a background
        thread (GIL released while encoding and writing). Saves run one at a time in the
        order they were asked. Returns a :class:`concurrent.futures.Future`."""
        step = check_step(step)
        if not isinstance(tensors, Mapping):
            raise TypeError(f"tensors must be a mapping, not {type(tensors).__name__}")
        items = _items({k: snapshot(v) for k, v in tensors.items()})
        text = _metadata_text(metadata)
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="strata-save"
                )
            return self._executor.submit(self._s.save_checkpoint, step, items, text)

    def put(self, name: str, step: int, tensor: Any) -> None:
        """Writes one version of one tensor, outside any checkpoint."""
        check_name(name)
        step = check_step(step)
        dtype, shape, data = to_bytes(tensor)
        self._s.put(name, step, dtype, shape, data)

    def delete(self, name: str, step: int) -> None:
        """Deletes version ``step`` of ``name`` (dependent versions are re-based)."""
        self._s.delete(check_name(name), check_step(step))

    def delete_checkpoint(self, step: int) -> None:
        """Deletes the checkpoint at ``step``, its tensor versions and its tags."""
        self._s.delete_checkpoint(check_step(step))

    # -- tags, retention -------------------------------------------------------------------
    def tag(self, tag: str, step: int) -> None:
        """Names the checkpoint at ``step`` (moves the tag if it exists)."""
        if not isinstance(tag, str):
            raise TypeError("tag must be a str")
        self._s.tag(tag, check_step(step))

    def untag(self, tag: str) -> None:
        self._s.untag(tag)

    def retain(
        self,
        max_to_keep: int | None = None,
        keep_period: int | None = None,
        keep_tagged: bool = True,
    ) -> dict[str, Any]:
        """Keeps the ``max_to_keep`` latest checkpoints, every checkpoint whose step is a
        multiple of ``keep_period`` and (``keep_tagged``) the tagged ones; deletes the rest
        and compacts the file (Orbax's names; the store's ``keep_last`` / ``keep_every``).
        A call that deletes one checkpoint (one after every save) keeps the room it freed for
        the next save and retention when it is no more than they will take, instead of
        passing over the whole store: ``compacted`` is then false and
        ``compaction_deferred`` says so; :meth:`close` or :meth:`compact` returns the room
        (ADRs 0037, 0038). At least one of ``max_to_keep`` and ``keep_period`` is required."""
        if max_to_keep is not None:
            max_to_keep = check_step(max_to_keep, "max_to_keep")
        if keep_period is not None:
            keep_period = check_step(keep_period, "keep_period")
        return self._s.retain(max_to_keep, keep_period, bool(keep_tagged))

    def age(
        self,
        keep_exact_last: int = 2,
        keep_exact_every: int | None = None,
        keep_tagged: bool = True,
        budget: float | None = None,
        update_budget: float | None | _Unset = _UNSET,
        exact: Iterable[str] | None = None,
        budgets: Mapping[str, float] | None = None,
        steps: Iterable[int] | None = None,
        *,
        yes: bool = False,
        dry_run: bool = False,
        training_state: bool = False,
        first_moment_budget: float | None | _Unset = _UNSET,
        second_moment_budget: float | None | _Unset = _UNSET,
        roles: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Re-encodes old checkpoints lossy (quantized deltas, ADR 0020): the
        ``keep_exact_last`` latest, every ``keep_exact_every``-th and (``keep_tagged``) the
        tagged checkpoints stay bit-exact; in the others every tensor of two or more
        dimensions is kept within a relative Frobenius error of ``budget`` per block
        (``budgets``: pattern -> error for some tensors), and within ``update_budget`` of its
        distance from the newer checkpoint it is a delta against (so an old checkpoint never
        turns into a newer one; ``None``: no such bound); scalars, 1-D weights (norms,
        biases), counters, pinned tensors and those matching a pattern of ``exact`` stay exact
        (the moments of norms and biases age by their role). ``steps`` ages just
        those checkpoints (:class:`strata.InvalidInput` if the rules keep one exact). Reads of an aged
        version give ``{"kind": "aged", "rel_error": e}`` as fidelity. Compacts the file and
        returns a report: ``aged``, ``kept``, ``versions_aged``, ``versions_exact``,
        ``blocks_unmet``, ``max_rel_error``, stored and file bytes before and after,
        ``compaction_deferred`` (why the file was not compacted after the committed pass, or
        None).

        Aging cannot be undone: ``budget`` must be given (or ``yes=True`` for the default,
        1e-3), else :class:`strata.InvalidInput`. ``dry_run=True`` runs the same pass and
        rolls it back: the report says what would be aged and the stored bytes after, and
        nothing changes (ADR 0024).

        Training state (ADR 0027): each tensor's role is read from its name (the names the
        drop-ins and PyTorch's optimizers give: ``.../exp_avg``, ``.../exp_avg_sq``,
        ``.../step``), or from ``roles`` (pattern -> ``"weight"``, ``"first-moment"``,
        ``"second-moment"``, ``"counter"``, ``"state"``). Weights take ``budget``; first
        moments ``first_moment_budget`` (a relative error per block; 1.0 lets them read back
        as zeros); second moments ``second_moment_budget`` (a relative error of each element,
        in a log domain: never below zero); ``None`` keeps those exact. Counters, scheduler
        and RNG state stay exact, and so does any block whose values are all integers.
        ``training_state=True`` takes the budgets measured to keep training resumed from every
        aged checkpoint within 1 % of the exact one (budget 5e-2, update_budget 0.8,
        first_moment_budget 1.0, second_moment_budget 0.5); arguments given beat it. Without
        it the defaults are update_budget 0.5 and 1e-2 for both moments."""
        preset = _TRAINING_STATE if training_state else _AGE_DEFAULTS
        if update_budget is _UNSET:
            update_budget = preset["update_budget"]
        if first_moment_budget is _UNSET:
            first_moment_budget = preset["first_moment_budget"]
        if second_moment_budget is _UNSET:
            second_moment_budget = preset["second_moment_budget"]
        if budget is None and training_state:
            budget = preset["budget"]
        if budget is None:
            if not yes:
                raise _native.InvalidInput(
                    "age needs an explicit budget= (a relative error per block, e.g. 1e-3), or "
                    "yes=True for the default 1e-3: aging rewrites old checkpoints lossily and "
                    "cannot be undone; dry_run=True shows what it would do"
                )
            budget = 1e-3
        rules: list[tuple[str, float | None]] = [(str(p), None) for p in exact or ()]
        rules += [(str(p), float(e)) for p, e in (budgets or {}).items()]
        return self._s.age(
            check_step(keep_exact_last, "keep_exact_last"),
            None if keep_exact_every is None else check_step(keep_exact_every, "keep_exact_every"),
            bool(keep_tagged),
            float(budget),
            None if update_budget is None else float(update_budget),
            rules,
            None if steps is None else [check_step(s) for s in steps],
            bool(dry_run),
            None if first_moment_budget is None else float(first_moment_budget),
            None if second_moment_budget is None else float(second_moment_budget),
            [(str(p), str(r)) for p, r in (roles or {}).items()],
        )

    def compact(self) -> bool:
        """Shrinks the file to its live pages (after deletes, and the growth slack redb leaves
        after large writes; ``retain`` compacts by itself unless it keeps room for the next
        save). Waits for calls in progress."""
        return self._s.compact()

    # -- safetensors ----------------------------------------------------------------------
    def import_safetensors(self, path: str | os.PathLike[str], step: int) -> int:
        """Saves a safetensors file as the checkpoint at ``step`` (its ``__metadata__`` as
        the metadata); returns the number of tensors."""
        return self._s.import_safetensors(os.fspath(path), check_step(step))[0]

    # -- tiers, upkeep ---------------------------------------------------------------------
    def set_policy(
        self,
        pattern: str,
        tier: str = "hot8",
        residual: str | None = None,
        pinned: bool = False,
    ) -> None:
        """Tier policy for tensors whose names match ``pattern`` (``*`` wildcards): ``tier``
        is one of exact, hot8, warm7, warm5, cold3, absent; ``residual`` None, "exact" or
        "topk:F"; ``pinned`` keeps blocks at ``tier``. Checkpoint tensors stay lossless."""
        if tier not in _PY_TIERS:
            raise ValueError(f"unknown tier {tier!r} (one of {', '.join(_PY_TIERS)})")
        self._s.set_policy(pattern, tier, residual or "none", bool(pinned))

    def remove_policy(self, pattern: str) -> None:
        self._s.remove_policy(pattern)

    def maintain(self, now_ms: int | None = None) -> dict[str, Any]:
        """One tier maintenance pass (moves blocks between tiers by read scores), then a
        compaction when it re-encoded anything: ``file_bytes_before`` and
        ``file_bytes_after`` say what the file went from and to."""
        return self._s.maintain(None if now_ms is None else check_step(now_ms, "now_ms"))


def _slice_rows(index: Any, rows: int) -> tuple[int, int, Any]:
    """(first row, end row, index to apply to the rows read) for a get_slice index."""
    first = index[0] if isinstance(index, tuple) and index else index
    rest = index[1:] if isinstance(index, tuple) else ()
    if isinstance(first, slice):
        start, stop, step = first.indices(rows)
        if step == 1:
            return start, max(start, stop), (slice(None),) + tuple(rest)
        picked = range(start, stop, step)
        if len(picked) == 0:
            return 0, 0, (slice(None),) + tuple(rest)
        lo, hi = min(picked), max(picked) + 1
        return lo, hi, ([i - lo for i in picked],) + tuple(rest)
    if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
        i = int(first)
        if i < 0:
            i += rows
        if not 0 <= i < rows:
            raise IndexError(f"index {int(first)} is out of range for {rows} rows")
        return i, i + 1, (0,) + tuple(rest)
    if first is Ellipsis:
        return 0, rows, index
    raise TypeError(f"unsupported index {index!r} (ints and slices)")


class TensorSlice:
    """A lazily read tensor (``StepReader.get_slice``): indexing the first dimension decodes
    only the blocks holding those rows; further dimensions are sliced after reading."""

    def __init__(self, reader: StepReader, name: str, dtype: str, shape: list[int]):
        self._r, self._name, self._dtype, self._shape = reader, name, dtype, shape

    def get_shape(self) -> list[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._dtype

    @property
    def shape(self) -> list[int]:
        return list(self._shape)

    def __getitem__(self, index: Any) -> Any:
        if not self._shape:
            raise IndexError("a 0-dimensional tensor cannot be sliced; use get_tensor")
        rows = self._shape[0]
        row_elems = int(np.prod(self._shape[1:], dtype=np.int64))
        lo, hi, rest = _slice_rows(index, rows)
        data = self._r._store._s.get_range(
            self._name, self._r.step, lo * row_elems, hi * row_elems
        )
        t = from_bytes(self._dtype, [hi - lo, *self._shape[1:]], data, self._r.framework)
        return t[rest]


class StepReader:
    """One checkpoint, read like safetensors' ``safe_open``: ``keys()``, ``get_tensor``,
    ``get_slice``, ``metadata()``."""

    def __init__(self, store: Store, step: int, framework: str):
        self._store, self.step, self.framework = store, step, framework
        text, names = store._s.checkpoint_info(step)
        self._meta, self._names = text, names
        self._set = set(names)

    def __enter__(self) -> StepReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def keys(self) -> list[str]:
        return list(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def metadata(self) -> Any:
        """The checkpoint's metadata, as :meth:`Store.metadata` gives it: the dict saved
        (JSON; ``{}`` when none was), the raw text otherwise. (``strata.torch.safe_open``'s
        reader gives safetensors' ``dict[str, str] | None`` instead.)"""
        return _metadata_value(self._meta)

    def _check(self, name: str) -> None:
        if name not in self._set:
            raise _native.NotFound(f"checkpoint {self.step} has no tensor {name!r}")

    def get_tensor(self, name: str) -> Any:
        self._check(name)
        dtype, shape, data = self._store._s.get(name, self.step)
        return from_bytes(dtype, shape, data, self.framework)

    def get_slice(self, name: str) -> TensorSlice:
        self._check(name)
        dtype, shape = self._store._s.info(name, self.step)
        return TensorSlice(self, name, dtype, shape)


def open(path: str | os.PathLike[str], **options: Any) -> Store:  # noqa: A001
    """Opens (or creates) a store to write; same as ``Store(path, **options)``."""
    return Store(path, **options)


def open_read_only(path: str | os.PathLike[str], **options: Any) -> ReadOnlyStore:
    """Opens an existing store to read beside its writer; same as
    ``ReadOnlyStore(path, **options)``."""
    return ReadOnlyStore(path, **options)

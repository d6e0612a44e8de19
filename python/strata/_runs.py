"""Training runs in one store (ADR 0026).

A store holds one line of checkpoints: step ``k`` is one checkpoint. The trainer drop-ins
(``strata.hf``, ``strata.lightning``, ``strata.dcp``) mark every checkpoint they write with the
id of the run that wrote it (``strata.run_id`` in its metadata) and an id of its own
(``strata.checkpoint_id``, which Lightning's pointer files repeat), and before writing they look
for checkpoints *ahead of the run*: in the store, not written by this run, at a step after the
one the run resumed from (any step, for a run that started fresh). Those belong to another run,
or to a continuation of this one that was abandoned; a run that wrote past them would leave a
store whose latest checkpoint, or whose step ``k``, is another run's. So the run refuses
(:class:`strata.CheckpointExists`, before training where the framework allows) unless it was
made with ``overwrite=True``, which deletes them as the run writes its first checkpoint.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ._native import CheckpointExists, NotFound

#: Metadata key: the id of the run that wrote the checkpoint.
RUN_KEY = "strata.run_id"
#: Metadata key: the checkpoint's own id (a pointer to it repeats it).
CHECKPOINT_KEY = "strata.checkpoint_id"

log = logging.getLogger("strata")


class StaleCheckpoint(NotFound):
    """A pointer (a Lightning ``.ckpt`` file) names a checkpoint that is no longer in the store
    as it was written: it was deleted, or replaced at its step by another run's."""

    __module__ = "strata"


def new_id() -> str:
    """A fresh run or checkpoint id (128 random bits, hex)."""
    return uuid.uuid4().hex


def _run_of(st: Any, step: int) -> str:
    meta = st.metadata(step)
    return meta.get(RUN_KEY, "unknown") if isinstance(meta, dict) else "unknown"


def _listing(steps: list[int]) -> str:
    shown = ", ".join(str(s) for s in steps[:8])
    return shown if len(steps) <= 8 else f"{shown}, ... ({len(steps)} checkpoints)"


class RunWrites:
    """One run's writes into one store: its id, where it started, what it wrote.

    ``owner`` names the drop-in in messages (``"StrataCallback"``); ``run_id`` (a new id when
    None) is written into every checkpoint; ``overwrite`` decides what checkpoints ahead of the
    run meet (see the module doc).
    """

    def __init__(self, owner: str, run_id: str | None = None, overwrite: bool = False):
        if run_id is not None and not isinstance(run_id, str):
            raise TypeError(f"run_id must be a str, not {type(run_id).__name__}")
        self.owner = owner
        self.run_id = run_id or new_id()
        self._chosen_id = run_id is not None
        self.overwrite = bool(overwrite)
        self.start: int | None = None
        self._doing = "started fresh"
        self._written: dict[int, str] = {}

    def begin(self, st: Any, start: int | None, adopt: bool = True,
              doing: str | None = None) -> None:
        """A run starts: fresh (``start`` None) or resumed from the checkpoint at ``start``,
        whose run id it takes (``adopt``) unless one was given. Refuses checkpoints ahead of it
        at once (without ``overwrite``). ``doing`` says what the run does in messages
        (default: how it started)."""
        self.start = start
        self._doing = doing or (
            "started fresh" if start is None else f"resumed from step {start}")
        self._written.clear()
        if adopt and start is not None and not self._chosen_id and start in st.steps():
            meta = st.metadata(start)
            if isinstance(meta, dict) and isinstance(meta.get(RUN_KEY), str):
                self.run_id = meta[RUN_KEY]
        self.claim(st, delete=False)

    def written(self, step: int) -> str | None:
        """The id of the checkpoint this run wrote at ``step``, or None."""
        return self._written.get(step)

    def ahead(self, st: Any) -> list[int]:
        """Steps of the checkpoints ahead of this run (see the module doc)."""
        after = -1 if self.start is None else self.start
        return [s for s in st.steps() if s > after and s not in self._written]

    def claim(self, st: Any, delete: bool = True) -> None:
        """Makes sure no checkpoint is ahead of this run: raises
        :class:`strata.CheckpointExists` naming them, or with ``overwrite`` (and ``delete``)
        deletes them."""
        ahead = self.ahead(st)
        if not ahead:
            return
        if not self.overwrite:
            raise CheckpointExists(
                f"store {st.path} holds checkpoints this run did not write, at steps "
                f"{_listing(ahead)} (run {_run_of(st, ahead[-1])}); this run ({self.run_id}) "
                f"{self._doing}, and writing past them would mix two runs in one store. Pass "
                f"overwrite=True to {self.owner} to delete them as this run saves, or save "
                "into a new store"
            )
        if delete:
            for s in ahead:
                log.warning("%s: deleting checkpoint %d of %s (run %s): overwrite=True",
                            self.owner, s, st.path, _run_of(st, s))
                st.delete_checkpoint(s)

    def stamp(self, step: int) -> dict[str, str]:
        """The metadata entries of the checkpoint this run writes at ``step`` (recorded as
        written by it)."""
        checkpoint_id = new_id()
        self._written[step] = checkpoint_id
        return {RUN_KEY: self.run_id, CHECKPOINT_KEY: checkpoint_id}


def check_pointer(st: Any, step: int, checkpoint_id: str, run_id: str, pointer: str) -> None:
    """Raises :class:`StaleCheckpoint` unless the checkpoint at ``step`` is the one with
    ``checkpoint_id`` (written by run ``run_id``) that ``pointer`` was written for."""
    if step not in st.steps():
        raise StaleCheckpoint(
            f"{pointer} names checkpoint {step} of {st.path} (run {run_id}), which is no "
            "longer there (deleted by retention, remove_checkpoint or another run's overwrite)"
        )
    meta = st.metadata(step)
    if not isinstance(meta, dict) or meta.get(CHECKPOINT_KEY) != checkpoint_id:
        raise StaleCheckpoint(
            f"{pointer} names checkpoint {step} of {st.path} as run {run_id} wrote it, but "
            f"step {step} now holds another checkpoint (run {_run_of(st, step)}): the one it "
            "named was replaced, so it is not loaded"
        )

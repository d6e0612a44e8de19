"""Hugging Face ``transformers`` integration.

- :class:`StrataCallback`: a ``TrainerCallback`` that saves the training state into a Strata
  store at every save the Trainer decides on (``save_strategy``, ``save_steps``), at step
  ``state.global_step``: the model's ``state_dict``, and (``save_optimizer=True``, the default)
  the optimizer's and LR scheduler's state (their tensors under ``__trainer__/...``, flattened by
  :func:`strata.flatten`, the rest pickled in the metadata), the RNG states, the names of the
  parameters of each optimizer group, and the Trainer's state (``trainer_state.json``). With
  ``trainer_folders=False`` the Trainer's own ``checkpoint-*`` folders are not written: the
  store holds the run alone.
- :func:`checkpoint_folder`: a checkpoint of the store as the folder
  ``Trainer.train(resume_from_checkpoint=...)`` reads, so a run resumes from the store with the
  Trainer's own resume logic (model, optimizer, scheduler, RNG, trainer state, data skipping).
- :func:`load_into_model`: loads any step into a model (``load_state_dict``), and into an
  optimizer and scheduler when given; :func:`load_trainer_state` returns their state dicts.

Runs: every checkpoint carries the id of the run that wrote it; a run that finds checkpoints
in the store it did not write, after the step it starts from, refuses to train unless
``overwrite=True`` (ADR 0026, ``strata._runs``).

Tied weights (e.g. ``lm_head.weight`` and the input embedding) appear under both names in a
``state_dict`` and are stored under both names.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pickle
import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback

from ._flatten import SEP, flatten, unflatten
from ._handles import reading
from ._native import InvalidInput, NotFound
from ._runs import RunWrites
from ._store import Store

__all__ = [
    "StrataCallback",
    "checkpoint_folder",
    "load_into_model",
    "load_trainer_state",
]

#: Prefix of the optimizer's, scheduler's and RNG tensors in a checkpoint.
TRAINER_PREFIX = "__trainer__" + SEP
#: Metadata key of their pickled skeleton.
TRAINER_KEY = "strata.hf.trainer_state"
#: Metadata key of the Trainer's state (``TrainerState`` as its trainer_state.json holds it).
STATE_KEY = "strata.hf.trainer_state_json"


def _rng_states() -> dict[str, Any]:
    """The RNG states the Trainer saves in ``rng_state.pth`` (one process)."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.random.get_rng_state_all()
    return states


class StrataCallback(TrainerCallback):
    """Saves the training state into the store at ``store_path`` at every save of the Trainer.

    - ``asynchronous=True`` copies the tensors and writes them in a background thread.
    - ``save_optimizer=False`` saves the model's weights (and the trainer state) only.
    - ``trainer_folders=False``: the Trainer's ``checkpoint-*`` folders are not written (the
      callback saves instead of the Trainer, at the same steps). Not with
      ``load_best_model_at_end``, ``save_strategy="best"`` or other stateful callbacks
      (``EarlyStoppingCallback``), which need the folders: refused at the start of training.
    - ``overwrite``: what to do with checkpoints this run did not write, after the step it
      starts from (all of them for a fresh run): by default training does not start
      (:class:`strata.CheckpointExists`); ``overwrite=True`` deletes them when this run saves.
    - ``run_id``: the run's id in each checkpoint's metadata (``strata.run_id``); a new one by
      default, the resumed checkpoint's when the Trainer resumes.
    """

    def __init__(
        self,
        store_path: str | os.PathLike[str],
        asynchronous: bool = False,
        save_optimizer: bool = True,
        trainer_folders: bool = True,
        overwrite: bool = False,
        run_id: str | None = None,
    ):
        self.store_path = os.fspath(store_path)
        self.asynchronous = asynchronous
        self.save_optimizer = save_optimizer
        self.trainer_folders = trainer_folders
        self.run = RunWrites("StrataCallback", run_id, overwrite)
        self._store: Store | None = None
        self._pending: list[Any] = []

    @property
    def store(self) -> Store:
        if self._store is None or self._store.closed:
            self._store = Store(self.store_path)
        return self._store

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any):
        if not getattr(state, "is_world_process_zero", True):
            return control
        if not self.trainer_folders:
            _check_without_folders(args, state)
        start = int(state.global_step)
        self.run.begin(self.store, start if start > 0 else None)
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any):
        return self._save_instead_of_trainer(state, control, kwargs)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any):
        return self._save_instead_of_trainer(state, control, kwargs)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any):
        if self.trainer_folders:
            self._save(state, kwargs)
        return control

    def _save_instead_of_trainer(self, state: Any, control: Any, kwargs: dict[str, Any]):
        """Without folders: the save the Trainer is about to make (``should_save``, set by its
        flow callback, which runs first) is made here, and the Trainer's is called off."""
        if self.trainer_folders or not control.should_save:
            return control
        # As Trainer._save_checkpoint records it in the trainer state it saves.
        state.stateful_callbacks["TrainerControl"] = control.state()
        control.should_save = False
        self._save(state, kwargs)
        return control

    def _save(self, state: Any, kwargs: dict[str, Any]) -> None:
        model = kwargs.get("model")
        if model is None or not getattr(state, "is_world_process_zero", True):
            return
        step = int(state.global_step)
        if self.run.written(step) is not None:
            return  # the same state, saved again at the same step
        st = self.store
        self.run.claim(st)
        meta: dict[str, Any] = {"epoch": state.epoch, "global_step": step,
                                STATE_KEY: dataclasses.asdict(state)}
        if state.log_history:
            meta["log"] = state.log_history[-1]
        sd = dict(model.state_dict())
        trainer_state: dict[str, Any] = {"rng_state": _rng_states()}
        optimizer, scheduler = kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        if self.save_optimizer and optimizer is not None:
            names = {id(p): n for n, p in model.named_parameters()}
            trainer_state["optimizer"] = optimizer.state_dict()
            trainer_state["param_names"] = [
                [names.get(id(p)) for p in group["params"]] for group in optimizer.param_groups
            ]
            if scheduler is not None:
                trainer_state["lr_scheduler"] = scheduler.state_dict()
        tensors, skeleton = flatten(trainer_state)
        for name, t in tensors.items():
            sd[TRAINER_PREFIX + name] = t
        meta[TRAINER_KEY] = base64.b64encode(pickle.dumps(skeleton, protocol=4)).decode("ascii")
        meta.update(self.run.stamp(step))
        if self.asynchronous:
            self._pending.append(st.save_checkpoint_async(step, sd, metadata=meta))
        else:
            st.save_checkpoint(step, sd, metadata=meta)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any):
        try:
            for fut in self._pending:
                fut.result()
        finally:
            self._pending.clear()
            if self._store is not None:
                self._store.close()
                self._store = None
        return control


def _check_without_folders(args: Any, state: Any) -> None:
    """Refuses what needs the Trainer's checkpoint folders, with what to change."""
    strategy = getattr(args.save_strategy, "value", args.save_strategy)
    if getattr(args, "load_best_model_at_end", False) or strategy == "best":
        raise ValueError(
            "StrataCallback(trainer_folders=False) cannot serve load_best_model_at_end or "
            "save_strategy='best' (the Trainer loads the best model from its folders): "
            "keep trainer_folders=True for them"
        )
    others = sorted(set(state.stateful_callbacks) - {"TrainerControl"})
    if others:
        raise ValueError(
            f"StrataCallback(trainer_folders=False) cannot save the state of {', '.join(others)} "
            "(only the Trainer sees it when it writes a folder): keep trainer_folders=True"
        )


def _load(store_path: str | os.PathLike[str], step: int | None) -> tuple[int, dict, Any]:
    with reading(store_path) as st:
        if step is None:
            step = st.latest_step()
            if step is None:
                raise NotFound(f"store {os.fspath(store_path)} has no checkpoint")
        return step, st.load_checkpoint(step, framework="pt"), st.metadata(step)


def _split(sd: dict, meta: Any) -> tuple[dict, dict[str, Any] | None]:
    model = {k: v for k, v in sd.items() if not k.startswith(TRAINER_PREFIX)}
    if not isinstance(meta, dict) or TRAINER_KEY not in meta:
        return model, None
    skeleton = pickle.loads(base64.b64decode(meta[TRAINER_KEY]))
    tensors = {k[len(TRAINER_PREFIX):]: v for k, v in sd.items() if k.startswith(TRAINER_PREFIX)}
    return model, unflatten(skeleton, tensors)


def _no_state(store_path: Any, step: int, what: str) -> NotFound:
    return NotFound(
        f"checkpoint {step} of {os.fspath(store_path)} holds no {what} (saved with "
        "save_optimizer=False, or by an older strata)"
    )


def load_trainer_state(store_path: str | os.PathLike[str], step: int | None = None) -> dict[str, Any]:
    """The training state saved at ``step`` (latest when None): ``"optimizer"`` and
    ``"lr_scheduler"`` (their state dicts), ``"param_names"`` (the model's parameter names in
    each optimizer group) and ``"rng_state"``. Raises :class:`strata.NotFound` if the
    checkpoint holds no optimizer state."""
    step, sd, meta = _load(store_path, step)
    _, state = _split(sd, meta)
    if state is None or "optimizer" not in state:
        raise _no_state(store_path, step, "optimizer state")
    return state


def _load_optimizer(optimizer: Any, model: Any, state: dict[str, Any], scheduler: Any) -> None:
    """Loads ``state["optimizer"]``; an optimizer whose parameter groups are not the saved
    ones (a fresh ``AdamW(model.parameters())`` against the Trainer's decay / no-decay groups)
    first takes the saved groups: their parameters by name, their hyper-parameters."""
    saved = state["optimizer"]
    sizes = [len(g["params"]) for g in saved["param_groups"]]
    if sizes == [len(g["params"]) for g in optimizer.param_groups]:
        optimizer.load_state_dict(saved)
        return
    names = state.get("param_names")
    if names is None:
        raise InvalidInput(
            f"the checkpoint's optimizer has parameter groups of {sizes} parameters, this one "
            f"{[len(g['params']) for g in optimizer.param_groups]}, and the checkpoint does not "
            "name them (saved by an older strata): build the optimizer as the run did "
            "(Trainer.create_optimizer())"
        )
    if scheduler is not None:
        raise InvalidInput(
            "the optimizer takes the checkpoint's parameter groups, which the LR scheduler was "
            "not built for: load the optimizer first (load_into_model(..., optimizer=opt)), "
            "then build the scheduler on it and load_state_dict(load_trainer_state(...)"
            "['lr_scheduler'])"
        )
    params = dict(model.named_parameters())
    missing = [n for group in names for n in group if n not in params]
    if missing:
        raise InvalidInput(f"the model has no parameters {missing[:5]} the optimizer state names")
    optimizer.param_groups.clear()
    optimizer.state.clear()
    for group, group_names in zip(saved["param_groups"], names):
        settings = {k: v for k, v in group.items() if k not in ("params", "param_names")}
        optimizer.add_param_group({**settings, "params": [params[n] for n in group_names]})
    optimizer.load_state_dict(saved)


def load_into_model(
    model: Any, store_path: str | os.PathLike[str], step: int | None = None, strict: bool = True,
    optimizer: Any = None, lr_scheduler: Any = None,
) -> int:
    """Loads the checkpoint at ``step`` (latest when None) into ``model``, and the saved
    optimizer and scheduler state into ``optimizer`` and ``lr_scheduler`` when given (raising
    :class:`strata.NotFound` if the checkpoint holds none); returns the step.

    An ``optimizer`` whose parameter groups differ from the saved ones (``AdamW(
    model.parameters())`` has one group, the Trainer's two) takes the saved groups: their
    parameters (by name) and hyper-parameters. Build a scheduler after that, not before."""
    step, sd, meta = _load(store_path, step)
    weights, state = _split(sd, meta)
    model.load_state_dict(weights, strict=strict)
    if optimizer is not None or lr_scheduler is not None:
        if state is None or "optimizer" not in state:
            raise _no_state(store_path, step, "optimizer state")
        if optimizer is not None:
            _load_optimizer(optimizer, model, state, lr_scheduler)
        if lr_scheduler is not None and "lr_scheduler" in state:
            lr_scheduler.load_state_dict(state["lr_scheduler"])
    return step


def _trainer_rng(rng: dict[str, Any]) -> dict[str, Any]:
    """The RNG states as the Trainer's ``rng_state.pth`` holds them: NumPy's key (stored as a
    tensor, as every array of the state) back as an array."""
    name, keys, *rest = rng["numpy"]
    return dict(rng, numpy=(name, keys.numpy(), *rest))


@contextmanager
def checkpoint_folder(
    store_path: str | os.PathLike[str], step: int | None = None,
    dir: str | os.PathLike[str] | None = None,  # noqa: A002 - tempfile's name
) -> Iterator[str]:
    """The checkpoint at ``step`` (latest when None) written out as a Trainer checkpoint folder
    (``model.safetensors``, ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``,
    ``trainer_state.json``) in a temporary directory (under ``dir``), removed on exit::

        with strata.hf.checkpoint_folder("run.strata") as folder:
            trainer.train(resume_from_checkpoint=folder)

    The Trainer resumes from it as from its own folders. Raises :class:`strata.NotFound` if
    the checkpoint was not saved by :class:`StrataCallback` with its optimizer state."""
    from safetensors.torch import save_file

    step, sd, meta = _load(store_path, step)
    weights, state = _split(sd, meta)
    if state is None or "lr_scheduler" not in state or STATE_KEY not in meta:
        raise _no_state(store_path, step, "optimizer, scheduler and trainer state to resume from")
    top = tempfile.mkdtemp(prefix="strata-resume-", dir=dir)
    try:
        folder = os.path.join(top, f"checkpoint-{step}")
        os.makedirs(folder)
        save_file(weights, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        torch.save(state["optimizer"], os.path.join(folder, "optimizer.pt"))
        torch.save(state["lr_scheduler"], os.path.join(folder, "scheduler.pt"))
        torch.save(_trainer_rng(state["rng_state"]), os.path.join(folder, "rng_state.pth"))
        with open(os.path.join(folder, "trainer_state.json"), "w") as f:
            json.dump(meta[STATE_KEY], f)
        yield folder
    finally:
        shutil.rmtree(top, ignore_errors=True)

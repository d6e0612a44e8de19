"""Full training state (weights, AdamW, LR scheduler, RNG) as one safetensors file, and back.

A checkpoint is laid out as Strata's Hugging Face drop-in (``python/strata/hf.py``,
``StrataCallback``) lays one out in a store, so a store of these files holds the names a trainer's
store holds:

- the model's ``state_dict()`` under its own names (``blocks.0.attn.in_proj_weight``, ...);
- the drop-in's trainer state, ``{"rng_state": ..., "optimizer": ..., "param_names": ...,
  "lr_scheduler": ...}``, flattened by ``strata.flatten``'s rule (``python/strata/_flatten.py``:
  keys joined with ``/``) under the prefix ``__trainer__/``: ``__trainer__/optimizer/state/N/exp_avg``,
  ``.../exp_avg_sq``, ``.../step`` (AdamW's step counter, a 0-d f32 tensor), and the RNG states of
  the Trainer's ``rng_state.pth`` (``__trainer__/rng_state/cpu``: torch's CPU generator, u8;
  ``__trainer__/rng_state/numpy/1``: NumPy's MT19937 keys, u32);
- what is not a tensor (param groups and their hyper-parameters, the parameters' names per group,
  the scheduler's counters, Python's RNG state, the tensors' places) pickled, base64, in the
  metadata key ``strata.hf.trainer_state``, as the drop-in keeps it; the generator's settings as
  JSON under ``strata.trainstate.config``.

Variants: ``f32`` trains an f32 model with ``torch.optim.AdamW`` over its parameters. ``bf16`` is
the mixed-precision layout: the model's parameters are bf16, AdamW updates f32 master copies, and the
optimizer's state dict is Megatron's ``Float16OptimizerWithFloat16Params`` one
(``{"optimizer": <AdamW's>, "fp32_from_fp16_params": [[masters]]}``), so the names are
``__trainer__/optimizer/optimizer/state/N/exp_avg`` and
``__trainer__/optimizer/fp32_from_fp16_params/0/N``.

:meth:`TrainState.load` rebuilds model, optimizer, scheduler and RNG from one file: training on
from it gives the same bits as the run that wrote it (``test_trainstate.py`` checks it).
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import math
import pickle
import random
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from model import GPT, THREADS



def _strata_flatten() -> types.ModuleType:
    """``strata._flatten``: the installed package's, or else the repository's source registered
    under that name without the package's ``__init__`` (which loads the native module). The
    skeleton's ``Slot`` objects pickle as ``strata._flatten.Slot`` either way, so the drop-ins
    (``strata.hf``) unpickle these checkpoints' metadata, as they do their own."""
    try:
        return importlib.import_module("strata._flatten")
    except ImportError:
        pass
    pkg = types.ModuleType("strata")
    pkg.__path__ = [str(Path(__file__).resolve().parents[2] / "python" / "strata")]
    sys.modules["strata"] = pkg
    return importlib.import_module("strata._flatten")


_flat = _strata_flatten()
SEP, flatten, unflatten = _flat.SEP, _flat.flatten, _flat.unflatten

#: Prefix of the optimizer's, scheduler's and RNG's tensors (``strata.hf.TRAINER_PREFIX``).
TRAINER_PREFIX = "__trainer__" + SEP
#: Metadata key of the pickled non-tensor state (``strata.hf.TRAINER_KEY``).
TRAINER_KEY = "strata.hf.trainer_state"
#: Metadata key of the generator's settings.
CONFIG_KEY = "strata.trainstate.config"
#: Roles a tensor of a checkpoint can have, in table order.
ROLES = ("weights", "master", "exp_avg", "exp_avg_sq", "other")


class CheckpointError(Exception):
    """A file is not a training-state checkpoint of this generator (says which and why)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """What a series is: model, regime, variant, optimizer and schedule, data."""

    regime: str = "pretrain"
    variant: str = "f32"
    layers: int = 4
    dim: int = 256
    batch: int = 16
    lr: float = 6e-4
    warmup: int = 50
    #: Steps of the cosine schedule (to 10 % of lr); steps past it stay at 10 %.
    total_steps: int = 500
    weight_decay: float = 0.1
    seed: int = 0
    #: Seed of the batch stream (``model.batch``).
    data_seed: int = 0

    def __post_init__(self) -> None:
        if self.variant not in ("f32", "bf16"):
            raise ValueError(f"variant {self.variant!r}: expected 'f32' or 'bf16'")
        if self.regime not in ("pretrain", "finetune"):
            raise ValueError(f"regime {self.regime!r}: expected 'pretrain' or 'finetune'")

    def lr_factor(self, step: int) -> float:
        """LambdaLR's factor at scheduler step ``step``: linear warmup, then cosine to 0.1."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        t = min(1.0, (step - self.warmup) / max(1, self.total_steps - self.warmup))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t))


def role(name: str) -> str:
    """The role of a checkpoint tensor, from its name: ``weights`` (the model's parameters),
    ``master`` (f32 master copies), ``exp_avg``, ``exp_avg_sq``, ``other`` (step counters, RNG)."""
    if not name.startswith(TRAINER_PREFIX):
        return "weights"
    parts = name.split(SEP)
    if "fp32_from_fp16_params" in parts:
        return "master"
    if parts[-1] in ("exp_avg", "exp_avg_sq"):
        return parts[-1]
    return "other"


class TrainState:
    """Model, optimizer, scheduler and global step of one run, on CPU with ``model.THREADS``
    torch threads (set for the process: the bits of a run depend on it)."""

    def __init__(self, config: Config):
        self.config = config
        torch.set_num_threads(THREADS)
        torch.manual_seed(config.seed)
        random.seed(config.seed)
        np.random.seed(config.seed)
        self.model = GPT(config.layers, config.dim)
        self.step = 0
        if config.variant == "bf16":
            self.model.to(torch.bfloat16)
            self.masters = [p.detach().float().clone() for p in self.model.parameters()]
            params = self.masters
        else:
            self.masters = None
            params = list(self.model.parameters())
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, config.lr_factor)

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Sets the model's parameters (and masters) from f32 ``weights`` (a fine-tune's start)."""
        self.model.load_state_dict({k: v.to(self._dtype()) for k, v in weights.items()})
        if self.masters is not None:
            named = dict(self.model.named_parameters())
            for m, (name, _) in zip(self.masters, named.items()):
                m.copy_(weights[name].float())

    def _dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.config.variant == "bf16" else torch.float32

    def master_weights(self) -> dict[str, torch.Tensor]:
        """The f32 weights the optimizer updates, by parameter name."""
        names = [n for n, _ in self.model.named_parameters()]
        if self.masters is None:
            return {n: p.detach().clone() for n, p in self.model.named_parameters()}
        return {n: m.detach().clone() for n, m in zip(names, self.masters)}

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step on ``(x, y)``; returns the loss (before the step)."""
        logits = self.model(x).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)
        loss.backward()
        if self.masters is not None:
            for m, p in zip(self.masters, self.model.parameters()):
                m.grad = p.grad.float()
        self.optimizer.step()
        self.scheduler.step()
        if self.masters is not None:
            with torch.no_grad():
                for m, p in zip(self.masters, self.model.parameters()):
                    p.copy_(m)
        self.step += 1
        return float(loss.item())

    def _optimizer_state(self) -> dict[str, Any]:
        sd = self.optimizer.state_dict()
        if self.masters is None:
            return sd
        return {"optimizer": sd, "fp32_from_fp16_params": [list(self.masters)]}

    def checkpoint(self) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """The tensors and metadata of a checkpoint of the current state."""
        tensors = {k: v.detach().contiguous().clone() for k, v in self.model.state_dict().items()}
        names = [n for n, _ in self.model.named_parameters()]
        trainer = {
            "rng_state": {"python": random.getstate(), "numpy": np.random.get_state(),
                          "cpu": torch.get_rng_state()},
            "optimizer": self._optimizer_state(),
            "param_names": [names],
            "lr_scheduler": self.scheduler.state_dict(),
        }
        flat, skeleton = flatten(trainer)
        for name, t in flat.items():
            t = torch.from_numpy(np.ascontiguousarray(t)) if isinstance(t, np.ndarray) else t
            tensors[TRAINER_PREFIX + name] = t.detach().contiguous().clone()
        meta = {
            TRAINER_KEY: base64.b64encode(pickle.dumps(skeleton, protocol=4)).decode("ascii"),
            CONFIG_KEY: json.dumps(dataclasses.asdict(self.config), sort_keys=True),
            "global_step": str(self.step),
        }
        return tensors, meta

    def save(self, path: str | Path) -> None:
        """Writes the checkpoint as a safetensors file."""
        tensors, meta = self.checkpoint()
        save_file(tensors, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> "TrainState":
        """The state a checkpoint file holds: model, optimizer, scheduler, RNG, global step."""
        tensors, meta = read_checkpoint(path)
        try:
            config = Config(**json.loads(meta[CONFIG_KEY]))
            skeleton = pickle.loads(base64.b64decode(meta[TRAINER_KEY]))
            step = int(meta["global_step"])
        except (KeyError, ValueError, TypeError, pickle.UnpicklingError) as e:
            raise CheckpointError(f"{path}: metadata is not a training-state checkpoint's ({e})") from e
        st = cls(config)
        weights = {k: v for k, v in tensors.items() if not k.startswith(TRAINER_PREFIX)}
        flat = {k[len(TRAINER_PREFIX):]: v for k, v in tensors.items() if k.startswith(TRAINER_PREFIX)}
        try:
            trainer = unflatten(skeleton, flat)
        except KeyError as e:
            raise CheckpointError(f"{path}: tensor {TRAINER_PREFIX}{e.args[0]} is missing") from e
        st.model.load_state_dict(weights)
        opt = trainer["optimizer"]
        if st.masters is not None:
            with torch.no_grad():
                for m, saved in zip(st.masters, opt["fp32_from_fp16_params"][0]):
                    m.copy_(saved)
            opt = opt["optimizer"]
        st.optimizer.load_state_dict(opt)
        st.scheduler.load_state_dict(trainer["lr_scheduler"])
        rng = trainer["rng_state"]
        random.setstate(rng["python"])
        kind, keys, pos, has_gauss, gauss = rng["numpy"]
        np.random.set_state((kind, keys.numpy(), pos, has_gauss, gauss))
        torch.set_rng_state(rng["cpu"])
        st.step = step
        return st


def read_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of a safetensors file."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return tensors, meta

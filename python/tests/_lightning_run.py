"""A small Lightning run through ``strata.lightning`` (for test_training_state.py and
python/benches/resume_aged.py): an MLP regressing a fixed nonlinear function with AdamW and a
step LR schedule on CPU, in-process, its checkpoints saved by ``StrataCheckpointIO`` (pointer
files beside a store) and resumed with ``Trainer.fit(ckpt_path=<pointer>)``.
"""

from __future__ import annotations

import os
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset

from strata.lightning import StrataCheckpointIO

SAMPLES, BATCH = 160, 16  # 10 batches an epoch, not shuffled


class Points(Dataset):
    """``y = tanh(x A) b`` plus a little noise, for ``x`` in R^16."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(27)
        self.x = torch.randn(SAMPLES, 16, generator=g)
        a, b = torch.randn(16, 8, generator=g), torch.randn(8, 1, generator=g)
        self.y = torch.tanh(self.x @ a) @ b + 0.05 * torch.randn(SAMPLES, 1, generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class MLP(L.LightningModule):
    """16-64-64-1 with tanh; AdamW (lr 1e-2) and StepLR (halved every 20 steps)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
            torch.nn.Linear(64, 1),
        )

    def training_step(self, batch: Any, i: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.5)
        return [opt], [{"scheduler": sched, "interval": "step"}]


class Watch(L.Callback):
    """Records each step's loss and, when training starts (after a checkpoint's state was
    restored), the optimizer's state."""

    def __init__(self) -> None:
        self.losses: dict[int, float] = {}
        self.start_state: dict[Any, Any] | None = None

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.start_state = {
            i: {k: v.detach().clone() for k, v in s.items()}
            for i, s in trainer.optimizers[0].state_dict()["state"].items()
        }

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any,
                           batch: Any, i: int) -> None:
        self.losses[trainer.global_step] = float(outputs["loss"])


def _fit(module: MLP, watch: Watch, max_steps: int, plugins: list[Any], callbacks: list[Any],
         ckpt_path: str | None) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=max_steps, accelerator="cpu", devices=1, plugins=plugins,
        callbacks=[*callbacks, watch], enable_checkpointing=bool(callbacks), logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(Points(), batch_size=BATCH, shuffle=False),
                ckpt_path=ckpt_path)
    return trainer


def _checkpoints(ckdir: str | os.PathLike[str], every: int) -> ModelCheckpoint:
    return ModelCheckpoint(dirpath=os.fspath(ckdir), every_n_train_steps=every, save_top_k=-1,
                           filename="{step}")


def train(store: str, ckdir: str | os.PathLike[str], max_steps: int, every: int,
          ) -> tuple[L.Trainer, Watch]:
    """A fresh run: a checkpoint every ``every`` steps into ``store``, pointers
    ``step=N.ckpt`` in ``ckdir``."""
    watch = Watch()
    trainer = _fit(MLP(), watch, max_steps, [StrataCheckpointIO(store)],
                   [_checkpoints(ckdir, every)], None)
    return trainer, watch


def resume(pointer: str, max_steps: int, store: str | None = None,
           ckdir: str | os.PathLike[str] | None = None, every: int = 10,
           ) -> tuple[L.Trainer, Watch]:
    """The run resumed from the pointer file ``pointer`` by ``Trainer.fit(ckpt_path=)`` and
    trained to ``max_steps``: with ``store``, saving into it (``StrataCheckpointIO``,
    ``overwrite=True``: the steps after the one resumed from are this run's abandoned
    future) with pointers in ``ckdir``; without, saving nothing (Lightning's own
    CheckpointIO loads the pointer)."""
    watch = Watch()
    if store is None:
        plugins, callbacks = [], []
    else:
        plugins = [StrataCheckpointIO(store, overwrite=True)]
        callbacks = [_checkpoints(ckdir, every)]
    trainer = _fit(MLP(), watch, max_steps, plugins, callbacks, pointer)
    return trainer, watch

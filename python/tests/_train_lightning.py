"""A small Lightning training run for test_lightning.py (run as a subprocess).

usage: _train_lightning.py full|kill|resume STORE CKPT_DIR [CKPT_PATH]

60 steps of AdamW with a step LR schedule on CPU, one thread, 10 batches per epoch (no
shuffle), a checkpoint every 10 steps through StrataCheckpointIO. `kill` SIGKILLs its own
process at step 35 (after the save at 30); `resume` continues from CKPT_PATH. The seed is
$SEED (0 when unset); $OVERWRITE=1 makes the plugin overwrite another run's checkpoints.
"""

import os
import signal
import sys

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset

from strata.lightning import StrataCheckpointIO

torch.set_num_threads(1)


class Data(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(80, 8, generator=g)
        self.y = torch.randn(80, 1, generator=g)

    def __len__(self):
        return 80

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
        )

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.5)
        return [opt], [{"scheduler": sched, "interval": "step"}]


class Killer(L.Callback):
    def __init__(self, at):
        self.at = at

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    mode, store, ckdir = sys.argv[1:4]
    L.seed_everything(int(os.environ.get("SEED", "0")), verbose=False)
    model = Model()
    callbacks = [
        ModelCheckpoint(dirpath=ckdir, every_n_train_steps=10, save_top_k=-1, filename="{step}")
    ]
    if mode == "kill":
        callbacks.append(Killer(35))
    trainer = L.Trainer(
        max_steps=60,
        accelerator="cpu",
        devices=1,
        plugins=[StrataCheckpointIO(store, overwrite=os.environ.get("OVERWRITE") == "1")],
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )
    dl = DataLoader(Data(), batch_size=8, shuffle=False)
    trainer.fit(model, dl, ckpt_path=sys.argv[4] if mode == "resume" else None)


if __name__ == "__main__":
    main()

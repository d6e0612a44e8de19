"""A small Hugging Face Trainer run through ``strata.hf`` (for test_training_state.py and
python/benches/resume_aged.py): a 2-layer GPT-2 built from a config (no download) learning a
sparse Markov chain of tokens with AdamW and a linear LR schedule on CPU, its full training
state (weights, optimizer, scheduler, RNG) saved by ``StrataCallback(trainer_folders=False)``,
and resumed from any checkpoint of the store through ``strata.hf.checkpoint_folder``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import transformers

from strata.hf import StrataCallback, checkpoint_folder

VOCAB, LENGTH, SEQUENCES = 64, 16, 64
BATCH = 8  # 8 batches an epoch
LR = 3e-3  # high for a run this short: the loss nears the chain's entropy in ~100 steps


class Tokens(torch.utils.data.Dataset):
    """Sequences of a fixed Markov chain: each token is followed by one of two successors
    (3:1), so the loss falls well below log(VOCAB) within tens of steps."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(27)
        succ = torch.randint(0, VOCAB, (VOCAB, 2), generator=g)
        ids = torch.empty(SEQUENCES, LENGTH, dtype=torch.long)
        ids[:, 0] = torch.randint(0, VOCAB, (SEQUENCES,), generator=g)
        for t in range(1, LENGTH):
            pick = (torch.rand(SEQUENCES, generator=g) < 0.25).long()
            ids[:, t] = succ[ids[:, t - 1], pick]
        self.ids = ids

    def __len__(self) -> int:
        return SEQUENCES

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def gpt2(dtype: torch.dtype = torch.float32) -> transformers.GPT2LMHeadModel:
    """A 2-layer GPT-2 (105 k parameters), seeded, in ``dtype``."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=64, n_layer=2,
                                  n_head=2)
    return transformers.GPT2LMHeadModel(cfg).to(dtype)


class Watch(transformers.TrainerCallback):
    """Records each step's training loss and, at the start of training (after the Trainer
    has loaded a checkpoint it resumes from), the optimizer's state."""

    def __init__(self) -> None:
        self.losses: dict[int, float] = {}
        self.start_state: dict[str, Any] | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        opt = kwargs["optimizer"]
        self.start_state = {
            i: {k: v.detach().clone() for k, v in s.items()}
            for i, s in opt.state_dict()["state"].items()
        }
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> Any:
        if logs and "loss" in logs:
            self.losses[int(state.global_step)] = float(logs["loss"])
        return control


def trainer(out: str | os.PathLike[str], model: Any, callbacks: list[Any], max_steps: int,
            save_steps: int | None) -> transformers.Trainer:
    """A Trainer on :class:`Tokens`: AdamW (lr ``LR``, the Trainer's decay and no-decay
    groups), 4 warm-up steps then linear decay to ``max_steps``, a save every ``save_steps``
    (None: no saves), the loss logged every step (NaN and inf as they are: the Trainer's
    default logs the window's mean instead)."""
    saves: dict[str, Any] = {"save_strategy": "no"}
    if save_steps is not None:
        saves = {"save_strategy": "steps", "save_steps": save_steps}
    args = transformers.TrainingArguments(
        output_dir=os.fspath(out), max_steps=max_steps, per_device_train_batch_size=BATCH,
        learning_rate=LR, weight_decay=0.01, lr_scheduler_type="linear", warmup_steps=4,
        logging_steps=1, logging_nan_inf_filter=False, seed=0, report_to=[], use_cpu=True,
        disable_tqdm=True, **saves,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                callbacks=callbacks)


def train(store: str, out: str | os.PathLike[str], max_steps: int, save_steps: int,
          dtype: torch.dtype = torch.float32) -> tuple[transformers.Trainer, Watch]:
    """A fresh run saving its full training state into ``store`` every ``save_steps``."""
    watch = Watch()
    t = trainer(out, gpt2(dtype),
                [StrataCallback(store, trainer_folders=False), watch], max_steps, save_steps)
    t.train()
    return t, watch


def resume(store: str, step: int, out: str | os.PathLike[str], max_steps: int, save_steps: int,
           callbacks: list[Any] = (), dtype: torch.dtype = torch.float32,
           ) -> tuple[transformers.Trainer, Watch]:
    """The run resumed from checkpoint ``step`` of ``store`` (the documented path:
    ``Trainer.train(resume_from_checkpoint=checkpoint_folder(...))``) and trained on to
    ``max_steps``, with ``callbacks`` besides a :class:`Watch`."""
    watch = Watch()
    t = trainer(out, gpt2(dtype), [*callbacks, watch], max_steps, save_steps)
    os.makedirs(out, exist_ok=True)
    with checkpoint_folder(store, step=step, dir=out) as folder:
        t.train(resume_from_checkpoint=folder)
    return t, watch

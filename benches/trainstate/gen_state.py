#!/usr/bin/env python3
"""Generates full training-state series: one safetensors file per checkpoint, weights + AdamW state.

    python gen_state.py pretrain OUT [--variant f32|bf16] [--checkpoints 20] [--every 25]
    python gen_state.py finetune OUT --init PRETRAIN/step_000500.safetensors [--variant ...]
    python gen_state.py resume CHECKPOINT OUT --checkpoints N [--every 25]

``pretrain``: the 4-layer, width-256 byte-level GPT of ``../shared/data/gen_series.py`` trained from
scratch on the stdlib's top-level modules, AdamW (weight decay 0.1), lr 6e-4 with a 50-step linear
warmup and a cosine decay to 10 % over the series, batches of 16 x 128 bytes; a checkpoint every
``--every`` steps (the first at step ``--every``: AdamW has no state before its first step).
``finetune``: the weights of ``--init`` (a pretrain checkpoint of the same variant; the f32 masters
for bf16), a fresh AdamW at a tenth of the pre-training lr (6e-5, 10-step warmup), on the stdlib's
packages (text the pre-training never read), steps counted from 0 again.
``resume``: rebuilds the whole state of CHECKPOINT (``state.TrainState.load``) and trains on,
writing ``--checkpoints`` more checkpoints into OUT: their tensors and metadata are bit-identical to
those of the run that wrote CHECKPOINT (the files' bytes may differ: safetensors writes the metadata
map in no fixed order).

OUT/step_NNNNNN.safetensors holds the state at global step NNNNNN (names in ``state.py``'s doc);
OUT/series.json the settings, the checkpoints' steps and the loss of every step trained. Torch on
CPU, one thread (``model.THREADS``), seeded: the same command on the same software writes the same
tensors.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path


from model import batch, corpus
from state import Config, TrainState

PRETRAIN_LR = 6e-4


def checkpoint_path(out: Path, step: int) -> Path:
    """The file of the checkpoint at ``step`` in a series folder."""
    return out / f"step_{step:06d}.safetensors"


def train(st: TrainState, out: Path, checkpoints: int, every: int, log: dict, log_after: int = 0) -> None:
    """Trains ``checkpoints * every`` steps from ``st``, writing a checkpoint every ``every`` steps
    and each step's loss into ``log["losses"]`` (by global step); then ``log_after`` more steps
    whose losses are logged and whose state is not written (the reference a resume from the last
    checkpoints is compared with)."""
    data = corpus(st.config.regime)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    end = st.step + checkpoints * every
    while st.step < end + log_after:
        s = st.step
        x, y = batch(data, st.config.data_seed, s, st.config.batch)
        log["losses"][str(s)] = st.train_step(x, y)
        if st.step % every == 0 and st.step <= end:
            st.save(checkpoint_path(out, st.step))
            log["checkpoints"] = sorted(set(log["checkpoints"]) | {st.step})
            write_log(out, log)
            print(f"step {st.step}: loss {log['losses'][str(s)]:.4f}, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    log["trained_s"] = log.get("trained_s", 0.0) + time.perf_counter() - t0
    write_log(out, log)


def write_log(out: Path, log: dict) -> None:
    tmp = out / "series.json.tmp"
    tmp.write_text(json.dumps(log, indent=1, sort_keys=True))
    os.replace(tmp, out / "series.json")


def read_log(out: Path) -> dict | None:
    """The series.json of a series folder, None when there is none."""
    p = out / "series.json"
    return json.loads(p.read_text()) if p.exists() else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["pretrain", "finetune", "resume"])
    ap.add_argument("source", help="OUT folder (pretrain, finetune) or CHECKPOINT file (resume)")
    ap.add_argument("out", nargs="?", help="OUT folder (resume only)")
    ap.add_argument("--variant", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--checkpoints", type=int, default=20)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=None,
                    help=f"peak lr (default {PRETRAIN_LR:g}; finetune: a tenth of it)")
    ap.add_argument("--warmup", type=int, default=None, help="warmup steps (default 50; finetune 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", help="finetune: the pretrain checkpoint to start from")
    ap.add_argument("--log-after", type=int, default=0,
                    help="train this many steps after the last checkpoint, logging their losses only")
    a = ap.parse_args(argv)
    if a.checkpoints < 1 or a.every < 1:
        ap.error("--checkpoints and --every must be at least 1")

    if a.kind == "resume":
        if a.out is None:
            ap.error("resume needs CHECKPOINT and OUT")
        st = TrainState.load(a.source)
        out = Path(a.out)
        log = read_log(out) or {"config": dataclasses.asdict(st.config), "checkpoints": [], "losses": {},
                                "resumed_from": os.path.abspath(a.source)}
        train(st, out, a.checkpoints, a.every, log, a.log_after)
        return

    if a.out is not None:
        ap.error(f"{a.kind} takes one folder")
    out = Path(a.source)
    total = a.checkpoints * a.every
    if a.kind == "pretrain":
        cfg = Config(regime="pretrain", variant=a.variant, layers=a.layers, dim=a.dim, batch=a.batch,
                     lr=a.lr or PRETRAIN_LR, warmup=50 if a.warmup is None else a.warmup,
                     total_steps=total, seed=a.seed, data_seed=a.seed)
        st = TrainState(cfg)
        init = None
    else:
        if a.init is None:
            ap.error("finetune needs --init PRETRAIN_CHECKPOINT")
        pre = TrainState.load(a.init)
        if pre.config.variant != a.variant:
            sys.exit(f"--init {a.init} is a {pre.config.variant} checkpoint, not {a.variant}")
        cfg = Config(regime="finetune", variant=a.variant, layers=pre.config.layers, dim=pre.config.dim,
                     batch=a.batch, lr=a.lr or pre.config.lr / 10,
                     warmup=10 if a.warmup is None else a.warmup, total_steps=total,
                     seed=a.seed, data_seed=a.seed + 1)
        st = TrainState(cfg)
        st.load_weights(pre.master_weights())
        init = os.path.abspath(a.init)
    log = {"config": dataclasses.asdict(cfg), "checkpoints": [], "losses": {}, "init": init}
    train(st, out, a.checkpoints, a.every, log, a.log_after)


if __name__ == "__main__":
    main()

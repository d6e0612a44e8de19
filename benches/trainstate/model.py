"""The model, the text it trains on and the batch stream of the training-state series.

The model is the byte-level GPT of ``../shared/data/gen_series.py`` (the same modules, so the same
parameter names); the text is Python's standard-library sources on this machine, as there
(real text nobody here wrote): the first 400 top-level ``*.py`` files for pre-training, the first
400 files of its packages (``*/*.py``) for fine-tuning.

The batch of global step ``s`` is drawn from a generator seeded by ``(seed, s)`` alone, so a run
resumed at step ``k`` sees the same batches as the run that wrote checkpoint ``k``, and two resumes
from step ``k`` (from the exact and from an aged checkpoint) see the same batches as each other.
"""

from __future__ import annotations

import glob
import sysconfig

import torch
import torch.nn as nn

#: Torch threads of every process that trains (``state.TrainState`` sets it). A thread count is
#: part of what makes a run reproducible (1 and 2 threads give different bits), and on this
#: 2-core machine shared with builds one thread per process measured 1.7 s per step where two took
#: 4 to 5 s; the bench runs two such processes side by side instead.
THREADS = 1
#: Bytes per training window (the model's context).
CONTEXT = 128
#: Most bytes of corpus read (as gen_series.py).
CORPUS_BYTES = 20_000_000
#: Files read per corpus (as gen_series.py).
CORPUS_FILES = 400


class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head attention and a 4x MLP."""

    def __init__(self, d: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, max(1, d // 64), batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Byte-level GPT: token and position embeddings, ``layers`` blocks, a final norm, a head."""

    def __init__(self, layers: int, dim: int, context: int = CONTEXT):
        super().__init__()
        self.tok = nn.Embedding(256, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 256, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


def corpus(kind: str) -> torch.Tensor:
    """The training text as a 1-D int64 tensor of bytes: ``"pretrain"`` the stdlib's top-level
    modules (gen_series.py's corpus), ``"finetune"`` the modules of its packages."""
    stdlib = sysconfig.get_paths()["stdlib"]
    pattern = {"pretrain": "/*.py", "finetune": "/*/*.py"}.get(kind)
    if pattern is None:
        raise ValueError(f"corpus kind {kind!r}: expected 'pretrain' or 'finetune'")
    files = sorted(glob.glob(stdlib + pattern))[:CORPUS_FILES]
    if not files:
        raise FileNotFoundError(f"no Python sources match {stdlib + pattern}")
    text = b"".join(open(f, "rb").read() for f in files)[:CORPUS_BYTES]
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()


def batch(data: torch.Tensor, seed: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of global step ``step``: ``size`` windows of ``CONTEXT`` bytes at
    positions drawn from a generator seeded by ``(seed, step)`` only."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    ix = torch.randint(0, len(data) - CONTEXT - 1, (size,), generator=g)
    x = torch.stack([data[i:i + CONTEXT] for i in ix])
    y = torch.stack([data[i + 1:i + CONTEXT + 1] for i in ix])
    return x, y

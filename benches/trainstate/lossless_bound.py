#!/usr/bin/env python3
"""How far lossless coding of a full-state series can go (issue 27's "lossless full state >= 1.1x
ZipNN XOR-delta"): the code length of each f32 tensor's delta against the previous checkpoint
under two byte-plane models, per role.

    python benches/trainstate/lossless_bound.py target/trainstate/series/pretrain-f32 [--checkpoints N]

For each pair of consecutive checkpoints and each f32 tensor of at least 4096 values, the delta is
cut into its four byte planes, and each plane is costed as an adaptive order-0 coder with one
context per base exponent would code it (Krichevsky-Trofimov counts, no tables to store: what an
ideal version of the base-exponent contexts of ADR 0004 reaches). Two deltas:

- ``xor``: the bits XOR the previous checkpoint's (what Strata and ZipNN store);
- ``sub``: the bits as integers minus the previous checkpoint's, zigzagged (a value that moved by a
  small relative step gives a small integer either way of zero).

It prints raw / coded bytes per role and for the whole series, and the series' figure if each role
took the better of the two. The figures are bounds of a model, not of a codec: a real coder pays for
its tables and its blocks, and Strata's stored ratio on these series is within 1 % of ``xor``.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from state import role  # noqa: E402

#: Krichevsky-Trofimov: each count starts at one half.
PRIOR = 0.5
#: Smallest tensor costed (counters and scalars are not the question here).
MIN_VALUES = 4096


def log2_rising(n: np.ndarray, start: float) -> np.ndarray:
    """log2 of start * (start + 1) * ... * (start + n - 1), for each n."""
    top = int(n.max()) if n.size else 0
    table = np.concatenate([[0.0], np.cumsum(np.log2(np.arange(top) + start))])
    return table[n]


def adaptive_bits(symbols: np.ndarray, contexts: np.ndarray) -> float:
    """Bits an adaptive order-0 coder with one model per context spends on ``symbols`` (bytes)."""
    _, ctx = np.unique(contexts, return_inverse=True)
    pair = np.bincount(ctx * 256 + symbols.astype(np.int64))
    total = np.bincount(ctx)
    return float(log2_rising(total, 256 * PRIOR).sum() - log2_rising(pair[pair > 0], PRIOR).sum())


def plane_bits(delta: np.ndarray, contexts: np.ndarray) -> float:
    return sum(adaptive_bits(((delta >> (8 * k)) & 0xFF).astype(np.uint8), contexts) for k in range(4))


def deltas(cur: np.ndarray, prev: np.ndarray) -> dict[str, np.ndarray]:
    a, b = cur.view(np.uint32).ravel(), prev.view(np.uint32).ravel()
    diff = a.astype(np.int64) - b.astype(np.int64)  # in (-2^32, 2^32)
    diff = (diff + (1 << 31)) % (1 << 32) - (1 << 31)  # wrapped to i32
    zigzag = ((diff << 1) ^ (diff >> 63)).astype(np.uint32)
    return {"xor": a ^ b, "sub": zigzag}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("series", help="a folder of step_*.safetensors (benches/trainstate/gen_state.py)")
    ap.add_argument("--checkpoints", type=int, default=0, help="the first N checkpoints (0: all)")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.series, "step_*.safetensors")))
    if args.checkpoints:
        files = files[: args.checkpoints]
    if len(files) < 2:
        print(f"lossless_bound: {args.series} holds fewer than 2 checkpoints", file=sys.stderr)
        return 1
    raw: dict[str, int] = {}
    bits: dict[str, dict[str, float]] = {}
    prev = load_file(files[0])
    for path in files[1:]:
        cur = load_file(path)
        for name, t in cur.items():
            if t.dtype != np.float32 or t.size < MIN_VALUES or name not in prev:
                continue
            r = role(name)
            raw[r] = raw.get(r, 0) + t.nbytes
            contexts = ((prev[name].view(np.uint32).ravel() >> 23) & 0xFF).astype(np.int64)
            for kind, d in deltas(t, prev[name]).items():
                bits.setdefault(r, {}).setdefault(kind, 0.0)
                bits[r][kind] += plane_bits(d, contexts)
        prev = cur
    kinds = ("xor", "sub")
    print(f"{args.series}: {len(files) - 1} deltas of f32 tensors of >= {MIN_VALUES} values")
    print("| role | raw MB | xor | sub | sub / xor |")
    print("|---|---|---|---|---|")
    for r in sorted(raw):
        x, s = (raw[r] * 8 / bits[r][k] for k in kinds)
        print(f"| {r} | {raw[r] / 1e6:.1f} | {x:.3f}x | {s:.3f}x | {s / x:.3f} |")
    total_raw = sum(raw.values()) * 8
    x, s = (total_raw / sum(b[k] for b in bits.values()) for k in kinds)
    best = total_raw / sum(min(b.values()) for b in bits.values())
    print(f"| all | {total_raw / 8e6:.1f} | {x:.3f}x | {s:.3f}x | {s / x:.3f} |")
    print(f"each role's better delta: {best:.3f}x ({best / x:.3f} of xor)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What lossy aging (issue 15, ``Store.age``) costs in model quality, against what it saves.

Usage (in the venv of python/ci.sh, with the strata package importable):

    python benches/age_quality.py --series DIR/bf16 --kind gpt|minilm \\
        --budgets 3e-4,1e-3,3e-3,1e-2,3e-2 --keep-exact-last 2 --out OUT.json \\
        [--svg OUT.svg] [--markdown OUT.md] [--exact-only]

DIR is a series made by /work/shared/data/gen_series.py (``pretrain`` for --kind gpt,
``finetune`` for --kind minilm): DIR/bf16/step_NNNNNN.safetensors, the step taken from the
file name.

1. Every checkpoint is imported (``Store.import_safetensors``) into a fresh store in a temporary
   folder: the raw, stored and file bytes of the lossless store.
2. For each budget, a copy of that store file is opened and aged
   (``age(keep_exact_last=K, budget=B)``, timed): the report, ``stats()`` and ``verify()``
   after. Whole-series ratios are raw bytes of every checkpoint / file bytes and / stored
   bytes. The aged checkpoints' own ratio is raw bytes of the aged checkpoints / (stored bytes
   after aging - stored bytes of a store holding only the checkpoints kept exact): an estimate,
   since the kept checkpoints are counted as if stored alone (their first one as a full
   version, not a delta).
3. For every aged checkpoint, against the exact bf16 file of the same step:
   a. relative Frobenius error ``||A - E|| / ||E||`` of every tensor (max and median over
      tensors of 2+ dimensions, the 1-D ones being kept exact), beside the
      fidelity the store reports for the read (``get(..., with_fidelity=True)``), and checks:
      measured error <= reported * 1.01 + 1e-7, reported <= budget, 1-D tensors bit-exact;
   b. the relative error of W x on real activations: the exact model of that step runs on
      held-out text with forward pre-hooks capturing the input x of every nn.Linear (GPT's
      attention, whose projections are not called as modules, is hooked at the attention:
      its input for ``in_proj_weight``, the attention context, recomputed and checked against
      the module's output, for ``out_proj.weight``); per weight ``||X (W_aged - W)^T|| /
      ||X W^T||`` over up to --wx-rows token rows (max and median over weights);
   c. model quality: GPT, cross-entropy on held-out text (the stdlib .py files after the first
      400 the generator trains on, and the files of the stdlib's packages, which it never
      reads; --windows windows of 128 bytes, seed --seed) with the aged weights against the
      exact ones, as relative change; MiniLM, cosine similarity of
      mean-pooled embeddings of held-out 64-byte windows, tokenized as gen_series.py does
      ([CLS] 32 bytes [SEP] the next 32 bytes, byte + 1000), aged against exact model.
   d. the pull toward the newest checkpoint N: per 2-D tensor ``<A - E, N - E> / ||N - E||^2``
      (0 when the error is unrelated to training, 1 when the aged tensor is N's); a budget
      relative to ||E|| above the distance between checkpoints is met by reading back a newer
      model, which the loss change does not show (it improves).
   The checkpoints kept exact are checked bit-exact with fidelity kind exact.

--exact-only skips aging: every checkpoint but the last K is evaluated from an unaged copy,
so every error must be 0 (a test of the import, the metrics and the outputs before ``age``).

Writes OUT.json (every figure, the date, ``uname -m``, the CPU model), and optionally a
Markdown table (one row per budget) and a hand-written SVG plot: whole-series ratio (x, log)
against quality (y, log: worst loss change % for GPT, 1 - worst cosine for MiniLM), one point
per budget, with the targets (GPT 40x and 1 %; MiniLM 20x and cosine 0.999).
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

import strata

# Targets of issue 15: (whole-series ratio, quality bound on the y axis).
TARGETS = {"gpt": (40.0, 1.0), "minilm": (20.0, 1e-3)}
TRAIN_FILES = 400  # gen_series.py trains on the first 400 stdlib .py files (sorted)


# -- models, as gen_series.py builds them ---------------------------------------------------
class Block(nn.Module):
    def __init__(s, d):
        super().__init__(); s.ln1 = nn.LayerNorm(d); s.attn = nn.MultiheadAttention(d, max(1, d // 64), batch_first=True)
        s.ln2 = nn.LayerNorm(d); s.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(s, x):
        T = x.shape[1]; m = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        h = s.ln1(x); x = x + s.attn(h, h, h, attn_mask=m, need_weights=False)[0]
        return x + s.mlp(s.ln2(x))


class GPT(nn.Module):
    def __init__(s, L, d, T=128):
        super().__init__(); s.tok = nn.Embedding(256, d); s.pos = nn.Embedding(T, d)
        s.blocks = nn.Sequential(*[Block(d) for _ in range(L)]); s.ln = nn.LayerNorm(d); s.head = nn.Linear(d, 256, bias=False)

    def forward(s, idx):
        x = s.tok(idx) + s.pos(torch.arange(idx.shape[1])); return s.head(s.ln(s.blocks(x)))


def build_model(kind: str, sd: dict[str, torch.Tensor]) -> nn.Module:
    if kind == "gpt":
        d = sd["tok.weight"].shape[1]
        layers = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
        model = GPT(layers, d, T=sd["pos.weight"].shape[0])
    else:
        from transformers import BertConfig, BertModel
        cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                         intermediate_size=1536, max_position_embeddings=512)
        model = BertModel(cfg, add_pooling_layer=False)
    load_weights(model, sd)
    return model.eval()


def load_weights(model: nn.Module, sd: dict[str, torch.Tensor]) -> None:
    res = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    # The generator saves floating-point state only; integer buffers (BERT's position_ids)
    # keep their defaults. A missing floating weight would make every figure meaningless.
    own = {k for k, v in model.state_dict().items() if v.is_floating_point()}
    missing = [k for k in res.missing_keys if k in own]
    if missing or res.unexpected_keys:
        raise SystemExit(f"checkpoint does not fit the model: missing {missing}, unexpected {res.unexpected_keys}")


# -- held-out text --------------------------------------------------------------------------
def held_out_files() -> list[str]:
    """Python source gen_series.py never trains on: the stdlib's top-level .py files after the
    first 400 (sorted), then the .py files of its packages (one level down; gen_series.py
    reads only the top level), site-packages left out. A CPython 3.11 has ~170 top-level
    files, so there the held-out text is the packages' files."""
    stdlib = sysconfig.get_paths()["stdlib"]
    top = sorted(glob.glob(stdlib + "/*.py"))[TRAIN_FILES:]
    sub = sorted(f for f in glob.glob(stdlib + "/*/*.py") if os.sep + "site-packages" + os.sep not in f)
    return top + sub


def held_out_bytes() -> bytes:
    files = held_out_files()
    if not files:
        raise SystemExit("no held-out .py files in the stdlib")
    return "".join(open(f, errors="ignore").read() for f in files).encode()[:20_000_000]


def eval_batch(kind: str, windows: int, seed: int) -> torch.Tensor:
    data = torch.frombuffer(bytearray(held_out_bytes()), dtype=torch.uint8).long()
    g = torch.Generator().manual_seed(seed)
    if kind == "gpt":
        ix = torch.randint(0, len(data) - 129, (windows,), generator=g)
        return torch.stack([data[i:i + 129] for i in ix])  # inputs [:, :128], targets [:, 1:]
    ix = torch.randint(0, len(data) - 64, (windows,), generator=g)
    return torch.stack([torch.cat([torch.tensor([101]), data[i:i + 32] + 1000, torch.tensor([102]),
                                   data[i + 32:i + 64] + 1000]) for i in ix])


# -- activations ----------------------------------------------------------------------------
def attention_context(mha: nn.MultiheadAttention, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The input of ``mha.out_proj`` for self-attention on ``h`` (batch first)."""
    B, T, d = h.shape
    H = mha.num_heads; dh = d // H
    qkv = F.linear(h, mha.in_proj_weight, mha.in_proj_bias)
    q, k, v = (t.reshape(B, T, H, dh).transpose(1, 2) for t in qkv.split(d, dim=-1))
    att = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
    att = att.masked_fill(mask, float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, T, d)


def run_model(kind: str, model: nn.Module, batch: torch.Tensor, capture: bool, rows: torch.Tensor | None):
    """Forward pass: (quality output, {weight name: captured input rows} or None)."""
    acts: dict[str, torch.Tensor] = {}
    hooks = []

    def pick(x: torch.Tensor) -> torch.Tensor:
        x = x.detach().reshape(-1, x.shape[-1])
        return x[rows] if rows is not None and rows.numel() < x.shape[0] else x.clone()

    if capture:
        for name, mod in model.named_modules():
            prefix = name + "." if name else ""
            if kind == "gpt" and isinstance(mod, nn.MultiheadAttention):
                def mha_hook(m, args, kwargs, out, prefix=prefix):
                    h = args[0]
                    ctx = attention_context(m, h, kwargs["attn_mask"])
                    check = F.linear(ctx, m.out_proj.weight, m.out_proj.bias)
                    if not torch.allclose(check, out[0], atol=1e-4, rtol=1e-4):
                        raise SystemExit(f"recomputed attention of {prefix} differs from the module's")
                    acts[prefix + "in_proj_weight"] = pick(h)
                    acts[prefix + "out_proj.weight"] = pick(ctx)
                hooks.append(mod.register_forward_hook(mha_hook, with_kwargs=True))
            elif isinstance(mod, nn.Linear) and not (kind == "gpt" and name.endswith("attn.out_proj")):
                def lin_hook(m, args, prefix=prefix):
                    acts[prefix + "weight"] = pick(args[0])
                hooks.append(mod.register_forward_pre_hook(lin_hook))
    try:
        with torch.no_grad():
            if kind == "gpt":
                logits = model(batch[:, :-1])
                out = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1)).item()
            else:
                out = model(input_ids=batch).last_hidden_state.mean(dim=1)  # mean-pooled, no padding
    finally:
        for h in hooks:
            h.remove()
    return out, (acts if capture else None)


# -- measures -------------------------------------------------------------------------------
def rel_err(a: torch.Tensor, e: torch.Tensor) -> float:
    a64, e64 = a.double(), e.double()
    den = torch.linalg.vector_norm(e64).item()
    num = torch.linalg.vector_norm(a64 - e64).item()
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    raw = lambda t: t.contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(raw(a), raw(b))


def wx_errors(acts: dict[str, torch.Tensor], exact: dict[str, torch.Tensor], aged: dict[str, torch.Tensor],
              ynorm: dict[str, float]) -> dict[str, float]:
    out = {}
    for name, x in acts.items():
        e = aged[name].float() - exact[name].float()
        d = x @ e.T
        out[name] = torch.linalg.vector_norm(d.double()).item() / ynorm[name]
    return out


def pulls(exact: dict[str, torch.Tensor], aged: dict[str, torch.Tensor], newest: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per tensor of 2+ dimensions, how far the aged error goes toward the newest checkpoint:
    ``<A - E, N - E> / ||N - E||^2`` (0: the error is unrelated to the training direction; 1:
    the aged tensor is the newest checkpoint's). An error budget relative to ``||E||`` is met
    by returning a newer checkpoint once consecutive checkpoints are closer than the budget,
    and then the history read back is the newest model, not a noisy old one."""
    out = {}
    for name, e in exact.items():
        if e.dim() < 2 or name not in newest or name not in aged:
            continue
        e64 = e.double(); g = newest[name].double() - e64
        gg = (g * g).sum().item()
        if gg > 0:
            out[name] = ((aged[name].double() - e64) * g).sum().item() / gg
    return out


def summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"max": None, "median": None, "mean": None}
    return {"max": float(max(values)), "median": float(np.median(values)), "mean": float(np.mean(values))}


# -- stores ---------------------------------------------------------------------------------
def stats_of(path: str) -> dict:
    with strata.Store(path) as st:
        s = st.stats()
    return {k: s[k] for k in ("raw_bytes", "stored_bytes", "file_bytes", "versions", "checkpoints")}


def import_series(path: str, files: dict[int, str]) -> float:
    t = time.perf_counter()
    with strata.Store(path) as st:
        for step, f in files.items():
            st.import_safetensors(f, step)
    return time.perf_counter() - t


def raw_bytes_of(f: str) -> int:
    return sum(v.numel() * v.element_size() for v in load_file(f).values())


def machine() -> dict:
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "uname_m": platform.machine(), "cpu": cpu, "cpus": os.cpu_count(), "commit": commit,
            "strata": strata.__version__, "torch": torch.__version__, "python": platform.python_version()}


# -- evaluation -----------------------------------------------------------------------------
def evaluate(args, files, runs, workdir):
    """Fills runs[i]["checkpoints"] (per aged checkpoint) and the kept checks, steps outer."""
    kind = args.kind
    batch = eval_batch(kind, args.windows, args.seed)
    n_rows = batch.shape[0] * (batch.shape[1] - (1 if kind == "gpt" else 0))
    rows = torch.randperm(n_rows, generator=torch.Generator().manual_seed(args.seed + 1))[:args.wx_rows].sort().values
    newest = load_file(files[max(files)])
    stores = [strata.Store(r["path"], cache_bytes=64 << 20) for r in runs]
    try:
        for step, f in files.items():
            todo = [i for i, r in enumerate(runs) if step in r["aged_set"] or step in r["kept_set"]]
            if not todo:
                continue
            exact = load_file(f)
            need_model = any(step in runs[i]["aged_set"] for i in todo)
            if need_model:
                t = time.perf_counter()
                model = build_model(kind, exact)
                ref, acts = run_model(kind, model, batch, True, rows)
                ynorm = {n: torch.linalg.vector_norm((x @ exact[n].float().T).double()).item() for n, x in acts.items()}
                t_ref = time.perf_counter() - t
            for i in todo:
                run, st = runs[i], stores[i]
                t = time.perf_counter()
                loaded = st.load_checkpoint(step, framework="pt")
                got, fid = {}, {}
                for name in st.keys(step):
                    got[name], fid[name] = st.get(name, step, framework="pt", with_fidelity=True)
                problems = run["problems"]
                if set(got) != set(exact):
                    problems.append(f"step {step}: tensor names differ from the file's")
                for name in got:
                    if not bit_equal(got[name], loaded[name]):
                        problems.append(f"step {step} {name}: load_checkpoint and get disagree")
                if step in run["kept_set"]:
                    bad = [n for n in exact if n not in got or not bit_equal(got[n], exact[n]) or fid[n].get("kind") != "exact"]
                    run["kept_checks"].append({"step": step, "bit_exact": not bad})
                    problems.extend(f"step {step} (kept exact) {n}: not bit-exact or fidelity not exact" for n in bad)
                    continue
                tens = {}
                for name, e in exact.items():
                    a = got.get(name)
                    if a is None:
                        continue
                    measured = rel_err(a, e)
                    reported = fid[name].get("rel_error") if fid[name].get("kind") == "aged" else (0.0 if fid[name].get("kind") == "exact" else None)
                    tens[name] = {"shape": list(e.shape), "rel_error": measured, "fidelity": fid[name]}
                    if e.dim() <= 1 and (fid[name].get("kind") != "exact" or not bit_equal(a, e)):
                        problems.append(f"step {step} {name}: 1-D tensor not kept exact ({fid[name]})")
                    if reported is None:
                        problems.append(f"step {step} {name}: unexpected fidelity {fid[name]}")
                    elif measured > reported * 1.01 + 1e-7:
                        problems.append(f"step {step} {name}: measured error {measured:.3e} > reported {reported:.3e}")
                    if run["budget"] is not None and reported is not None and reported > run["budget"] * (1 + 1e-6):
                        problems.append(f"step {step} {name}: reported error {reported:.3e} > budget {run['budget']:g}")
                    if run["budget"] is not None and measured > run["budget"] * 1.01 + 1e-7:
                        problems.append(f"step {step} {name}: measured error {measured:.3e} > budget {run['budget']:g}")
                pull = pulls(exact, got, newest)
                wx = wx_errors(acts, exact, got, ynorm)
                load_weights(model, got)
                out, _ = run_model(kind, model, batch, False, None)
                load_weights(model, exact)  # back to the exact weights for the next store
                rec = {"step": step,
                       # over tensors of 2+ dimensions: 1-D ones stay exact (0)
                       "tensor_rel_error": summary([v["rel_error"] for v in tens.values() if len(v["shape"]) >= 2]),
                       "reported_rel_error_max": max((v["fidelity"].get("rel_error", 0.0) for v in tens.values()), default=0.0),
                       "fidelity_kinds": sorted({v["fidelity"].get("kind") for v in tens.values()}),
                       "tensors_aged": sum(v["fidelity"].get("kind") == "aged" for v in tens.values()),
                       "tensors_exact": sum(v["fidelity"].get("kind") == "exact" for v in tens.values()),
                       "wx_rel_error": summary(list(wx.values())),
                       "pull_to_newest": summary(list(pull.values())),
                       "wx_worst": max(wx, key=wx.get) if wx else None,
                       "tensor_worst": max(tens, key=lambda n: tens[n]["rel_error"]) if tens else None,
                       "tensors": tens, "wx": wx, "pull": pull}
                if kind == "gpt":
                    rec["loss_exact"] = ref
                    rec["loss_aged"] = out
                    rec["loss_change"] = (out - ref) / ref
                else:
                    cos = F.cosine_similarity(out.double(), ref.double(), dim=-1)
                    rec["cosine"] = {"mean": cos.mean().item(), "min": cos.min().item()}
                rec["eval_seconds"] = time.perf_counter() - t + t_ref / max(1, len(todo))
                run["checkpoints"].append(rec)
            print(f"  step {step}: {len(todo)} store(s) checked", flush=True)
    finally:
        for st in stores:
            st.close()


def summarize(kind: str, run: dict) -> dict:
    cps = run["checkpoints"]
    s = {"tensor_rel_error_max": max((c["tensor_rel_error"]["max"] for c in cps), default=None),
         "tensor_rel_error_median": float(np.median([v["rel_error"] for c in cps for v in c["tensors"].values() if len(v["shape"]) >= 2])) if cps else None,
         "reported_rel_error_max": max((c["reported_rel_error_max"] for c in cps), default=None),
         "wx_rel_error_max": max((c["wx_rel_error"]["max"] for c in cps), default=None),
         "pull_median": float(np.median([v for c in cps for v in c["pull"].values()])) if cps else None,
         "pull_max_checkpoint_median": max((c["pull_to_newest"]["median"] for c in cps if c["pull_to_newest"]["median"] is not None), default=None),
         "wx_rel_error_median": float(np.median([v for c in cps for v in c["wx"].values()])) if cps else None}
    if kind == "gpt":
        ch = [c["loss_change"] for c in cps]
        s["loss_change_max_abs"] = max((abs(x) for x in ch), default=None)
        s["loss_change_max"] = max(ch, default=None)
        s["loss_change_mean"] = float(np.mean(ch)) if ch else None
    else:
        s["cosine_min"] = min((c["cosine"]["min"] for c in cps), default=None)
        s["cosine_mean"] = float(np.mean([c["cosine"]["mean"] for c in cps])) if cps else None
    return s


# -- outputs --------------------------------------------------------------------------------
def fmt(x, spec=".3g"):
    return "–" if x is None else format(x, spec)


def markdown(result: dict) -> str:
    kind = result["kind"]; lossless = result["lossless"]; m = result["machine"]
    qual = "loss change (max \\|Δ\\|, mean)" if kind == "gpt" else "cosine (min, mean)"
    lines = [f"Series `{result['series']}` ({kind}, {len(result['steps'])} checkpoints, steps {result['steps'][0]}..{result['steps'][-1]}), "
             f"keep_exact_last={result['keep_exact_last']}{', --exact-only (no aging)' if result['exact_only'] else ''}; "
             f"{m['date']}, {m['uname_m']}, {m['cpu']}, commit {(m['commit'] or '?')[:10]}. "
             f"Lossless store: {lossless['raw_bytes']} raw, {lossless['stored_bytes']} stored, {lossless['file_bytes']} file bytes "
             f"(ratio {lossless['raw_bytes'] / lossless['file_bytes']:.2f}x file, {lossless['raw_bytes'] / lossless['stored_bytes']:.2f}x stored).",
             "",
             f"| budget | whole-series ratio (file / stored) | aged-only ratio | worst tensor rel error (reported) | worst W·x rel error | {qual} | pull to newest (median, worst checkpoint) | age s | file bytes before → after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["budgets"]:
        s = r["summary"]
        if kind == "gpt":
            q = f"{fmt(None if s['loss_change_max_abs'] is None else 100 * s['loss_change_max_abs'])} %, {fmt(None if s['loss_change_mean'] is None else 100 * s['loss_change_mean'])} %"
        else:
            q = f"{fmt(s['cosine_min'], '.6f')}, {fmt(s['cosine_mean'], '.6f')}"
        lines.append(f"| {r['label']} | {r['ratio_file']:.2f}x / {r['ratio_stored']:.2f}x | {fmt(r['ratio_aged_only'], '.1f')}x "
                     f"| {fmt(s['tensor_rel_error_max'])} ({fmt(s['reported_rel_error_max'])}) | {fmt(s['wx_rel_error_max'])} | {q} | {fmt(s['pull_median'], '.2f')}, {fmt(s['pull_max_checkpoint_median'], '.2f')} "
                     f"| {fmt(r['age_seconds'], '.2f')} | {r['file_bytes_before']} → {r['file_bytes_after']} |")
    problems = [p for r in result["budgets"] for p in r["problems"]]
    if problems:
        lines += ["", f"{len(problems)} problem(s):"] + [f"- {p}" for p in problems[:50]]
    return "\n".join(lines) + "\n"


def svg(result: dict) -> str:
    kind = result["kind"]
    tx, ty = TARGETS[kind]
    floor = 1e-6 if kind == "gpt" else 1e-8
    pts, aged = [], []
    for r in result["budgets"]:
        s = r["summary"]
        if kind == "gpt":
            y = None if s["loss_change_max_abs"] is None else 100 * s["loss_change_max_abs"]
        else:
            y = None if s["cosine_min"] is None else 1 - s["cosine_min"]
        if y is not None:
            pts.append((r["ratio_file"], max(y, floor), r["label"], y <= floor))
            if r.get("ratio_aged_only"):
                aged.append((r["ratio_aged_only"], max(y, floor)))
    W, H, L, R, T, B = 720, 480, 80, 30, 40, 60
    xs = [p[0] for p in pts] + [p[0] for p in aged] + [tx, result["lossless"]["raw_bytes"] / result["lossless"]["file_bytes"]]
    ys = [p[1] for p in pts] + [ty]
    x0, x1 = 10 ** math.floor(math.log10(min(xs) / 1.2)), 10 ** math.ceil(math.log10(max(xs) * 1.2))
    y0, y1 = 10 ** math.floor(math.log10(min(ys) / 2)), 10 ** math.ceil(math.log10(max(ys) * 2))
    px = lambda x: L + (W - L - R) * (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0))
    py = lambda y: H - B - (H - T - B) * (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0))
    ylabel = "worst loss change (%)" if kind == "gpt" else "1 - worst cosine similarity"
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{kind}: ratio against quality after age (keep_exact_last={result["keep_exact_last"]})</text>']
    for e in range(int(math.log10(x0)), int(math.log10(x1)) + 1):
        for k in range(1, 10):
            v = k * 10 ** e
            if x0 <= v <= x1:
                o.append(f'<line x1="{px(v):.1f}" y1="{T}" x2="{px(v):.1f}" y2="{H - B}" stroke="#{"ccc" if k == 1 else "eee"}"/>')
        if x0 <= 10 ** e <= x1:
            o.append(f'<text x="{px(10 ** e):.1f}" y="{H - B + 16}" text-anchor="middle">{10 ** e:g}x</text>')
    for e in range(int(math.log10(y0)), int(math.log10(y1)) + 1):
        if y0 <= 10 ** e <= y1:
            o.append(f'<line x1="{L}" y1="{py(10 ** e):.1f}" x2="{W - R}" y2="{py(10 ** e):.1f}" stroke="#ccc"/>')
            o.append(f'<text x="{L - 6}" y="{py(10 ** e) + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    o.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="black"/>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 20}" text-anchor="middle">whole-series ratio (raw bytes / file bytes, log)</text>')
    o.append(f'<text x="18" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 18 {(T + H - B) / 2})">{ylabel} (log)</text>')
    o.append(f'<line x1="{px(tx):.1f}" y1="{T}" x2="{px(tx):.1f}" y2="{H - B}" stroke="red" stroke-dasharray="6 4"/>')
    o.append(f'<text x="{px(tx) + 4:.1f}" y="{T + 14}" fill="red">target {tx:g}x</text>')
    o.append(f'<line x1="{L}" y1="{py(ty):.1f}" x2="{W - R}" y2="{py(ty):.1f}" stroke="red" stroke-dasharray="6 4"/>')
    o.append(f'<text x="{L + 6}" y="{py(ty) - 4:.1f}" fill="red">target {"1 % loss change" if kind == "gpt" else "cosine 0.999"}</text>')
    lx = result["lossless"]["raw_bytes"] / result["lossless"]["file_bytes"]
    o.append(f'<line x1="{px(lx):.1f}" y1="{T}" x2="{px(lx):.1f}" y2="{H - B}" stroke="#888" stroke-dasharray="2 3"/>')
    o.append(f'<text x="{px(lx) + 4:.1f}" y="{H - B - 6}" fill="#888">lossless {lx:.2f}x</text>')
    pts.sort()
    if len(pts) > 1:
        o.append('<polyline fill="none" stroke="#36c" points="' + " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _, _ in pts) + '"/>')
    same: dict[tuple, list] = {}  # budgets giving the same point share one label
    for x, y, label, at_floor in pts:
        same.setdefault((round(px(x), 1), round(py(y), 1), at_floor), []).append(label)
    for (x, y, at_floor), labels in same.items():
        o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{"white" if at_floor else "#36c"}" stroke="#36c"/>')
        o.append(f'<text x="{x + 6:.1f}" y="{y - 6:.1f}">budget {" | ".join(labels)}{" (0, drawn at floor)" if at_floor else ""}</text>')
    aged.sort()
    if len(aged) > 1:
        o.append('<polyline fill="none" stroke="#999" stroke-dasharray="4 3" points="' + " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in aged) + '"/>')
    for x, y in aged:
        o.append(f'<rect x="{px(x) - 3.5:.1f}" y="{py(y) - 3.5:.1f}" width="7" height="7" fill="white" stroke="#999"/>')
    o.append(f'<circle cx="{L + 14}" cy="{T + 14}" r="4" fill="#36c"/><text x="{L + 24}" y="{T + 18}">whole series (raw / file bytes)</text>')
    if aged:
        o.append(f'<rect x="{L + 10.5}" y="{T + 26.5}" width="7" height="7" fill="white" stroke="#999"/>'
                 f'<text x="{L + 24}" y="{T + 34}">aged checkpoints alone (estimate, raw / stored)</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


# -- main -----------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", required=True, help="folder of step_NNNNNN.safetensors (a series' bf16/)")
    ap.add_argument("--kind", required=True, choices=["gpt", "minilm"])
    ap.add_argument("--budgets", default="3e-4,1e-3,3e-3,1e-2,3e-2",
                    help="norm budgets B, or B:U with an update budget U of their own (a number or none)")
    ap.add_argument("--keep-exact-last", type=int, default=2)
    ap.add_argument("--update-budget", default="0.5",
                    help="Store.age's update_budget (error over the distance from the newer checkpoint); 'none' for the norm budget alone")
    ap.add_argument("--out", required=True)
    ap.add_argument("--svg"); ap.add_argument("--markdown")
    ap.add_argument("--windows", type=int, default=None, help="held-out windows (GPT 32, MiniLM 64)")
    ap.add_argument("--wx-rows", type=int, default=2048, help="token rows the W x errors are measured on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--exact-only", action="store_true", help="no aging: measure an unaged copy (every error 0)")
    ap.add_argument("--workdir", default=None, help="where the temporary stores go (default: the system's)")
    ap.add_argument("--keep-stores", action="store_true", help="keep the temporary stores")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.windows is None:
        args.windows = 32 if args.kind == "gpt" else 64
    # A token is a norm budget B, or B:U with its own update budget U (a number or "none").
    def budget_of(token):
        b, _, u = token.partition(":")
        u = u or args.update_budget
        return float(b), (None if u == "none" else float(u))

    budgets = [None] if args.exact_only else [budget_of(b.strip()) for b in args.budgets.split(",") if b.strip()]
    if not args.exact_only and not hasattr(strata.Store, "age"):
        raise SystemExit("this strata has no Store.age: build a version with it, or pass --exact-only")

    files = {}
    for f in glob.glob(os.path.join(args.series, "step_*.safetensors")):
        m = re.fullmatch(r"step_(\d+)\.safetensors", os.path.basename(f))
        if m:
            files[int(m.group(1))] = f
    files = dict(sorted(files.items()))
    if len(files) <= args.keep_exact_last:
        raise SystemExit(f"{args.series}: {len(files)} checkpoints, not more than --keep-exact-last")
    raw_per_step = {s: raw_bytes_of(f) for s, f in files.items()}

    workdir = tempfile.mkdtemp(prefix="age_quality.", dir=args.workdir)
    try:
        base = os.path.join(workdir, "lossless.strata")
        print(f"importing {len(files)} checkpoints of {args.series}", flush=True)
        import_s = import_series(base, files)
        lossless = stats_of(base)
        lossless["import_seconds"] = import_s
        if lossless["raw_bytes"] != sum(raw_per_step.values()):
            print(f"note: the store's raw bytes {lossless['raw_bytes']} differ from the files' tensors {sum(raw_per_step.values())}")
        kept_only: dict[tuple, int] = {}
        runs = []
        for i, bu in enumerate(budgets):
            b, ub = bu if bu is not None else (None, None)
            path = os.path.join(workdir, f"budget{i}.strata")
            shutil.copyfile(base, path)
            label = "exact" if b is None else (f"{b:g}" + (f", update {ub:g}" if ub is not None else ", no update budget"))
            run = {"budget": b, "update_budget": ub, "label": label, "path": path, "problems": [],
                   "checkpoints": [], "kept_checks": []}
            with strata.Store(path) as st:
                before = st.stats()
                if b is None:
                    steps = st.steps()
                    report = {"aged": steps[:-args.keep_exact_last] if args.keep_exact_last else steps,
                              "kept": steps[-args.keep_exact_last:] if args.keep_exact_last else []}
                    age_s = None
                else:
                    print(f"age budget={b:g}", flush=True)
                    t = time.perf_counter()
                    try:
                        report = st.age(keep_exact_last=args.keep_exact_last, budget=b, update_budget=ub)
                    except Exception as e:  # recorded, and the other budgets still run
                        report = None
                        run["problems"].append(f"age raised {type(e).__name__}: {e}")
                    age_s = time.perf_counter() - t
                after = st.stats()
                ver = st.verify()
            if report is None:
                continue
            run["report"] = report
            run["age_seconds"] = age_s
            run["stats_after"] = {k: after[k] for k in ("raw_bytes", "stored_bytes", "file_bytes", "versions", "checkpoints")}
            run["verify_ok"] = bool(ver.get("ok"))
            if not ver.get("ok"):
                run["problems"].append(f"verify after age: {ver.get('issues')}")
            run["file_bytes_before"], run["file_bytes_after"] = before["file_bytes"], after["file_bytes"]
            run["stored_bytes_before"], run["stored_bytes_after"] = before["stored_bytes"], after["stored_bytes"]
            for k in ("stored_bytes_before", "stored_bytes_after", "file_bytes_before", "file_bytes_after"):
                if k in report and report[k] != run[k]:
                    run["problems"].append(f"report {k} = {report[k]} but stats() says {run[k]}")
            run["ratio_file"] = after["raw_bytes"] / after["file_bytes"]
            run["ratio_stored"] = after["raw_bytes"] / after["stored_bytes"]
            run["aged_set"], run["kept_set"] = set(report["aged"]), set(report["kept"])
            if sorted(run["aged_set"] | run["kept_set"]) != list(files) or run["aged_set"] & run["kept_set"]:
                run["problems"].append(f"aged {sorted(run['aged_set'])} and kept {sorted(run['kept_set'])} do not split the steps")
            key = tuple(sorted(run["kept_set"]))
            if key not in kept_only:
                p = os.path.join(workdir, f"kept{len(kept_only)}.strata")
                import_series(p, {s: files[s] for s in key})
                kept_only[key] = stats_of(p)["stored_bytes"] if key else 0
                os.remove(p)
            raw_aged = sum(raw_per_step[s] for s in run["aged_set"])
            aged_stored = after["stored_bytes"] - kept_only[key]
            run["raw_bytes_aged"], run["stored_bytes_kept_alone"] = raw_aged, kept_only[key]
            run["ratio_aged_only"] = raw_aged / aged_stored if aged_stored > 0 else None
            runs.append(run)
        print("evaluating", flush=True)
        t = time.perf_counter()
        evaluate(args, files, runs, workdir)
        eval_s = time.perf_counter() - t
        for run in runs:
            run["summary"] = summarize(args.kind, run)
            run["checkpoints"].sort(key=lambda c: c["step"])
        result = {"series": os.path.abspath(args.series), "kind": args.kind, "steps": list(files),
                  "keep_exact_last": args.keep_exact_last, "exact_only": args.exact_only,
                  "windows": args.windows, "wx_rows": args.wx_rows, "seed": args.seed,
                  "machine": machine(), "lossless": lossless, "eval_seconds": eval_s,
                  "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                  "budgets": [{k: (sorted(v) if isinstance(v, set) else v) for k, v in r.items() if k != "path"} for r in runs]}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        md = markdown(result)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(md)
        if args.svg:
            with open(args.svg, "w") as f:
                f.write(svg(result))
        print(md)
    finally:
        if args.keep_stores:
            print(f"stores kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

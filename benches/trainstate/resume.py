#!/usr/bin/env python3
"""Resumes training from exact and from aged checkpoints on the same batches, and compares.

    python resume.py --series DIR --store STORE [--steps K,K,...] [--resume-steps 100] [--tail 20]
                     [--exact-resume first|all] [--workers 2] [--strata BIN] [--out OUT.json]

DIR is a series written by ``gen_state.py``; STORE a Strata store holding it, aged or not. For each
step K (default: every checkpoint ``strata log`` marks aged):

1. the checkpoint is read back from the store (``strata export STORE --step K -o FILE``);
2. **domain checks** of that read-back against DIR/step_K.safetensors, per role (``state.role``):
   the relative Frobenius error, values < 0 in ``exp_avg_sq`` (AdamW takes their square root),
   non-finite values, tensors of role ``other`` (step counters, RNG) whose bits changed, tensors
   missing or added, and whether the metadata (param groups, scheduler, RNG) is unchanged;
3. **resume**: ``state.TrainState.load`` of each file, then ``--resume-steps`` optimizer steps on the
   batches of global steps K, K+1, ... (``model.batch``: seeded by the step, the same for both);
   the mean loss of the last ``--tail`` steps of each, their relative difference
   (aged - exact) / exact, and the first step whose loss is NaN or infinite (the run stops there).
   ``--workers`` training processes run side by side (one torch thread each, ``model.THREADS``).

The exact resume depends on the series only: it is cached in DIR/resume-cache.json, keyed by step,
steps, batch and the file's size and mtime. The exact resume's losses over steps the generator
trained are compared with the generator's (series.json): ``reproduces_run`` is whether they are
the same bits, i.e. whether a checkpoint restores the whole state. With ``--exact-resume first``
(the default) only the first checkpoint's exact resume is trained; when it reproduces the run, the
others' exact losses are read from series.json where it has their steps (the generator trains
``--log-after`` steps past its last checkpoint for the newest ones), and trained where it has not.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from model import batch, corpus
from report import finite
from state import ROLES, TrainState, read_checkpoint, role
from strata_cli import Strata, default_binary


def domain_checks(exact: Path, aged: Path) -> dict:
    """How the tensors and metadata of ``aged`` differ from ``exact`` (see the module doc)."""
    et, em = read_checkpoint(exact)
    at, am = read_checkpoint(aged)
    per = {r: {"tensors": 0, "err_sq": 0.0, "norm_sq": 0.0, "nonfinite": 0, "negative": 0,
               "changed_tensors": 0} for r in ROLES}
    changed_other = []
    for name, e in et.items():
        a = at.get(name)
        if a is None:
            continue
        r = per[role(name)]
        r["tensors"] += 1
        if a.dtype != e.dtype or a.shape != e.shape:
            r["changed_tensors"] += 1
            changed_other.append(name)
            continue
        same = torch.equal(a.reshape(-1).view(torch.uint8), e.reshape(-1).view(torch.uint8))
        if not same:
            r["changed_tensors"] += 1
            if role(name) == "other":
                changed_other.append(name)
        if e.is_floating_point():
            ad, ed = a.double(), e.double()
            finite = torch.isfinite(ad)
            r["nonfinite"] += int((~finite).sum())
            r["err_sq"] += float(((ad - ed)[finite] ** 2).sum())
            r["norm_sq"] += float((ed ** 2).sum())
            if role(name) == "exp_avg_sq":
                r["negative"] += int((ad < 0).sum())
    roles = {}
    for name, r in per.items():
        if r["tensors"] == 0:
            continue
        roles[name] = {"tensors": r["tensors"], "changed_tensors": r["changed_tensors"],
                       "rel_error": math.sqrt(r["err_sq"] / r["norm_sq"]) if r["norm_sq"] > 0 else 0.0,
                       "nonfinite": r["nonfinite"]}
        if name == "exp_avg_sq":
            roles[name]["negative"] = r["negative"]
    return {
        "roles": roles,
        "exp_avg_sq_negative": per["exp_avg_sq"]["negative"],
        "nonfinite": sum(r["nonfinite"] for r in per.values()),
        "counters_changed": changed_other,
        "missing": sorted(set(et) - set(at)),
        "added": sorted(set(at) - set(et)),
        "metadata_equal": em == am,
    }


def resume_losses(path: Path, steps: int, batch_size: int | None = None) -> dict:
    """Loads ``path`` and trains ``steps`` steps on the series' batch stream; the losses (up to
    and including the first non-finite one) and that step (None if every loss is finite)."""
    st = TrainState.load(path)
    data = corpus(st.config.regime)
    size = batch_size or st.config.batch
    start = st.step
    losses, bad = [], None
    t0 = time.perf_counter()
    for s in range(start, start + steps):
        x, y = batch(data, st.config.data_seed, s, size)
        loss = st.train_step(x, y)
        losses.append(loss)
        if not math.isfinite(loss):
            bad = s
            break
    return {"start": start, "losses": losses, "nonfinite_at": bad, "batch": size,
            "seconds": time.perf_counter() - t0}


def tail_mean(run: dict, steps: int, tail: int) -> float:
    """Mean loss of the last ``tail`` of ``steps`` steps; NaN when the run stopped on a non-finite
    loss."""
    if run["nonfinite_at"] is not None or len(run["losses"]) < steps:
        return float("nan")
    return sum(run["losses"][-tail:]) / tail


class ExactCache:
    """Exact resumes of a series folder, in DIR/resume-cache.json."""

    def __init__(self, series: Path):
        self.path = series / "resume-cache.json"
        self.runs = json.loads(self.path.read_text()) if self.path.exists() else {}

    @staticmethod
    def key(file: Path, steps: int, batch_size: int | None) -> str:
        s = file.stat()
        return f"{file.name}:{steps}:{batch_size or 'series'}:{s.st_size}:{s.st_mtime_ns}"

    def lookup(self, file: Path, steps: int, batch_size: int | None) -> dict | None:
        """The cached exact resume of ``file``, None when there is none."""
        return self.runs.get(self.key(file, steps, batch_size))

    def put(self, file: Path, steps: int, batch_size: int | None, run: dict) -> None:
        """Caches an exact resume of ``file`` (written at once)."""
        self.runs[self.key(file, steps, batch_size)] = run
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.runs))
        os.replace(tmp, self.path)


def _resume_job(job: tuple[Path, int, int | None]) -> dict:
    return resume_losses(*job)


def run_resumes(jobs: list[tuple[Path, int, int | None]], workers: int) -> list[dict]:
    """:func:`resume_losses` of each ``(file, steps, batch)``, in ``workers`` processes side by side
    (each trains with ``model.THREADS`` threads)."""
    if workers <= 1 or len(jobs) <= 1:
        return [_resume_job(j) for j in jobs]
    # spawn: a fork of a process whose torch runs OpenMP threads can hang.
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(jobs)), mp_context=ctx) as pool:
        return list(pool.map(_resume_job, jobs))


def reproduces_run(series: Path, run: dict) -> bool | None:
    """Whether an exact resume's losses equal the generator's at the steps both trained (None
    when the generator's log covers none of them or is missing)."""
    log = series / "series.json"
    if not log.exists():
        return None
    trained = json.loads(log.read_text())
    if trained["config"]["batch"] != run["batch"]:
        return None
    losses = trained["losses"]
    both = [(losses[str(run["start"] + i)], loss) for i, loss in enumerate(run["losses"])
            if str(run["start"] + i) in losses]
    return all(a == b for a, b in both) if both else None


def logged_run(series: Path, start: int, steps: int) -> dict | None:
    """The generator's own losses of steps ``start .. start + steps - 1`` as an exact resume's
    result (the batches are the same), None when series.json lacks one of them."""
    log = series / "series.json"
    if not log.exists():
        return None
    trained = json.loads(log.read_text())
    losses = trained["losses"]
    if any(str(s) not in losses for s in range(start, start + steps)):
        return None
    return {"start": start, "losses": [losses[str(s)] for s in range(start, start + steps)],
            "nonfinite_at": None, "batch": trained["config"]["batch"], "seconds": 0.0,
            "source": "generator log"}


def check_all(series: Path, strata: Strata, store: Path, ks: list[int], workdir: Path) -> dict[int, dict]:
    """:func:`domain_checks` of each checkpoint in ``ks`` read back from ``store``, by step."""
    out = {}
    for k in ks:
        f = workdir / f"checked_{k:06d}.safetensors"
        strata.export(store, k, f)
        try:
            out[k] = domain_checks(series / f"step_{k:06d}.safetensors", f)
        finally:
            f.unlink()
    return out


def compare_all(series: Path, strata: Strata, store: Path, ks: list[int], steps: int, tail: int,
                batch_size: int | None, workdir: Path, exact_resume: str = "first", workers: int = 2) -> list[dict]:
    """Domain checks and both resumes of each checkpoint in ``ks`` (see the module doc).

    The exact side: ``exact_resume="all"`` trains every one (or takes it from the cache);
    ``"first"`` trains the first one's and, when that gives the generator's losses bit for bit (a
    checkpoint restores the whole state, the batches are the run's), takes the others' from the
    generator's log (series.json) where it has their steps, training only the rest."""
    if exact_resume not in ("first", "all"):
        raise ValueError(f"exact_resume {exact_resume!r}: expected 'first' or 'all'")
    cache = ExactCache(series)
    exact_file = {k: series / f"step_{k:06d}.safetensors" for k in ks}
    aged_file = {k: workdir / f"aged_{k:06d}.safetensors" for k in ks}
    checks = {}
    try:
        for k in ks:
            strata.export(store, k, aged_file[k])
            checks[k] = domain_checks(exact_file[k], aged_file[k])
        exact: dict[int, dict] = {}

        def train_exact_and(keys: list[int], aged_keys: list[int]) -> dict[int, dict]:
            todo = [k for k in keys if cache.lookup(exact_file[k], steps, batch_size) is None]
            jobs = [(aged_file[k], steps, batch_size) for k in aged_keys]
            jobs += [(exact_file[k], steps, batch_size) for k in todo]
            runs = run_resumes(jobs, workers)
            for k, run in zip(todo, runs[len(aged_keys):]):
                cache.put(exact_file[k], steps, batch_size, run)
            for k in keys:
                exact[k] = dict(cache.lookup(exact_file[k], steps, batch_size), source="resume")
            return dict(zip(aged_keys, runs[:len(aged_keys)]))

        aged = train_exact_and(ks if exact_resume == "all" else ks[:1], ks)
        if exact_resume == "first" and len(ks) > 1:
            trusted = batch_size is None and reproduces_run(series, exact[ks[0]]) is True
            for k in ks[1:]:
                logged = logged_run(series, k, steps) if trusted else None
                if logged is not None:
                    exact[k] = logged
            train_exact_and([k for k in ks if k not in exact], [])
    finally:
        for f in aged_file.values():
            f.unlink(missing_ok=True)
    out = []
    for k in ks:
        e, a = tail_mean(exact[k], steps, tail), tail_mean(aged[k], steps, tail)
        rel = (a - e) / e if math.isfinite(a) and math.isfinite(e) else float("nan")
        reproduces = reproduces_run(series, exact[k]) if exact[k]["source"] == "resume" else None
        out.append({"step": k, "checks": checks[k], "exact": exact[k], "aged": aged[k], "exact_tail_mean": e,
                    "aged_tail_mean": a, "rel_diff": rel, "reproduces_run": reproduces})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=Path, required=True)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--steps", help="comma-separated steps (default: every aged checkpoint)")
    ap.add_argument("--resume-steps", type=int, default=100)
    ap.add_argument("--tail", type=int, default=20)
    ap.add_argument("--batch", type=int, default=None, help="windows per batch (default: the series')")
    ap.add_argument("--exact-resume", choices=["first", "all"], default="first",
                    help="train the first checkpoint's exact resume and read the others' from the "
                         "generator's log when it reproduces it (default), or train every one")
    ap.add_argument("--workers", type=int, default=2, help="training processes side by side")
    ap.add_argument("--strata", type=Path, default=default_binary())
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if not 1 <= a.tail <= a.resume_steps:
        ap.error("--tail must be between 1 and --resume-steps")
    strata = Strata(a.strata)
    if a.steps:
        steps = [int(s) for s in a.steps.split(",")]
    else:
        steps = [c["step"] for c in strata.checkpoints(a.store) if c["aged_rel_error"] is not None]
    if not steps:
        sys.exit(f"{a.store} has no aged checkpoint: nothing to resume (give --steps)")
    with tempfile.TemporaryDirectory() as tmp:
        results = compare_all(a.series, strata, a.store, steps, a.resume_steps, a.tail, a.batch, Path(tmp),
                              a.exact_resume, a.workers)
    for r in results:
        print(f"step {r['step']}: exact {r['exact_tail_mean']:.4f}, aged {r['aged_tail_mean']:.4f} "
              f"({r['rel_diff'] * 100:+.3f} %), exp_avg_sq < 0: {r['checks']['exp_avg_sq_negative']}, "
              f"non-finite loss at {r['aged']['nonfinite_at']}")
    doc = {"series": str(a.series), "store": str(a.store), "resume_steps": a.resume_steps, "tail": a.tail,
           "results": results}
    if a.out:
        a.out.write_text(json.dumps(finite(doc), indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Training-state benchmark (issue 27): lossless and aged ratios of full-state series, and how
training resumes from every aged checkpoint.

    python benches/trainstate/bench.py [--series pretrain-f32,finetune-f32]
        [--age-args='--keep-exact-last 2 --budget 1e-3' ...] [--resume-steps 100] [--tail 20]
        [--resume-limit N] [--exact-resume first|all] [--workers 2] [--no-zipnn]
        [--out target/trainstate/results] [--from-json OUT.json]

For each series (``REGIME-VARIANT``: pretrain or finetune, f32 or bf16):

1. **series**: ``gen_state.py`` writes it into target/trainstate/series/NAME (20 checkpoints every
   25 steps), or the folder is reused when its series.json has the same settings and every file;
   ``finetune-V`` starts from the last checkpoint of ``pretrain-V``.
2. **lossless**: a fresh store, ``strata import`` (timed), ``strata compact``, ``strata stats
   --json``: raw / bytes on disk of the whole store (the one ratio, ADR 0028), and raw / stored
   bytes per role (``state.role``:
   the stored bytes of each tensor's versions, records included, summed by role).
3. **ZipNN** (``zipnn`` 0.5.4 through the comparison harness's ``ZipNNStore``,
   benches/compare/peers.py): per checkpoint, and XOR-delta against the previous checkpoint, on the
   same files; raw / bytes of its files on disk, and per role raw / compressed bytes of the tensors.
   The last checkpoint is decoded back (the whole XOR chain) and compared bit for bit.
4. **aging**, for each ``--age-args`` (repeatable: one row per policy): a copy of the lossless store,
   ``strata age COPY --json AGE_ARGS`` (timed, wall clock of
   the command); the whole series' ratio (raw / bytes on disk after), and the aged part's: raw bytes of
   the aged checkpoints / the stored bytes of their versions (``strata log``: records and segments,
   a reference to another version's block counted as 0), overall and per role (``strata log STORE
   TENSOR`` for every tensor); ``resume.py``'s domain checks of every aged checkpoint read back.
5. **resume**: ``resume.py``'s checks and resumes for ``--resume-limit N`` aged checkpoints (default
   6, evenly spaced from the oldest to the newest; 0: every aged checkpoint, which issue 27's targets
   ask for and the README's table runs). The exact side: the first resumed
   checkpoint is resumed from its file; when that gives the generator's losses bit for bit (so a
   checkpoint restores the whole state and the batches are the run's), the others' exact losses are
   read from the generator's log (series.json, which runs ``LOG_AFTER`` steps past the last
   checkpoint) instead of trained again; ``--exact-resume all`` trains every one (cached in the
   series folder).

Writes OUT.json (every figure, the commands, the machine), OUT.md (the tables) and OUT.png (loss
curves of exact and aged resumes, and each aged checkpoint's ratio against its loss difference).
``--from-json`` redoes the tables and plot of an earlier run without measuring.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import report
from resume import check_all, compare_all
from state import ROLES, role
from strata_cli import ROOT, Strata, build, default_binary

sys.path.insert(0, str(ROOT / "benches" / "compare"))
import peers  # noqa: E402  (the comparison harness's ZipNN store and safetensors reader)

HERE = Path(__file__).resolve().parent
TARGET = ROOT / "target" / "trainstate"
DEFAULT_SERIES = "pretrain-f32,finetune-f32"
DEFAULT_AGE_ARGS = "--keep-exact-last 2 --budget 1e-3"
#: Aged checkpoints resumed by default: with every one of the 2 x 18 resumed, a run whose resumes
#: stay finite trains 3 800 steps, about 45 minutes at the 1.3-1.7 s a step two training processes
#: took beside other builds on this machine; 6 keep the default run near 15 minutes.
DEFAULT_RESUME_LIMIT = 6
CHECKPOINTS = 20
EVERY = 25
#: Steps the generator trains past its last checkpoint, logging losses (exact resumes of the last
#: checkpoints read them there).
LOG_AFTER = 100


def gen_args(name: str, folder: Path) -> list[str]:
    """gen_state.py's arguments for series NAME into ``folder``."""
    regime, variant = name.split("-")
    args = [regime, str(folder), "--variant", variant, "--checkpoints", str(CHECKPOINTS), "--every", str(EVERY),
            "--log-after", str(LOG_AFTER)]
    if regime == "finetune":
        pre = TARGET / "series" / f"pretrain-{variant}"
        args += ["--init", str(pre / f"step_{CHECKPOINTS * EVERY:06d}.safetensors")]
    return args


def expected_config(name: str) -> dict:
    """The settings gen_state.py records for series NAME (what makes a cached folder reusable)."""
    regime, variant = name.split("-")
    return {"regime": regime, "variant": variant, "checkpoints": list(range(EVERY, CHECKPOINTS * EVERY + 1, EVERY))}


def ensure_series(name: str) -> tuple[Path, float | None]:
    """The folder of series NAME, generated when missing or stale; and the seconds it took
    (None when reused)."""
    regime, variant = name.split("-")
    if regime == "finetune":
        ensure_series(f"pretrain-{variant}")
    folder = TARGET / "series" / name
    log = folder / "series.json"
    want = expected_config(name)
    if log.exists():
        have = json.loads(log.read_text())
        files_ok = all((folder / f"step_{s:06d}.safetensors").exists() for s in want["checkpoints"])
        logged = str(CHECKPOINTS * EVERY + LOG_AFTER - 1) in have["losses"]
        if (have["config"]["regime"], have["config"]["variant"]) == (regime, variant) \
                and have["checkpoints"] == want["checkpoints"] and files_ok and logged:
            return folder, None
    shutil.rmtree(folder, ignore_errors=True)
    print(f"generating {folder} (minutes)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(HERE / "gen_state.py"), *gen_args(name, folder)], check=True)
    return folder, time.perf_counter() - t0


def role_sums(sizes: dict[str, tuple[int, int]]) -> dict[str, dict]:
    """{role: {raw_bytes, stored_bytes, ratio}} from {tensor: (raw, stored)}, plus ``all``."""
    out: dict[str, dict] = {}
    for name, (raw, stored) in sizes.items():
        for r in (role(name), "all"):
            d = out.setdefault(r, {"raw_bytes": 0, "stored_bytes": 0})
            d["raw_bytes"] += raw
            d["stored_bytes"] += stored
    for d in out.values():
        d["ratio"] = d["raw_bytes"] / max(1, d["stored_bytes"])
    return {r: out[r] for r in (*ROLES, "all") if r in out}


def lossless(strata: Strata, series: Path, store: Path) -> dict:
    """Import, compact, stats of a fresh store (step 2 of the module doc)."""
    store.unlink(missing_ok=True)
    _, import_s = strata.run("import", store, series)
    strata.run("compact", store)
    s = strata.stats(store)
    return {"import_s": import_s, "raw_bytes": s["raw_bytes"], "stored_bytes": s["stored_bytes"],
            "file_bytes": s["file_bytes"], "disk_bytes": s["disk_bytes"], "ratio": s["raw_bytes"] / s["disk_bytes"],
            "roles": role_sums({t["name"]: (t["raw_bytes"], t["stored_bytes"]) for t in s["tensors"]})}


def zipnn(series: Path, work: Path) -> dict:
    """ZipNN per checkpoint and XOR-delta on the series' files (step 3 of the module doc)."""
    from safetensors import safe_open

    files = peers.series_files(str(series))
    out = {}
    for mode, delta in (("per_checkpoint", False), ("xor_delta", True)):
        folder = work / f"zipnn-{mode}"
        shutil.rmtree(folder, ignore_errors=True)
        zs = peers.ZipNNStore(str(folder), delta)
        t0 = time.perf_counter()
        zs.write((step, peers.read_safetensors(path)) for step, path in files)
        secs = time.perf_counter() - t0
        sizes: dict[str, tuple[int, int]] = {}
        raw_total = 0
        for step, path in files:
            raw = {t.name: len(t.data) for t in peers.read_safetensors(path)}
            raw_total += sum(raw.values())
            with safe_open(zs._file(step), framework="numpy") as f:
                for name in f.keys():
                    blob = f.get_slice(name).get_shape()[0]
                    r, c = sizes.get(name, (0, 0))
                    sizes[name] = (r + raw[name], c + blob)
        last_step, last_path = files[-1]
        got = zs.load(None, last_step, [s for s, _ in files])
        want = {t.name: t.data for t in peers.read_safetensors(last_path)}
        exact = got.keys() == want.keys() and all(bytes(got[k]) == want[k] for k in want)
        files_bytes = peers.dir_bytes(str(folder))
        out[mode] = {"config": zs.config, "seconds": secs, "raw_bytes": raw_total, "file_bytes": files_bytes,
                     "ratio": raw_total / files_bytes, "roles": role_sums(sizes),
                     "last_checkpoint_round_trip_exact": exact}
        shutil.rmtree(folder)
    return out


def aging(strata: Strata, lossless_store: Path, store: Path, age_args: list[str]) -> dict:
    """``strata age`` on a copy of the lossless store, and what it kept (step 4)."""
    shutil.copyfile(lossless_store, store)
    report_, secs = strata.age(store, age_args)
    s = strata.stats(store)
    rows = strata.checkpoints(store)
    aged_steps = [r["step"] for r in rows if r["aged_rel_error"] is not None]
    per_checkpoint = {r["step"]: r for r in rows}
    sizes: dict[str, tuple[int, int]] = {}
    for t in s["tensors"]:
        raw = stored = 0
        for v in strata.versions(store, t["name"]):
            if v["step"] in aged_steps:
                raw += v["raw_bytes"]
                stored += v["stored_bytes"]
        if raw:
            sizes[t["name"]] = (raw, stored)
    aged_raw = sum(per_checkpoint[k]["raw_bytes"] for k in aged_steps)
    aged_stored = sum(per_checkpoint[k]["stored_bytes"] for k in aged_steps)
    return {"args": age_args, "seconds": secs, "report": report_, "raw_bytes": s["raw_bytes"],
            "file_bytes": s["file_bytes"], "disk_bytes": s["disk_bytes"], "stored_bytes": s["stored_bytes"],
            "ratio": s["raw_bytes"] / s["disk_bytes"], "aged_steps": aged_steps,
            "aged_raw_bytes": aged_raw, "aged_stored_bytes": aged_stored,
            "aged_ratio": aged_raw / aged_stored if aged_stored else None,
            "aged_roles": role_sums(sizes), "checkpoints": rows}


def pick(steps: list[int], limit: int) -> list[int]:
    """``limit`` of ``steps`` evenly spaced, first and last included (all when 0)."""
    if limit == 0 or limit >= len(steps):
        return steps
    if limit == 1:
        return [steps[0]]
    return sorted({steps[round(i * (len(steps) - 1) / (limit - 1))] for i in range(limit)})


def machine() -> dict:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": model, "cores": os.cpu_count(), "arch": platform.machine(), "torch": torch.__version__,
            "python": platform.python_version(), "commit": commit + ("+changes" if dirty else "")}


def run_series(name: str, a: argparse.Namespace, strata: Strata) -> list[dict]:
    """Generates (or reuses) series NAME and measures it (see :func:`measure`)."""
    folder, gen_s = ensure_series(name)
    entries = measure(name, folder, TARGET / "work" / name, a, strata)
    for e in entries:
        e["generate_s"] = gen_s
    return entries


def measure(name: str, folder: Path, work: Path, a: argparse.Namespace, strata: Strata) -> list[dict]:
    """Steps 2 to 5 of the module doc on the series in ``folder``, with stores in ``work``: one
    entry per ``a.age_args`` (a list of argument lists), sharing the lossless and ZipNN figures."""
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    base: dict = {"name": name, "folder": str(folder),
                  "config": json.loads((folder / "series.json").read_text())["config"]}
    print(f"{name}: lossless import", file=sys.stderr, flush=True)
    base["lossless"] = lossless(strata, folder, work / "lossless.strata")
    if not a.no_zipnn:
        print(f"{name}: ZipNN", file=sys.stderr, flush=True)
        base["zipnn"] = zipnn(folder, work)
    base["lossless_s"] = time.perf_counter() - t0
    entries = []
    for i, age_args in enumerate(a.age_args):
        t1 = time.perf_counter()
        doc = dict(base, age_args=age_args)
        print(f"{name}: strata age {' '.join(age_args)}", file=sys.stderr, flush=True)
        aged_store = work / f"aged-{i}.strata"
        doc["aged"] = aging(strata, work / "lossless.strata", aged_store, age_args)
        steps = pick(doc["aged"]["aged_steps"], a.resume_limit)
        by_step = {c["step"]: c for c in doc["aged"]["checkpoints"]}
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            # Every aged checkpoint's domain checks (seconds each), whichever are resumed.
            others = [k for k in doc["aged"]["aged_steps"] if k not in steps]
            checks = check_all(folder, strata, aged_store, others, Path(tmp))
            doc["aged"]["checks"] = {str(k): c for k, c in checks.items()}
            doc["resumes"] = compare_all(folder, strata, aged_store, steps, a.resume_steps, a.tail, None,
                                         Path(tmp), a.exact_resume, a.workers)
        for r in doc["resumes"]:
            doc["aged"]["checks"][str(r["step"])] = r["checks"]
            r["checkpoint_ratio"] = by_step[r["step"]]["raw_bytes"] / by_step[r["step"]]["stored_bytes"]
            print(f"{name}: resumed from {r['step']}: exact {r['exact_tail_mean']:.4f}, aged "
                  f"{r['aged_tail_mean']:.4f}, exp_avg_sq < 0: {r['checks']['exp_avg_sq_negative']}",
                  file=sys.stderr, flush=True)
        doc["bench_s"] = time.perf_counter() - t1
        entries.append(doc)
    return entries


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", default=DEFAULT_SERIES,
                    help=f"comma-separated REGIME-VARIANT names (default {DEFAULT_SERIES})")
    ap.add_argument("--age-args", action="append",
                    help=f"arguments passed to `strata age` (default {DEFAULT_AGE_ARGS!r}); repeat it to "
                         "age each series under several policies (one row each)")
    ap.add_argument("--resume-steps", type=int, default=100)
    ap.add_argument("--tail", type=int, default=20)
    ap.add_argument("--resume-limit", type=int, default=DEFAULT_RESUME_LIMIT,
                    help=f"resume from this many aged checkpoints, evenly spaced, the oldest and newest "
                         f"included (default {DEFAULT_RESUME_LIMIT}; 0: every one)")
    ap.add_argument("--exact-resume", choices=["first", "all"], default="first",
                    help="train the exact resume of the first resumed checkpoint only, and when it gives "
                         "the generator's losses bit for bit, read the others' from its log (default); "
                         "or train every one")
    ap.add_argument("--workers", type=int, default=2, help="training processes side by side (one thread each)")
    ap.add_argument("--no-zipnn", action="store_true")
    ap.add_argument("--strata", type=Path, default=default_binary())
    ap.add_argument("--out", type=Path, default=TARGET / "results",
                    help="writes OUT.json, OUT.md, OUT.png")
    ap.add_argument("--from-json", type=Path, help="redo the tables and plot of this results JSON")
    a = ap.parse_args(argv)
    if a.from_json:
        doc = json.loads(a.from_json.read_text())
    else:
        if not 1 <= a.tail <= a.resume_steps:
            ap.error("--tail must be between 1 and --resume-steps")
        if a.resume_limit < 0:
            ap.error("--resume-limit must be 0 (every aged checkpoint) or more")
        names = [n.strip() for n in a.series.split(",") if n.strip()]
        for n in names:
            regime, _, variant = n.partition("-")
            if regime not in ("pretrain", "finetune") or variant not in ("f32", "bf16"):
                ap.error(f"series {n!r}: expected pretrain-f32, pretrain-bf16, finetune-f32 or finetune-bf16")
        a.age_args = [shlex.split(x) for x in (a.age_args or [DEFAULT_AGE_ARGS])]
        build(a.strata)
        strata = Strata(a.strata)
        t0 = time.perf_counter()
        argv_shown = " ".join(shlex.quote(x) for x in (sys.argv[1:] if argv is None else argv))
        doc = {"machine": machine(), "command": f"python benches/trainstate/bench.py {argv_shown}".strip(),
               "age_args": a.age_args, "resume_steps": a.resume_steps, "tail": a.tail,
               "resume_limit": a.resume_limit, "series": [e for n in names for e in run_series(n, a, strata)]}
        doc["wall_s"] = time.perf_counter() - t0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if not a.from_json:
        a.out.with_suffix(".json").write_text(json.dumps(report.finite(doc), indent=1))
    md = report.markdown(doc, plot=a.out.with_suffix(".png").name)
    a.out.with_suffix(".md").write_text(md)
    report.plot(doc, a.out.with_suffix(".png"))
    print(md)


if __name__ == "__main__":
    main()

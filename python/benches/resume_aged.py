"""Training resumed from aged checkpoints, through the drop-ins (issue 27 item 5, ADR 0027): the
figures of python/README.md's *Aging a trainer's store* section.

The runs of python/tests/test_training_state.py (python/tests/_hf_run.py,
python/tests/_lightning_run.py), resumed from **every** aged checkpoint instead of two:

- HF Trainer: a 2-layer GPT-2, 128 steps, full state saved every 16 by ``StrataCallback``;
  Lightning: an MLP, 100 steps, a checkpoint every 10 by ``StrataCheckpointIO``;
- each resumed from every checkpoint before aging, then the store aged with
  ``age(keep_exact_last=2, training_state=True)``, then
  resumed from every aged checkpoint; the mean loss of the last 2 epochs of each pair;
- every aged checkpoint of the HF store (f32 and bf16 runs of 64 steps, saved every 8) read
  back against its saved value, by role.

    python python/benches/resume_aged.py            # prints the section
    python python/benches/resume_aged.py --write    # and writes it into python/README.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import strata  # noqa: E402
from _aged_audit import audit, snapshot  # noqa: E402

README = os.path.join(HERE, "..", "README.md")
START, END = "<!-- resume-aged:start -->", "<!-- resume-aged:end -->"


def mean_last(losses: dict[int, float], last_step: int, count: int) -> float:
    return statistics.mean(losses[s] for s in range(last_step - count + 1, last_step + 1))


def hf_resumes(tmp: str) -> tuple[list[tuple], float, float]:
    """Rows (step, loss there, exact, aged) and the store's ratio before and after aging."""
    import _hf_run as run

    steps, every, last = 128, 16, 16
    store = os.path.join(tmp, "hf.strata")
    _, watch = run.train(store, os.path.join(tmp, "hf"), steps, every)
    points = list(range(every, steps - 2 * every + 1, every))
    exact = {r: run.resume(store, r, os.path.join(tmp, f"hf-e{r}"), steps, None)[1]
             for r in points}
    with strata.Store(store) as st:
        before = st.stats()["ratio"]
        st.age(keep_exact_last=2, training_state=True)
        after = st.stats()["ratio"]
    rows = []
    for r in points:
        aged = run.resume(store, r, os.path.join(tmp, f"hf-a{r}"), steps, None)[1]
        rows.append((r, watch.losses[r], mean_last(exact[r].losses, steps, last),
                     mean_last(aged.losses, steps, last)))
    return rows, before, after


def lightning_resumes(tmp: str) -> tuple[list[tuple], float, float]:
    import _lightning_run as run

    steps, every, last = 100, 10, 20
    store, ckdir = os.path.join(tmp, "l.strata"), os.path.join(tmp, "ck")
    _, watch = run.train(store, ckdir, steps, every)
    points = list(range(every, steps - 2 * every + 1, every))
    pointer = {s: os.path.join(ckdir, f"step={s}.ckpt") for s in points}
    exact = {r: run.resume(pointer[r], steps)[1] for r in points}
    with strata.Store(store) as st:
        before = st.stats()["ratio"]
        st.age(keep_exact_last=2, training_state=True)
        after = st.stats()["ratio"]
    rows = []
    for r in points:
        aged = run.resume(pointer[r], steps)[1]
        rows.append((r, watch.losses[r], mean_last(exact[r].losses, steps, last),
                     mean_last(aged.losses, steps, last)))
    return rows, before, after


def hf_audit(tmp: str, dtype: torch.dtype) -> dict[str, dict]:
    """Per role, over every aged checkpoint of a 64-step HF store: tensors, elements,
    how many read back exact, negatives, non-finite, the largest element error of second
    moments, and the largest reported error."""
    import _hf_run as run

    store = os.path.join(tmp, f"audit-{dtype}.strata".replace("torch.", ""))
    run.train(store, os.path.join(tmp, f"audit-{dtype}"), 64, 8, dtype=dtype)
    saved = snapshot(store)
    with strata.Store(store) as st:
        report = st.age(keep_exact_last=2, training_state=True)
    rows = audit(store, {s: saved[s] for s in report["aged"]})
    out: dict[str, dict] = {}
    for r in rows:
        o = out.setdefault(r.role, {"tensors": 0, "elements": 0, "exact": 0, "negatives": 0,
                                    "nonfinite": 0, "max_elem_rel": 0.0, "max_reported": 0.0})
        o["tensors"] += 1
        o["elements"] += saved[r.step][r.name].numel()
        o["exact"] += r.same_bits
        o["negatives"] += r.negatives
        o["nonfinite"] += r.nonfinite
        o["max_elem_rel"] = max(o["max_elem_rel"], r.max_elem_rel)
        o["max_reported"] = max(o["max_reported"], r.fidelity.get("rel_error", 0.0))
    return out


def section() -> str:
    torch.set_num_threads(1)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="strata-resume-aged-") as tmp:
        hf, hf_before, hf_after = hf_resumes(tmp)
        lt, lt_before, lt_after = lightning_resumes(tmp)
        audits = {name: hf_audit(tmp, dtype)
                  for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16))}
    lines = [
        f"Measured by `python python/benches/resume_aged.py --write` on "
        f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, one torch "
        f"thread, {time.strftime('%Y-%m-%d')} ({time.time() - started:.0f} s).",
        "",
        "Resuming from each aged checkpoint against resuming from it before aging (mean "
        "training loss of the last 2 epochs; the loss at the checkpoint shows how far "
        "training was):",
        "",
        "| drop-in | run | resumed from step | loss there | exact | aged | aged vs exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, run, rows in (
        ("`strata.hf` (`checkpoint_folder`)", "GPT-2, 2 layers, 128 steps", hf),
        ("`strata.lightning` (`ckpt_path=`)", "MLP, 100 steps", lt),
    ):
        for r, there, exact, aged in rows:
            lines.append(f"| {name} | {run} | {r} | {there:.3f} | {exact:.4f} | {aged:.4f} | "
                         f"{aged / exact - 1:+.2%} |")
    worst = max(abs(a / e - 1) for _, _, e, a in hf + lt)
    lines += [
        "",
        f"Largest difference: {worst:.2%}; no non-finite loss. Stores (raw / bytes on disk) "
        f"before and after aging: HF {hf_before:.2f}x -> {hf_after:.2f}x, Lightning "
        f"{lt_before:.2f}x -> {lt_after:.2f}x (tiny models: the two exact checkpoints "
        "dominate).",
        "",
        "Every aged checkpoint of an HF store (64 steps, full state every 8, 6 aged), read "
        "back against the values saved (the bit-exact ones: counters, state, and the "
        "weights of biases and norms):",
        "",
        "| dtype | role | tensors | elements | bit-exact | below zero (saved >= 0) | non-finite | "
        "largest element error | largest reported error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dtype, roles in audits.items():
        for role in ("weight", "first-moment", "second-moment", "counter", "state"):
            o = roles.get(role)
            if o is None:
                continue
            # Weights and first moments are signed: only the other roles have a domain >= 0.
            signed = role in ("weight", "first-moment")
            below = "-" if signed else str(o["negatives"])
            elem = f"{o['max_elem_rel']:.3f}" if role == "second-moment" else "-"
            lines.append(
                f"| {dtype} | {role} | {o['tensors']} | {o['elements']:,} | {o['exact']} | "
                f"{below} | {o['nonfinite']} | {elem} | {o['max_reported']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the section into the README")
    args = ap.parse_args()
    body = section()
    print(body)
    if not args.write:
        return
    with open(README) as f:
        text = f.read()
    if START not in text or END not in text:
        sys.exit(f"{README} lacks the markers {START} / {END}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    with open(README, "w") as f:
        f.write(head + START + "\n" + body + "\n" + END + tail)


if __name__ == "__main__":
    main()

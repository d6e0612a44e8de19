"""Tables and plot of the training-state benchmark, from bench.py's results document."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

#: Issue 27's targets by regime: aged part ratio, whole-series ratio, loss difference of every
#: resume, seconds of aging 20 f32 checkpoints of 40 MB. They are stated for f32 series.
TARGETS = {
    "pretrain": {"aged": 40.0, "whole": 10.0, "loss": 0.01, "age_s": 10.0},
    "finetune": {"aged": 60.0, "whole": 10.0, "loss": 0.01, "age_s": 10.0},
}
ROLE_COLUMNS = ("weights", "master", "exp_avg", "exp_avg_sq", "other")


def finite(x: Any) -> Any:
    """``x`` with every NaN or infinite float replaced by None (strict JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def _num(x: float | None) -> float:
    return float("nan") if x is None else x


def _ratio(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.2f}x"


def _pct(x: float | None) -> str:
    return "NaN" if x is None or not math.isfinite(x) else f"{x * 100:+.3f} %"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _loss(x: float | None) -> str:
    return "NaN" if x is None or not math.isfinite(x) else f"{x:.4f}"


def _policies(doc: dict) -> list[str]:
    """The distinct `strata age` argument strings of a document, in order."""
    out: list[str] = []
    for s in doc["series"]:
        args = " ".join(s.get("age_args", doc.get("age_args", [])))
        if args not in out:
            out.append(args)
    return out


def label(doc: dict, s: dict) -> str:
    """A series entry's name, with its `strata age` arguments when the document has several."""
    if len(_policies(doc)) < 2:
        return s["name"]
    return f"{s['name']}, {' '.join(s['age_args'])}"


def resume_summary(s: dict) -> dict:
    """Counts over a series' resumes (how many, how many hit a non-finite loss, the worst and mean
    relative loss difference of the finite ones) and over the domain checks of its aged checkpoints
    (exp_avg_sq < 0 values and the checkpoints holding some, non-finite values, changed counters)."""
    rs = s["resumes"]
    checks = list(s["aged"].get("checks", {}).values()) or [r["checks"] for r in rs]
    diffs = [_num(r["rel_diff"]) for r in rs]
    finite_diffs = [d for d in diffs if math.isfinite(d)]
    return {
        "n": len(rs),
        "nonfinite": sum(1 for r in rs
                         if r["aged"]["nonfinite_at"] is not None or not math.isfinite(_num(r["rel_diff"]))),
        "worst": max((abs(d) for d in finite_diffs), default=None),
        "mean": sum(finite_diffs) / len(finite_diffs) if finite_diffs else None,
        "negative": sum(c["exp_avg_sq_negative"] for c in checks),
        "negative_checkpoints": sum(1 for c in checks if c["exp_avg_sq_negative"]),
        "nonfinite_values": sum(c["nonfinite"] for c in checks),
        "counters": sum(len(c["counters_changed"]) for c in checks),
        "checked": len(checks),
        "reproduces": [r["reproduces_run"] for r in rs if r["reproduces_run"] is not None],
    }


def markdown(doc: dict, plot: str | None = None) -> str:
    """The benchmark's tables (Markdown), with the plot's file name when given."""
    m = doc["machine"]
    series = doc["series"]
    lines = [
        f"Measured {m['date'][:10]} on {m['cpu']}, {m['cores']} cores (Strata at {m['commit']}, torch {m['torch']}) "
        f"by `{doc['command']}`, {doc['wall_s'] / 60:.1f} min. Series written by `benches/trainstate/gen_state.py`: "
        "the byte-level GPT of gen_series.py (4 layers, width 256), AdamW, 20 checkpoints 25 steps apart, each "
        "the full training state (weights, `exp_avg`, `exp_avg_sq`, step counters, RNG; bf16: bf16 weights and f32 "
        "masters) named as Strata's Hugging Face drop-in names it; pretrain at lr 6e-4, finetune from pretrain's "
        "last checkpoint at 6e-5 on other text.",
        "",
        "Lossless: Strata is raw / bytes on disk for the whole store, raw / stored bytes of each role's tensors "
        "(`strata stats --json`); ZipNN (per checkpoint, and XOR-delta against the previous checkpoint, on the "
        "same files) is raw / bytes of its files for the whole series, raw / compressed bytes per role.",
        "",
        "| series | checkpoints | role | raw MB | Strata | ZipNN per checkpoint | ZipNN XOR-delta "
        "| Strata / ZipNN XOR-delta |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shown: set[str] = set()
    for s in series:
        if s["name"] in shown:
            continue  # the same series aged under another policy: the same lossless figures
        shown.add(s["name"])
        ll, z = s["lossless"], s.get("zipnn")
        n = len(s["aged"]["checkpoints"])
        each = ll["raw_bytes"] / n / 1e6
        rows = [("all", ll["raw_bytes"], ll["ratio"],
                 z and z["per_checkpoint"]["ratio"], z and z["xor_delta"]["ratio"])]
        for r in ROLE_COLUMNS:
            if r in ll["roles"]:
                rows.append((r, ll["roles"][r]["raw_bytes"], ll["roles"][r]["ratio"],
                             z and z["per_checkpoint"]["roles"][r]["ratio"], z and z["xor_delta"]["roles"][r]["ratio"]))
        for i, (r, raw, ours, zp, zx) in enumerate(rows):
            head = f"{s['name']} | {n} x {each:.1f} MB" if i == 0 else " | "
            vs = f"{ours / zx:.2f}" if zx else "–"
            lines.append(f"| {head} | {r} | {raw / 1e6:.1f} | {_ratio(ours)} | {_ratio(zp)} | {_ratio(zx)} | {vs} |")
    if any(s.get("zipnn") and not (s["zipnn"]["per_checkpoint"]["last_checkpoint_round_trip_exact"]
                                   and s["zipnn"]["xor_delta"]["last_checkpoint_round_trip_exact"]) for s in series):
        lines += ["", "**ZipNN's round trip of a last checkpoint differed from its file.**"]

    lines += [
        "",
        "Aged: `strata age STORE " + "` and `strata age STORE ".join(_policies(doc)) + "` on a copy of the "
        "lossless store (wall clock of the "
        "command). Aged part: raw bytes of the aged checkpoints / stored bytes of their versions (`strata log`); "
        "whole series: raw / bytes on disk after aging. Resume: from each aged checkpoint"
        + ("" if not doc.get("resume_limit") else f" (at most {doc['resume_limit']} of them, evenly spaced)")
        + f" and from its exact file, {doc['resume_steps']} steps on the same batches; Δ loss is (aged − exact) / "
        f"exact of the mean loss of the last {doc['tail']} steps; NaN when a loss was NaN or infinite.",
        "",
        "| series | age s | aged checkpoints | aged part: all / weights / master / exp_avg / exp_avg_sq | "
        "whole series | "
        "exp_avg_sq < 0: values (checkpoints) | non-finite values, changed counters | "
        "resumes with NaN/inf loss | worst \\|Δ loss\\| (finite ones) | mean Δ loss |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for s in series:
        ag, rs = s["aged"], resume_summary(s)
        roles = ag["aged_roles"]
        part = " / ".join(_ratio(roles[r]["ratio"]) if r in roles else "–"
                          for r in ("all", "weights", "master", "exp_avg", "exp_avg_sq"))
        lines.append(
            f"| {label(doc, s)} | {ag['seconds']:.2f} | {len(ag['aged_steps'])} of {len(ag['checkpoints'])} | {part} | "
            f"{_ratio(ag['ratio'])} | {rs['negative']:,} ({rs['negative_checkpoints']} of {rs['checked']}) | "
            f"{rs['nonfinite_values']:,}, {rs['counters']} | {rs['nonfinite']} of {rs['n']} | "
            f"{_pct(rs['worst'])} | {_pct(rs['mean'])} |")
        regime, variant = s["name"].split("-")
        t = TARGETS[regime]
        if variant == "f32":
            loss_ok = rs["nonfinite"] == 0 and rs["worst"] is not None and rs["worst"] <= t["loss"]
            notes.append(
                f"- {label(doc, s)}, targets: aged part >= {t['aged']:.0f}x: "
                f"{_met((ag['aged_ratio'] or 0) >= t['aged'])} ({_ratio(ag['aged_ratio'])}); whole series >= "
                f"{t['whole']:.0f}x: {_met(ag['ratio'] >= t['whole'])} ({_ratio(ag['ratio'])}); every "
                f"resume finite and within {t['loss'] * 100:.0f} %: {_met(loss_ok)}; "
                f"aging in <= {t['age_s']:.0f} s: {_met(ag['seconds'] <= t['age_s'])} ({ag['seconds']:.2f} s).")
        rep = rs["reproduces"]
        if rep:
            notes.append(f"- {label(doc, s)}: exact resumes give the generator's losses bit for bit: "
                         f"{sum(rep)} of {len(rep)} checked.")
    lines += [""] + notes

    lines += ["", "<details><summary>Every resumed checkpoint</summary>", "",
              "| series | step | ratio | rel. error weights / exp_avg / exp_avg_sq | exp_avg_sq < 0 "
              "| counters, RNG changed | "
              "exact loss | aged loss | Δ loss | first NaN/inf step |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for s in series:
        for r in s["resumes"]:
            c = r["checks"]
            errs = " / ".join(f"{c['roles'][k]['rel_error']:.1e}" if k in c["roles"] else "–"
                              for k in ("weights", "exp_avg", "exp_avg_sq"))
            bad = r["aged"]["nonfinite_at"]
            lines.append(
                f"| {label(doc, s)} | {r['step']} | {_ratio(r['checkpoint_ratio'])} | {errs} "
                f"| {c['exp_avg_sq_negative']:,} | "
                f"{len(c['counters_changed'])} | {_loss(r['exact_tail_mean'])} | {_loss(r['aged_tail_mean'])} | "
                f"{_pct(r['rel_diff'])} | {'–' if bad is None else bad} |")
    lines += ["", "</details>"]
    if plot:
        lines += ["", f"![loss after resuming from exact and aged checkpoints; ratio against loss difference]({plot})"]
    return "\n".join(lines)


#: Steps of the running mean the loss curves show (one step's loss is noisy).
SMOOTH = 10


def _running_mean(ys: list[float], n: int) -> list[float]:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y - (ys[i - n] if i >= n else 0.0)
        out.append(acc / min(i + 1, n))
    return out


def plot(doc: dict, path: Path) -> None:
    """Loss curves of exact and aged resumes (oldest, middle, newest resumed checkpoint of each
    series; running means of SMOOTH steps, a cross where a loss turned NaN or infinite), and every
    resumed checkpoint's ratio against its |Δ loss| (NaN/inf on a band at the top)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    series = doc["series"]
    panels = len(series) + 1
    cols = min(3, panels)
    rows = -(-panels // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(5.4 * cols, 4.4 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[panels:]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, s in zip(axes, series):
        rs = s["resumes"]
        shown = [rs[i] for i in sorted({0, len(rs) // 2, len(rs) - 1})] if rs else []
        for c, r in zip(colors, shown):
            for run, style, kind in ((r["exact"], "-", "exact"), (r["aged"], "--", "aged")):
                ys = [_num(v) for v in run["losses"]]
                good = [y for y in ys if math.isfinite(y)] if run["nonfinite_at"] is None else ys[:-1]
                if good:
                    xs = [run["start"] + i for i in range(len(good))]
                    ax.plot(xs, _running_mean(good, SMOOTH), style, color=c, lw=1.3,
                            label=f"from step {r['step']}, {kind}")
                if run["nonfinite_at"] is not None:
                    ax.plot([run["nonfinite_at"]], [1.0], "X", color=c, ms=9, clip_on=False,
                            transform=ax.get_xaxis_transform(),
                            label=f"from step {r['step']}, {kind}: NaN at {run['nonfinite_at']}")
        ax.set_title(f"{label(doc, s)}:\nloss after resuming ({SMOOTH}-step mean)", fontsize=9)
        ax.set_xlabel("global step")
        ax.set_ylabel("training loss")
        ax.legend(fontsize=7)
    ax = axes[len(series)]
    nan_y = 300.0
    ax.axhspan(100, 1000, color="0.92", zorder=0)
    for c, s in zip(colors, series):
        xs, ys, nx = [], [], []
        for r in s["resumes"]:
            d = _num(r["rel_diff"])
            if math.isfinite(d):
                xs.append(r["checkpoint_ratio"])
                ys.append(max(abs(d) * 100, 1e-4))
            else:
                nx.append(r["checkpoint_ratio"])
        ax.scatter(xs, ys, color=c, label=f"{label(doc, s)} ({len(xs)})", s=18, zorder=3)
        if nx:
            ax.scatter(nx, [nan_y] * len(nx), color=c, marker="X", s=30, zorder=3,
                       label=f"{label(doc, s)}: NaN/inf ({len(nx)})")
        regime = s["name"].split("-")[0]
        ax.axvline(TARGETS[regime]["aged"], color=c, ls=":", lw=1)
    ax.axhline(TARGETS["pretrain"]["loss"] * 100, color="gray", ls="--", lw=1, label="1 % loss target")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 1000)
    ax.set_yticks([1e-4, 1e-3, 1e-2, 1e-1, 1, 10, nan_y])
    ax.set_yticklabels(["1e-4", "1e-3", "0.01", "0.1", "1", "10", "NaN/inf"])
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("resumed checkpoint's ratio (raw / stored); dotted: aged-part targets")
    ax.set_ylabel("|Δ loss| after resuming, %")
    policies = _policies(doc)
    ax.set_title(f"strata age {policies[0]}" if len(policies) == 1 else "every resumed checkpoint", fontsize=10)
    ax.legend(fontsize=7, loc="center left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

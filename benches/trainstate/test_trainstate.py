"""Tests of the training-state generator, resume checks, CLI parsing and report.

    ~/.cache/strata/train-venv/bin/python -m pytest benches/trainstate -q

Small series (1 layer, width 64, batches of 2) keep them to seconds. The store tests need
target/release/strata (``cargo build --release -p strata-cli``) and skip, saying so, without it.
"""

from __future__ import annotations

import base64
import math
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import gen_state
import report
import resume
from state import TRAINER_KEY, TRAINER_PREFIX, TrainState, flatten, read_checkpoint, role
from strata_cli import Strata, default_binary

TINY = ["--layers", "1", "--dim", "64", "--batch", "2"]


@pytest.fixture(scope="module", params=["f32", "bf16"])
def series(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(f"series-{request.param}")
    gen_state.main(["pretrain", str(out), "--variant", request.param, "--checkpoints", "4", "--every", "2", *TINY])
    return out


def same_state(a: Path, b: Path) -> None:
    ta, ma = read_checkpoint(a)
    tb, mb = read_checkpoint(b)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape, k
        assert torch.equal(ta[k].reshape(-1).view(torch.uint8), tb[k].reshape(-1).view(torch.uint8)), k
    assert ma == mb


def test_resume_writes_the_same_checkpoints(series, tmp_path):
    """Training on from a checkpoint file rebuilds the whole state: the next checkpoints are the
    run's, bit for bit (optimizer moments and counters, scheduler, masters, RNG)."""
    gen_state.main(["resume", str(series / "step_000004.safetensors"), str(tmp_path), "--checkpoints", "2",
                    "--every", "2"])
    for step in (6, 8):
        same_state(series / f"step_{step:06d}.safetensors", tmp_path / f"step_{step:06d}.safetensors")


def test_names_are_the_hf_dropins(series):
    """Model parameters under their own names, the optimizer's state under __trainer__/ as
    strata.flatten names it, and every tensor of a known role."""
    tensors, meta = read_checkpoint(series / "step_000002.safetensors")
    st = TrainState.load(series / "step_000002.safetensors")
    for name, _ in st.model.named_parameters():
        assert name in tensors and role(name) == "weights"
    opt = "optimizer/optimizer" if st.config.variant == "bf16" else "optimizer"
    n = len(list(st.model.parameters()))
    for i in range(n):
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert f"{TRAINER_PREFIX}{opt}/state/{i}/{k}" in tensors
        assert role(f"{TRAINER_PREFIX}{opt}/state/{i}/exp_avg_sq") == "exp_avg_sq"
        if st.config.variant == "bf16":
            master = f"{TRAINER_PREFIX}optimizer/fp32_from_fp16_params/0/{i}"
            assert tensors[master].dtype == torch.float32 and role(master) == "master"
    want_dtype = torch.bfloat16 if st.config.variant == "bf16" else torch.float32
    assert tensors["blocks.0.mlp.0.weight"].dtype == want_dtype
    assert tensors[f"{TRAINER_PREFIX}rng_state/cpu"].dtype == torch.uint8
    assert tensors[f"{TRAINER_PREFIX}rng_state/numpy/1"].dtype == torch.uint32
    skeleton = pickle.loads(base64.b64decode(meta[TRAINER_KEY]))
    assert skeleton["optimizer"] is not None and "lr_scheduler" in skeleton
    assert skeleton["param_names"] == [[n for n, _ in st.model.named_parameters()]]
    # The drop-in's own rule gives the same names for the same state.
    flat, _ = flatten({"optimizer": st._optimizer_state(), "lr_scheduler": st.scheduler.state_dict()})
    assert {TRAINER_PREFIX + k for k in flat} <= tensors.keys()


def damaged_copy(src: Path, dst: Path) -> None:
    tensors, meta = read_checkpoint(src)
    # The head's (the last parameter): every step uses all of it (not so the embedding's rows).
    name = max((k for k in tensors if k.endswith("/exp_avg_sq")), key=lambda k: int(k.split("/")[-2]))
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[:5] = -1.0
    counter = next(k for k in tensors if k.endswith("/step"))
    tensors[counter] = tensors[counter] + 1
    save_file(tensors, str(dst), metadata=meta)


def test_domain_checks_and_resume_find_a_negative_second_moment(series, tmp_path):
    exact = series / "step_000004.safetensors"
    bad = tmp_path / "bad.safetensors"
    damaged_copy(exact, bad)
    c = resume.domain_checks(exact, bad)
    assert c["exp_avg_sq_negative"] == 5
    assert len(c["counters_changed"]) == 1 and c["counters_changed"][0].endswith("/step")
    assert c["roles"]["exp_avg_sq"]["rel_error"] > 0 and c["roles"]["weights"]["rel_error"] == 0
    run = resume.resume_losses(bad, 5)
    assert run["nonfinite_at"] == 5 and math.isnan(run["losses"][-1])
    assert math.isnan(resume.tail_mean(run, 5, 2))
    same = resume.domain_checks(exact, exact)
    assert same["exp_avg_sq_negative"] == 0 and not same["counters_changed"] and same["metadata_equal"]
    assert all(r["rel_error"] == 0 for r in same["roles"].values())


def test_exact_resume_reproduces_the_run(series, tmp_path):
    f = series / "step_000002.safetensors"
    run = resume.run_resumes([(f, 4, None)], 1)[0]
    assert resume.reproduces_run(series, run) is True
    altered = dict(run, losses=[run["losses"][0] + 1e-3] + run["losses"][1:])
    assert resume.reproduces_run(series, altered) is False
    # Two processes side by side give the same bits as this one.
    assert resume.run_resumes([(f, 4, None), (f, 4, None)], 2)[1]["losses"] == run["losses"]
    cache = resume.ExactCache(series)
    cache.put(f, 4, None, run)
    assert resume.ExactCache(series).lookup(f, 4, None) == run
    assert resume.ExactCache(series).lookup(f, 5, None) is None


@pytest.fixture(scope="module")
def strata() -> Strata:
    binary = default_binary()
    if not binary.exists():
        print(f"SKIP reason: {binary} is missing (cargo build --release -p strata-cli)")
        pytest.skip(f"{binary} is missing (cargo build --release -p strata-cli)")
    return Strata(binary)


def test_store_round_trip_and_log_parsing(series, strata, tmp_path):
    """Through a real store: an exported checkpoint is its file, and the parsed `strata log`
    tables add up (per-tensor versions to per-checkpoint sizes, aged marks to `age`'s report)."""
    store = tmp_path / "s.strata"
    strata.run("import", store, series)
    rows = strata.checkpoints(store)
    assert [r["step"] for r in rows] == [2, 4, 6, 8] and all(r["aged_rel_error"] is None for r in rows)
    out = tmp_path / "e.safetensors"
    strata.export(store, 4, out)
    same_state(series / "step_000004.safetensors", out)
    rep, _ = strata.age(store, ["--keep-exact-last", "1", "--budget", "1e-2", "--no-update-budget"])
    rows = {r["step"]: r for r in strata.checkpoints(store)}
    assert sorted(k for k, r in rows.items() if r["aged_rel_error"] is not None) == sorted(rep["aged"])
    totals: dict[int, list[int]] = {}
    for t in strata.stats(store)["tensors"]:
        for v in strata.versions(store, t["name"]):
            acc = totals.setdefault(v["step"], [0, 0])
            acc[0] += v["raw_bytes"]
            acc[1] += v["stored_bytes"]
    for step, (raw, stored) in totals.items():
        assert (raw, stored) == (rows[step]["raw_bytes"], rows[step]["stored_bytes"])


def doc_with(resumes: list[dict]) -> dict:
    ratios = {"ratio": 2.0, "raw_bytes": 10, "stored_bytes": 5}
    roles = {r: ratios for r in ("weights", "exp_avg", "exp_avg_sq", "other", "all")}
    zipnn = {"ratio": 1.5, "roles": roles, "last_checkpoint_round_trip_exact": True}
    return {
        "machine": {"date": "2026-01-01T00:00:00", "cpu": "cpu", "cores": 2, "commit": "abc", "torch": "2"},
        "command": "bench.py", "wall_s": 60.0, "age_args": [["--budget", "1e-3"]], "resume_steps": 4, "tail": 2,
        "series": [{
            "name": "pretrain-f32", "age_args": ["--budget", "1e-3"],
            "lossless": {"raw_bytes": 100, "ratio": 1.3, "roles": roles},
            "zipnn": {"per_checkpoint": zipnn, "xor_delta": zipnn},
            "aged": {"seconds": 1.0, "aged_steps": [2], "checkpoints": [{"step": 2}, {"step": 4}],
                     "aged_roles": roles, "aged_ratio": 50.0, "ratio": 12.0},
            "resumes": resumes,
        }],
    }


def a_resume(rel: float, nonfinite_at: int | None) -> dict:
    run = {"start": 2, "losses": [3.0, 2.9], "nonfinite_at": None}
    aged = dict(run, nonfinite_at=nonfinite_at, losses=[3.0, float("nan")] if nonfinite_at else [3.0, 2.9])
    return {"step": 2, "checkpoint_ratio": 50.0, "exact": run, "aged": aged, "exact_tail_mean": 2.95,
            "aged_tail_mean": float("nan") if nonfinite_at else 2.95 * (1 + rel), "rel_diff": rel,
            "reproduces_run": True,
            "checks": {"exp_avg_sq_negative": 7 if nonfinite_at else 0, "counters_changed": [], "nonfinite": 0,
                       "roles": {"weights": {"rel_error": 1e-3}}}}


def test_report_says_nan_and_missed(tmp_path):
    bad = doc_with([a_resume(float("nan"), 3)])
    md = report.markdown(bad, plot="x.png")
    assert "1 of 1" in md and "every resume finite and within 1 %: **missed**" in md and "| 7 (1 of 1) |" in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP reason: matplotlib is missing: the plot is not drawn (benches/trainstate/requirements.txt)")
    else:
        report.plot(bad, tmp_path / "p.png")
        assert (tmp_path / "p.png").stat().st_size > 10_000
    good = report.markdown(doc_with([a_resume(0.002, None)]))
    assert "every resume finite and within 1 %: met" in good and "+0.200 %" in good
    assert report.finite({"a": [float("inf"), 1.0]}) == {"a": [None, 1.0]}


def test_bench_picks_evenly_spaced_checkpoints():
    import bench

    steps = list(range(25, 475, 25))
    assert bench.pick(steps, 0) == steps
    assert bench.pick(steps, 3) == [25, 225, 450]
    assert bench.pick(steps, 1) == [25]


def test_bad_files_give_named_errors(tmp_path):
    from state import CheckpointError

    p = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(p))
    with pytest.raises(CheckpointError, match="plain.safetensors"):
        TrainState.load(p)


def test_bench_measures_a_small_series(series, strata, tmp_path):
    """bench.measure end to end on a small series: lossless (and ZipNN when installed), aging
    with today's `strata age`, resumes; the role sums add up and the table is written."""
    import argparse

    import bench

    try:
        import zipnn  # noqa: F401
        no_zipnn = False
    except ImportError:
        print("SKIP reason: zipnn is missing: ZipNN's part is not measured (benches/trainstate/requirements.txt)")
        no_zipnn = True
    policies = [["--keep-exact-last", "1", "--budget", "1e-2"], ["--keep-exact-last", "2", "--budget", "1e-2"]]
    opts = argparse.Namespace(no_zipnn=no_zipnn, age_args=policies,
                              resume_limit=0, resume_steps=3, tail=2, exact_resume="first", workers=2)
    doc, other = bench.measure("pretrain-f32", series, tmp_path / "work", opts, strata)
    assert other["lossless"] is doc["lossless"] and other["age_args"] == policies[1]
    assert other["aged"]["aged_steps"] == [2, 4]
    ll, ag = doc["lossless"], doc["aged"]
    assert ll["roles"]["all"]["raw_bytes"] == ll["raw_bytes"]
    assert sum(ll["roles"][r]["raw_bytes"] for r in ll["roles"] if r != "all") == ll["raw_bytes"]
    assert ag["aged_steps"] == [2, 4, 6]
    assert (ag["aged_roles"]["all"]["raw_bytes"], ag["aged_roles"]["all"]["stored_bytes"]) == \
        (ag["aged_raw_bytes"], ag["aged_stored_bytes"])
    sources = [r["exact"]["source"] for r in doc["resumes"]]
    # The first is trained and reproduces the run; then the log serves where it has the steps
    # (2..7 were trained by the generator), and step 6's resume (6..8) is trained again.
    assert sources == ["resume", "generator log", "resume"]
    assert doc["resumes"][0]["reproduces_run"] is True
    if not no_zipnn:
        for mode in ("per_checkpoint", "xor_delta"):
            z = doc["zipnn"][mode]
            assert z["last_checkpoint_round_trip_exact"] and z["raw_bytes"] == ll["raw_bytes"]
    full = {"machine": bench.machine(), "command": "bench.py", "wall_s": 1.0, "age_args": policies,
            "resume_steps": 3, "tail": 2, "resume_limit": 0, "series": [doc, other]}
    md = report.markdown(full)
    assert md.count("| pretrain-f32 | 4 x") == 1  # one lossless block for both policies
    assert "| pretrain-f32, --keep-exact-last 1 --budget 1e-2 | " in md and "3 of 4" in md and "2 of 4" in md


def test_skeleton_pickles_as_the_dropins(series):
    """The metadata's skeleton names strata._flatten's Slot (what strata.hf unpickles), not a
    private copy of it: a process that knows nothing of this package's modules reads it."""
    import subprocess
    import sys

    _, meta = read_checkpoint(series / "step_000002.safetensors")
    blob = meta[TRAINER_KEY]
    # A fresh interpreter with only the drop-in's own module (imported without the native
    # extension): the optimizer's state holds Slot objects of that module's class.
    source = Path(__file__).resolve().parents[2] / "python" / "strata"
    code = ("import base64, pickle, sys, types; pkg = types.ModuleType('strata'); "
            f"pkg.__path__ = [{str(source)!r}]; sys.modules['strata'] = pkg; "
            "from strata._flatten import Slot; sk = pickle.loads(base64.b64decode(sys.stdin.read())); "
            "opt = sk['optimizer']; opt = opt.get('optimizer', opt); "  # bf16: Megatron's nesting
            "print(sorted(k for k, v in opt['state'][0].items() if isinstance(v, Slot)))")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['exp_avg', 'exp_avg_sq', 'step']"
    assert set(pickle.loads(base64.b64decode(blob))) == {"rng_state", "optimizer", "param_names", "lr_scheduler"}


def test_the_hf_dropin_loads_a_stored_checkpoint(series, strata, tmp_path):
    """strata.hf.load_into_model, given a store of these files, restores what TrainState.load
    restores: the layout is the drop-in's (needs the built strata package and transformers)."""
    try:
        import strata.hf as hf
    except ImportError as e:
        print(f"SKIP reason: strata.hf cannot be imported here ({e}): python/ci.sh's venv has it")
        pytest.skip(f"strata.hf cannot be imported ({e})")
    store = tmp_path / "s.strata"
    strata.run("import", store, series)
    want = TrainState.load(series / "step_000004.safetensors")
    if want.masters is not None:
        # Megatron's layout nests AdamW's state: the drop-in's loader is for a plain optimizer.
        assert hf.load_trainer_state(store, 4)["optimizer"]["fp32_from_fp16_params"][0][0].dtype == torch.float32
        return
    got = TrainState(want.config)
    assert hf.load_into_model(got.model, store, 4, optimizer=got.optimizer, lr_scheduler=got.scheduler) == 4
    for (k, a), b in zip(want.model.state_dict().items(), got.model.state_dict().values()):
        assert torch.equal(a, b), k
    a, b = want.optimizer.state_dict(), got.optimizer.state_dict()
    assert a["param_groups"] == b["param_groups"]
    assert all(torch.equal(a["state"][i][k], b["state"][i][k]) for i in a["state"] for k in a["state"][i])
    assert want.scheduler.state_dict() == got.scheduler.state_dict()

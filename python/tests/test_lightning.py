"""StrataCheckpointIO with real Lightning: a run killed with SIGKILL after a save, resumed from
the store, ends bit-exact equal to a run that never stopped (weights, optimizer state, LR
schedule)."""

import os
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

import strata
from strata.lightning import StrataCheckpointIO

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "_train_lightning.py")


def run(*args, **env):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


def assert_equal(a, b, path="ckpt"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            assert_equal(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal(x, y, f"{path}/{i}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_kill_and_resume_bit_exact(tmp_path):
    full_store, full_dir = str(tmp_path / "full.strata"), str(tmp_path / "full")
    r = run("full", full_store, full_dir)
    assert r.returncode == 0, r.stderr[-3000:]

    store, ckdir = str(tmp_path / "run.strata"), str(tmp_path / "run")
    r = run("kill", store, ckdir)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-3000:])
    with strata.Store(store) as st:
        assert st.steps() == [10, 20, 30]
        assert st.verify()["ok"]
    r = run("resume", store, ckdir, os.path.join(ckdir, "step=30.ckpt"))
    assert r.returncode == 0, r.stderr[-3000:]

    a_io, b_io = StrataCheckpointIO(full_store), StrataCheckpointIO(store)
    try:
        for step in (40, 60):
            a = a_io.load_checkpoint(os.path.join(full_dir, f"step={step}.ckpt"))
            b = b_io.load_checkpoint(os.path.join(ckdir, f"step={step}.ckpt"))
            assert a["global_step"] == b["global_step"] == step
            for key in ("state_dict", "optimizer_states", "lr_schedulers", "epoch"):
                assert_equal(a[key], b[key], key)
        assert b_io.store.steps() == [10, 20, 30, 40, 50, 60]
    finally:
        a_io.teardown()
        b_io.teardown()


def test_checkpoint_io_roundtrip_and_remove(tmp_path):
    io = StrataCheckpointIO(tmp_path / "s.strata")
    opt_state = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4)}, 1: {"m": torch.ones(2)}},
        "param_groups": [{"lr": 0.1, "params": [0, 1], "betas": (0.9, 0.99)}],
    }
    ckpt = {
        "epoch": 2,
        "global_step": 7,
        "state_dict": {"w": torch.randn(3, 3), "b": torch.zeros(3, dtype=torch.bfloat16)},
        "optimizer_states": [opt_state],
        "loops": {"fit_loop": {"counter": 5, "nested": {"x": [1, 2, {"t": torch.arange(4)}]}}},
        "hyper_parameters": {"name": "tiny", "sizes": (1, 2)},
    }
    p1, p2 = tmp_path / "a" / "one.ckpt", tmp_path / "a" / "last.ckpt"
    io.save_checkpoint(ckpt, p1)
    # Same global step (last.ckpt after step=N.ckpt, the callbacks' state moved on): a second
    # pointer to the checkpoint written first.
    io.save_checkpoint({**ckpt, "callbacks": {"best": torch.ones(2)}}, p2)
    assert_equal(io.load_checkpoint(p1), ckpt)
    assert_equal(io.load_checkpoint(p2), ckpt)
    assert io.store.steps() == [7]
    io.remove_checkpoint(p1)
    assert not p1.exists() and io.store.steps() == [7]  # last.ckpt still refers to it
    io.remove_checkpoint(p2)
    assert io.store.steps() == []
    io.teardown()


def test_second_run_is_refused_and_stale_pointers_are_not_loaded(tmp_path):
    """Issue 26: a second run (another seed) into the same store and checkpoint folder. Without
    overwrite it stops at its first save; with it, the first run's pointers (step=N.ckpt) are
    refused instead of loading the second run's weights, and the second run's (step=N-v1.ckpt)
    load its own."""
    store, ckdir = str(tmp_path / "run.strata"), str(tmp_path / "ck")
    r = run("full", store, ckdir)
    assert r.returncode == 0, r.stderr[-3000:]
    with strata.open_read_only(store) as st:
        first_run = st.metadata(60)["strata.run_id"]
    r = run("full", store, ckdir, SEED="1")
    assert r.returncode != 0 and "CheckpointExists" in r.stderr, r.stderr[-3000:]
    assert "overwrite=True" in r.stderr
    with strata.open_read_only(store) as st:
        assert {st.metadata(s)["strata.run_id"] for s in st.steps()} == {first_run}
    r = run("full", store, ckdir, SEED="1", OVERWRITE="1")
    assert r.returncode == 0, r.stderr[-3000:]
    with strata.open_read_only(store) as st:
        assert st.steps() == [10, 20, 30, 40, 50, 60]
        runs = {st.metadata(s)["strata.run_id"] for s in st.steps()}
    assert len(runs) == 1 and first_run not in runs
    with pytest.raises(strata.StaleCheckpoint, match="replaced"):
        torch.load(os.path.join(ckdir, "step=20.ckpt"))
    io = StrataCheckpointIO(store)
    with pytest.raises(strata.StaleCheckpoint):
        io.load_checkpoint(os.path.join(ckdir, "step=20.ckpt"))
    second = io.load_checkpoint(os.path.join(ckdir, "step=20-v1.ckpt"))
    with strata.open_read_only(store) as st:
        want = st.load_checkpoint(20, framework="pt")
    assert second["global_step"] == 20
    for k, v in second["state_dict"].items():
        assert torch.equal(v, want["state_dict/" + k]), k


ENTRY_POINTS = """
import os, sys
sys.path.insert(0, {here!r})
import torch

ckpt = {ckpt!r}
# torch.load without strata imported beforehand: pickle imports strata.lightning itself.
raw = torch.load(ckpt, weights_only=False)
assert raw["global_step"] == 30 and "state_dict" in raw and "optimizer_states" in raw

import lightning as L
import strata.lightning  # allows the pointer's loader under weights_only=True
from _train_lightning import Data, Model

model = Model.load_from_checkpoint(ckpt)  # torch's default: weights_only=True
for k, v in raw["state_dict"].items():
    assert torch.equal(model.state_dict()[k], v), k
trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                    enable_model_summary=False)
dl = torch.utils.data.DataLoader(Data(), batch_size=8)
class Eval(Model):
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val", torch.nn.functional.mse_loss(self.net(x), y))
out = trainer.validate(Eval(), dl, ckpt_path=ckpt, verbose=False)  # default CheckpointIO
want = trainer.validate(Eval.load_from_checkpoint(ckpt), dl, verbose=False)
assert out == want, (out, want)
print("ok")
"""


def test_lightning_entry_points_load_a_pointer(tmp_path):
    """Issue 29 item 4: a pointer file loads with torch.load, LightningModule.load_from_checkpoint
    and Trainer.validate(ckpt_path=) without the plugin, in a fresh process."""
    store, ckdir = str(tmp_path / "run.strata"), str(tmp_path / "ck")
    r = run("full", store, ckdir)
    assert r.returncode == 0, r.stderr[-3000:]
    code = ENTRY_POINTS.format(here=HERE, ckpt=os.path.join(ckdir, "step=30.ckpt"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]

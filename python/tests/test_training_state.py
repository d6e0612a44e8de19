"""Training state through the drop-ins, aged by role and resumed end to end (issue 27 items 1
and 5, ADR 0027), with the real libraries on CPU.

- A Hugging Face Trainer run and a Lightning run save their full training state into a store
  (``StrataCallback(trainer_folders=False)``, ``StrataCheckpointIO``); the store is aged with
  ``age(keep_exact_last=2, training_state=True)``; training resumes from aged checkpoints
  through the documented paths (``strata.hf.checkpoint_folder``, ``Trainer.fit(ckpt_path=
  <pointer>)``) and is compared with resuming from the same checkpoints before aging.
- Every aged checkpoint of a store the HF drop-in wrote (f32 and bf16) is read back: second
  moments >= 0, finite, zeros kept, each element within the budget; counters, RNG and other
  state bit-exact; nothing non-finite.
- The names ``strata.dcp`` gives optimizer state (plain and FSDP2-sharded) get their roles.

The runs use one torch thread (fixture ``one_thread``): on two shared cores a second thread
made the Trainer's steps 7x slower.
"""

import math
import os
import socket
import statistics
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import strata
from _aged_audit import SECOND_MOMENT_BUDGET, audit, snapshot

HERE = os.path.dirname(os.path.abspath(__file__))

#: The resumed run's mean loss over its last steps may differ from the exact resume's by this
#: fraction: aging moves the trajectory (the weights by up to 5 % of their norm, first moments
#: to zeros), so the two runs see the same batches from slightly different states. The
#: differences resuming from every aged checkpoint of these runs measured are python/README.md's
#: table (python/benches/resume_aged.py). A store that breaks resumption (second moments read
#: back below zero, as before ADR 0027) gives NaN losses from the second step on.
TOLERANCE = 0.05
#: The weight budget of the training-state preset (relative Frobenius error per block).
WEIGHT_BUDGET = 5e-2


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mean_last(losses, last_step, count):
    return statistics.mean(losses[s] for s in range(last_step - count + 1, last_step + 1))


def second_moments(state):
    """``exp_avg_sq`` of every parameter of an optimizer ``state`` (index -> state dict)."""
    return [s["exp_avg_sq"] for s in state.values() if "exp_avg_sq" in s]


def check_resumed_state(start, exact_start):
    """The optimizer state a run resumed from an aged checkpoint starts with: the parameters
    of the exact resume, second moments >= 0 and finite, counters equal to the exact ones."""
    assert start.keys() == exact_start.keys()
    for i, s in start.items():
        assert torch.equal(s["step"], exact_start[i]["step"]), i
        assert (s["exp_avg_sq"] >= 0).all() and torch.isfinite(s["exp_avg_sq"]).all(), i
        assert torch.isfinite(s["exp_avg"]).all(), i


def check_aged_checkpoint(rows, step):
    """The checkpoint at ``step`` was aged by role: second moments in the log mode (each
    element within the budget, never below zero), weights within their budget, first moments
    aged, counters and state exact, and so is every tensor of at most 32 bytes (stored in its
    record, ADR 0029)."""
    mine = [r for r in rows if r.step == step]
    roles = {r.role for r in mine if r.fidelity["kind"] == "aged"}
    assert roles == {"weight", "first-moment", "second-moment"}, (step, roles)
    for r in mine:
        assert r.nonfinite == 0, (step, r.name)
        exact = r.role in ("counter", "state") or r.ndim == 0 or r.nbytes <= 32
        if exact or (r.ndim == 1 and r.role == "weight"):
            assert r.same_bits and r.fidelity == {"kind": "exact"}, (step, r.name, r.fidelity)
        elif r.role == "second-moment":
            assert r.fidelity["kind"] == "aged", (step, r.name)
            assert r.negatives == 0 and r.zeros_kept, (step, r.name)
            assert r.max_elem_rel <= SECOND_MOMENT_BUDGET, (step, r.name, r.max_elem_rel)
        elif r.role == "weight":
            assert r.fidelity["kind"] == "aged", (step, r.name)
            assert r.fidelity["rel_error"] <= WEIGHT_BUDGET, (step, r.name, r.fidelity)
            assert r.rel_error <= r.fidelity["rel_error"] * 1.01 + 1e-7, (step, r.name)


def age_and_audit(store, steps, resumed):
    """Ages the store with the training-state preset, the last 2 of ``steps`` kept exact;
    checks each aged checkpoint of ``resumed`` against what was saved
    (:func:`check_aged_checkpoint`); returns the checkpoints up to the last of ``resumed`` as
    read after aging (a resumed run saving later must leave them unchanged)."""
    saved = snapshot(store)
    with strata.Store(store) as st:
        report = st.age(keep_exact_last=2, training_state=True)
    assert report["aged"] == steps[:-2] and report["kept"] == steps[-2:]
    rows = audit(store, {r: saved[r] for r in resumed})
    for r in resumed:
        check_aged_checkpoint(rows, r)
    return read_steps(store, [s for s in steps if s <= resumed[-1]])


def read_steps(store, steps):
    """The checkpoints at ``steps``, each tensor with its fidelity."""
    with strata.open_read_only(store) as st:
        return {s: {k: st.get(k, s, framework="pt", with_fidelity=True) for k in st.keys(s)}
                for s in steps}


def same_reads(before, after):
    """``after`` reads every tensor of ``before`` bit for bit, with the same fidelity."""
    assert before.keys() == after.keys()
    for s, tensors in before.items():
        assert tensors.keys() == after[s].keys(), s
        for k, (t, fidelity) in tensors.items():
            u, fid = after[s][k]
            assert fid == fidelity, (s, k, fid, fidelity)
            assert torch.equal(t.view(torch.uint8) if t.dim() else t, u.view(torch.uint8)
                               if u.dim() else u), (s, k)


# ---- Hugging Face ------------------------------------------------------------------------

HF_STEPS, HF_EVERY, HF_LAST = 128, 16, 16  # 8 checkpoints, 6 aged; the last 2 epochs compared
HF_RESUME = (32, 80)


def test_hf_trainer_resumes_from_aged_checkpoints(tmp_path):
    """Train 128 steps saving full state every 16 into a store (no Trainer folders), age it,
    resume Trainer.train from aged checkpoints 32 and 80 through checkpoint_folder: finite
    losses, second moments >= 0, counters exact, the loss of the last 16 steps within
    TOLERANCE of resuming from the exact checkpoint. The resume from 80 saves into the store
    (overwrite=True: 96..128 are the run's abandoned future): the aged checkpoints before it
    read as before, the new ones bit-exact."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import _hf_run as run
    from strata.hf import StrataCallback, load_trainer_state

    store = str(tmp_path / "hf.strata")
    run.train(store, tmp_path / "run", HF_STEPS, HF_EVERY)
    steps = list(range(HF_EVERY, HF_STEPS + 1, HF_EVERY))
    exact = {r: run.resume(store, r, tmp_path / f"exact{r}", HF_STEPS, None)[1]
             for r in HF_RESUME}
    before = age_and_audit(store, steps, HF_RESUME)

    for r in HF_RESUME:
        saving = r == HF_RESUME[-1]
        callbacks = [StrataCallback(store, trainer_folders=False, overwrite=True)] if saving else []
        trainer, watch = run.resume(store, r, tmp_path / f"aged{r}", HF_STEPS,
                                    HF_EVERY if saving else None, callbacks)
        check_resumed_state(watch.start_state, exact[r].start_state)
        losses = [watch.losses[s] for s in range(r + 1, HF_STEPS + 1)]
        assert all(math.isfinite(x) for x in losses), losses
        for v in second_moments(trainer.optimizer.state_dict()["state"]):
            assert (v >= 0).all() and torch.isfinite(v).all()
        aged, want = (mean_last(w.losses, HF_STEPS, HF_LAST) for w in (watch, exact[r]))
        print(f"HF resume from aged step {r}: mean loss of the last {HF_LAST} steps "
              f"{aged:.4f}, from the exact checkpoint {want:.4f} ({aged / want - 1:+.2%})")
        assert abs(aged / want - 1) <= TOLERANCE, (r, aged, want)

    with strata.open_read_only(store) as st:
        assert st.steps() == [s for s in steps if s <= HF_RESUME[-1]] + steps[-3:]
        assert st.verify()["ok"]
    same_reads(before, read_steps(store, list(before)))
    final = {k: v for k, v in read_steps(store, [HF_STEPS])[HF_STEPS].items()
             if not k.startswith("__trainer__/")}
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(final[k][0], v) and final[k][1] == {"kind": "exact"}, k
    state = load_trainer_state(store, HF_STEPS)["optimizer"]["state"]
    for i, s in trainer.optimizer.state_dict()["state"].items():
        for k, v in s.items():
            assert torch.equal(state[i][k], v), (i, k)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_aging_an_hf_store_keeps_every_tensor_in_its_domain(tmp_path, dtype):
    """Issue 27 item 1 on a store the HF drop-in wrote (64 steps of full state every 8, in
    f32 and in bf16): across every aged checkpoint, read back, no second moment is negative,
    non-finite, or off by more than the budget in any element, zeros stay zeros, every
    counter, RNG state and 1-D tensor is bit-exact, nothing is non-finite; the kept
    checkpoints are bit-exact."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import _hf_run as run

    store = str(tmp_path / "hf.strata")
    run.train(store, tmp_path / "run", 64, 8, dtype=getattr(torch, dtype))
    saved = snapshot(store)
    assert saved[8]["__trainer__/optimizer/state/0/exp_avg_sq"].dtype == getattr(torch, dtype)
    with strata.Store(store) as st:
        report = st.age(keep_exact_last=2, training_state=True)
    assert report["aged"] == list(range(8, 49, 8)) and report["kept"] == [56, 64]
    rows = audit(store, saved)
    for r in rows:
        assert r.nonfinite == 0, (r.step, r.name)
        if r.step in report["kept"]:
            assert r.same_bits and r.fidelity == {"kind": "exact"}, (r.step, r.name)
    for step in report["aged"]:
        check_aged_checkpoint(rows, step)
    second = [r for r in rows if r.role == "second-moment"]
    counters = [r for r in rows if r.role == "counter"]
    assert len(counters) == len(second) > 0
    assert sum(r.negatives for r in second) == 0
    assert all(r.same_bits for r in counters)
    assert any(r.name.startswith("__trainer__/rng_state/") for r in rows)
    print(f"{dtype}: {len(second)} second moments read back, the largest element error "
          f"{max(r.max_elem_rel for r in second):.3f}")


# ---- Lightning ---------------------------------------------------------------------------

L_STEPS, L_EVERY, L_LAST = 100, 10, 20  # 10 checkpoints, 8 aged; the last 2 epochs compared
L_RESUME = (20, 60)


def test_lightning_fit_resumes_from_aged_checkpoints(tmp_path):
    """Train 100 steps with a checkpoint every 10 through StrataCheckpointIO, age the store,
    resume Trainer.fit(ckpt_path=<pointer>) from aged checkpoints 20 and 60: finite losses,
    second moments >= 0, counters exact, the loss of the last 20 steps within TOLERANCE of
    resuming from the same pointer before aging. Every checkpoint of a Lightning store is
    tagged by its pointers (``lightning:<path>``), tags that keep nothing exact: the
    default keep_tagged=True ages them. The resume from 60
    saves through the plugin (overwrite=True): aged checkpoints before it read as before,
    the new ones load bit-exact through their pointers, and the old pointers past 60 are
    stale."""
    pytest.importorskip("lightning")
    import _lightning_run as run
    from strata.lightning import StrataCheckpointIO

    store, ckdir = str(tmp_path / "l.strata"), tmp_path / "ck"
    run.train(store, ckdir, L_STEPS, L_EVERY)
    steps = list(range(L_EVERY, L_STEPS + 1, L_EVERY))
    pointer = {s: str(ckdir / f"step={s}.ckpt") for s in steps}
    exact = {r: run.resume(pointer[r], L_STEPS)[1] for r in L_RESUME}
    before = age_and_audit(store, steps, L_RESUME)

    for r in L_RESUME:
        saving = r == L_RESUME[-1]
        kw = {"store": store, "ckdir": tmp_path / "ck2", "every": L_EVERY} if saving else {}
        trainer, watch = run.resume(pointer[r], L_STEPS, **kw)
        check_resumed_state(watch.start_state, exact[r].start_state)
        losses = [watch.losses[s] for s in range(r + 1, L_STEPS + 1)]
        assert all(math.isfinite(x) for x in losses), losses
        for v in second_moments(trainer.optimizers[0].state_dict()["state"]):
            assert (v >= 0).all() and torch.isfinite(v).all()
        aged, want = (mean_last(w.losses, L_STEPS, L_LAST) for w in (watch, exact[r]))
        print(f"Lightning resume from aged step {r}: mean loss of the last {L_LAST} steps "
              f"{aged:.4f}, from the exact checkpoint {want:.4f} ({aged / want - 1:+.2%})")
        assert abs(aged / want - 1) <= TOLERANCE, (r, aged, want)

    with strata.open_read_only(store) as st:
        assert st.steps() == steps
        assert st.verify()["ok"]
    same_reads(before, read_steps(store, list(before)))
    with pytest.raises(strata.StaleCheckpoint):
        torch.load(pointer[L_STEPS])
    io = StrataCheckpointIO(store)
    try:
        final = io.load_checkpoint(tmp_path / "ck2" / f"step={L_STEPS}.ckpt")
    finally:
        io.teardown()
    assert final["global_step"] == L_STEPS
    for k, v in trainer.lightning_module.state_dict().items():
        assert torch.equal(final["state_dict"][k], v), k
    for i, s in trainer.optimizers[0].state_dict()["state"].items():
        for k, v in s.items():
            assert torch.equal(final["optimizer_states"][0]["state"][i][k], v), (i, k)


# ---- torch.distributed.checkpoint --------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dcp_aged(directory, mode, world):
    """An AdamW run saved through StrataStorageWriter every 3 steps by ``world`` processes
    (``_dcp_train_worker.py``), then aged with the training-state preset: the store, every
    checkpoint as saved, and the aging report."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    pytest.importorskip("torch.distributed.checkpoint")
    store, port = str(directory / "dcp.strata"), str(free_port())
    procs = [
        subprocess.Popen([sys.executable, os.path.join(HERE, "_dcp_train_worker.py"), mode,
                          str(r), str(world), port, store],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(world)
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, logs[r][-4000:]
    saved = snapshot(store)
    with strata.Store(store) as st:
        report = st.age(keep_exact_last=2, training_state=True)
    assert report["aged"] == [3, 6]
    return store, saved, report


@pytest.fixture(scope="module")
def dcp_plain(tmp_path_factory):
    return dcp_aged(tmp_path_factory.mktemp("dcp"), "plain", 1)


def check_dcp_roles(store, saved, report):
    rows = audit(store, saved)
    for step in report["aged"]:
        check_aged_checkpoint(rows, step)
    assert any(r.role == "counter" for r in rows)


def test_dcp_optimizer_state_gets_its_roles(dcp_plain):
    """A plain model's state saved through strata.dcp (``optim.state.<fqn>.exp_avg_sq``,
    ``...step``) and aged: second moments in the log mode, counters exact, weights aged."""
    check_dcp_roles(*dcp_plain)


def test_dcp_sharded_optimizer_state_gets_its_roles(tmp_path):
    """The same with FSDP2 on 2 ranks: chunks ``optim.state.<fqn>.exp_avg_sq@<offsets>``."""
    check_dcp_roles(*dcp_aged(tmp_path, "fsdp", 2))


def test_dcp_load_resumes_from_an_aged_checkpoint(dcp_plain):
    """dcp.load of aged checkpoint 3 into a fresh model and optimizer: second moments >= 0
    and finite, counters as saved; 9 more steps train with finite losses."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    import _dcp_train_worker as run
    from strata.dcp import StrataStorageReader

    store, saved, _ = dcp_plain
    model = run.model()
    opt = run.optimizer(model)
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, storage_reader=StrataStorageReader(store, step=3), no_dist=True)
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    loaded = get_state_dict(model, opt)[1]["state"]
    assert loaded.keys() == {k.split(".", 2)[2].rsplit(".", 1)[0] for k in saved[3]
                             if k.startswith("optim.state.")}
    for fqn, s in loaded.items():
        assert torch.equal(s["step"], saved[3][f"optim.state.{fqn}.step"]), fqn
        assert (s["exp_avg_sq"] >= 0).all() and torch.isfinite(s["exp_avg_sq"]).all(), fqn
    g = torch.Generator().manual_seed(3)
    losses = [run.train_step(model, opt, g) for _ in range(9)]
    assert all(math.isfinite(x) for x in losses), losses

"""Lossy aging of old checkpoints (issue 15, ``Store.age``) on a small synthetic bf16 series:
what is kept exact stays bit-exact, what is aged stays within the budget it reports, and the
store shrinks and still verifies."""

import numpy as np
import pytest

import strata

torch = pytest.importorskip("torch")

STEPS = [10, 20, 30, 40, 50, 60]
BUDGET = 1e-2


def series():
    """Six checkpoints of a drifting 'model' (a random walk of small updates, as in
    training), bf16: two matrices, a bias and a norm weight (1-D)."""
    g = torch.Generator().manual_seed(15)
    w = torch.randn(256, 96, generator=g) * 0.05
    e = torch.randn(300, 64, generator=g)
    b = torch.randn(96, generator=g) * 0.01
    n = torch.ones(64)
    out = {}
    for step in STEPS:
        w = w + 1e-3 * torch.randn(w.shape, generator=g)
        e = e + 1e-3 * torch.randn(e.shape, generator=g)
        b = b + 1e-4 * torch.randn(b.shape, generator=g)
        n = n + 1e-3 * torch.randn(n.shape, generator=g)
        out[step] = {
            "layer.weight": w.bfloat16(),
            "embed.weight": e.bfloat16(),
            "layer.bias": b.bfloat16(),
            "norm.weight": n.bfloat16(),
        }
    return out


def rel_error(a, e):
    a, e = a.double(), e.double()
    return (torch.linalg.vector_norm(a - e) / torch.linalg.vector_norm(e)).item()


def same_bits(a, e):
    return a.dtype == e.dtype and a.shape == e.shape and torch.equal(a.view(torch.int16), e.view(torch.int16))


def test_age_keeps_last_exact_and_ages_within_budget(store_path):
    data = series()
    with strata.Store(store_path) as st:
        for step, sd in data.items():
            st.save_checkpoint(step, sd)
        before = st.stats()
        report = st.age(keep_exact_last=2, budget=BUDGET)
        after = st.stats()

        assert sorted(report["kept"]) == STEPS[-2:]
        assert sorted(report["aged"]) == STEPS[:-2]
        assert report["versions_aged"] > 0
        assert 0 < report["max_rel_error"] <= BUDGET
        assert after["stored_bytes"] < before["stored_bytes"]
        assert report["stored_bytes_before"] == before["stored_bytes"]
        assert report["stored_bytes_after"] == after["stored_bytes"]
        assert after["raw_bytes"] == before["raw_bytes"]
        assert st.steps() == STEPS

        for step in STEPS[-2:]:
            for name, exact in data[step].items():
                got, fid = st.get(name, step, framework="pt", with_fidelity=True)
                assert same_bits(got, exact), (step, name)
                assert fid["kind"] == "exact", (step, name, fid)

        worst = 0.0
        for step in STEPS[:-2]:
            loaded = st.load_checkpoint(step, framework="pt")
            assert list(loaded) == list(data[step])
            for name, exact in data[step].items():
                got, fid = st.get(name, step, framework="pt", with_fidelity=True)
                assert got.dtype == torch.bfloat16 and got.shape == exact.shape
                assert same_bits(loaded[name], got), (step, name)
                if exact.dim() == 1:
                    assert fid["kind"] == "exact", (step, name, fid)
                    assert same_bits(got, exact), (step, name)
                    continue
                assert fid["kind"] == "aged", (step, name, fid)
                assert 0 <= fid["rel_error"] <= BUDGET, (step, name, fid)
                measured = rel_error(got, exact)
                assert measured <= fid["rel_error"] * 1.01 + 1e-7, (step, name, measured, fid)
                worst = max(worst, fid["rel_error"])
        assert worst <= report["max_rel_error"] * (1 + 1e-6)

        v = st.verify()
        assert v["ok"], v["issues"]
    # and after reopening
    with strata.Store(store_path) as st:
        assert st.verify()["ok"]
        got, fid = st.get("layer.weight", STEPS[0], framework="pt", with_fidelity=True)
        assert fid["kind"] == "aged"
        assert rel_error(got, data[STEPS[0]]["layer.weight"]) <= fid["rel_error"] * 1.01 + 1e-7


def test_age_refuses_keep_exact_last_0(store_path):
    data = series()
    with strata.Store(store_path) as st:
        for step in STEPS[:3]:
            st.save_checkpoint(step, data[step])
        before = st.stats()
        # Refused by the store's policy check (InvalidInput, a StrataError, not a ValueError).
        with pytest.raises(strata.InvalidInput, match="keep_exact_last must be at least 1"):
            st.age(keep_exact_last=0, budget=BUDGET)
        # nothing changed
        assert st.stats()["stored_bytes"] == before["stored_bytes"]
        for step in STEPS[:3]:
            got, fid = st.get("layer.weight", step, framework="pt", with_fidelity=True)
            assert fid["kind"] == "exact"
            assert same_bits(got, data[step]["layer.weight"])


def test_age_needs_a_budget_and_has_a_dry_run(store_path):
    """Issue 26 (case 10): aging cannot be undone, so it needs an explicit budget (or
    yes=True); a dry run measures the pass and changes nothing."""
    with strata.Store(store_path) as st:
        for step, sd in series().items():
            st.save_checkpoint(step, sd)
        before = st.stats()["stored_bytes"]
        with pytest.raises(strata.InvalidInput, match="budget"):
            st.age(keep_exact_last=2)
        dry = st.age(keep_exact_last=2, budget=BUDGET, dry_run=True)
        assert dry["dry_run"] and sorted(dry["aged"]) == STEPS[:-2]
        assert st.stats()["stored_bytes"] == before
        _, fidelity = st.get("layer.weight", STEPS[0], framework="pt", with_fidelity=True)
        assert fidelity["kind"] == "exact"
        real = st.age(keep_exact_last=2, budget=BUDGET)
        assert real["stored_bytes_after"] == dry["stored_bytes_after"]
        assert real["compaction_deferred"] is None

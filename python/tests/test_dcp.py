"""torch.distributed.checkpoint through StrataStorageWriter / StrataStorageReader with two CPU
processes (gloo): each rank stages its items, the coordinator commits one checkpoint."""

import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

import strata

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tmp_path, store, *extra):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    port = str(free_port())
    procs = [
        subprocess.Popen([sys.executable, os.path.join(HERE, "_dcp_worker.py"), str(r), "2", port,
                          store, str(tmp_path / f"out{r}"), *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(2)
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, logs[r][-4000:]
        assert (tmp_path / f"out{r}").read_text() == "ok"


def test_two_ranks_save_and_load_through_a_remote(tmp_path):
    """Each rank pushes its part; the coordinator joins them into one remote checkpoint."""
    store = str(tmp_path / "dcp.strata")
    url = f"file://{tmp_path / 'remote'}"
    run_ranks(tmp_path, store, url)
    r = strata.open_remote(url, cache_dir=tmp_path / "cache")
    assert r.steps() == [100]
    keys = r.keys(100)
    assert "model.w" in keys and "rank0.only" in keys and "rank1.only" in keys
    assert not os.path.exists(store)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".staging")]


def test_two_ranks_save_and_load(tmp_path):
    store = str(tmp_path / "dcp.strata")
    run_ranks(tmp_path, store)
    with strata.Store(store) as st:
        assert st.steps() == [100]
        keys = st.keys(100)
        assert "model.w" in keys and "rank0.only" in keys and "rank1.only" in keys
        assert st.verify()["ok"]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".staging")]

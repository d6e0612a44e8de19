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


def test_two_ranks_save_and_load(tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    store = str(tmp_path / "dcp.strata")
    port = str(free_port())
    procs = [
        subprocess.Popen([sys.executable, os.path.join(HERE, "_dcp_worker.py"), str(r), "2", port,
                          store, str(tmp_path / f"out{r}")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(2)
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, logs[r][-4000:]
        assert (tmp_path / f"out{r}").read_text() == "ok"
    with strata.Store(store) as st:
        assert st.steps() == [100]
        keys = st.keys(100)
        assert "model.w" in keys and "rank0.only" in keys and "rank1.only" in keys
        assert st.verify()["ok"]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".staging")]

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


def run_fsdp(mode, world, store, ref):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    port = str(free_port())
    procs = [
        subprocess.Popen([sys.executable, os.path.join(HERE, "_fsdp_worker.py"), mode, str(r),
                          str(world), port, store, ref],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(world)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, logs[r][-4000:]
    return logs[0]


@pytest.mark.parametrize("saved_on, loaded_on", [(2, 2), (2, 1), (1, 2)])
def test_fsdp2_save_and_load_with_another_world_size(tmp_path, saved_on, loaded_on):
    """Issue 29 item 5: an FSDP2 (fully_shard, DTensor) model and its AdamW state saved by
    `saved_on` gloo ranks and loaded by `loaded_on`; the gathered full state is bit-exact. The
    loading ranks read through read-only opens while this process holds the store open as its
    writer (a trainer still writing), which the earlier exclusive opens could not."""
    store, ref = str(tmp_path / "fsdp.strata"), str(tmp_path / "full.pt")
    run_fsdp("save", saved_on, store, ref)
    with strata.Store(store) as st:
        assert st.steps() == [7]
        keys = st.keys(7)
        assert any("@" in k for k in keys)  # chunks of sharded tensors
        assert any("exp_avg_sq" in k for k in keys)
        assert st.verify()["ok"]
        assert run_fsdp("load", loaded_on, store, ref).strip().endswith("ok")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".staging")]


def test_save_behind_existing_checkpoints_is_refused(tmp_path):
    """Issue 26: a DCP save at a step the store already has (or behind one) is refused before
    any rank writes; overwrite=True replaces them."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from strata.dcp import StrataStorageReader, StrataStorageWriter

    store = str(tmp_path / "dcp.strata")
    first, second = {"w": torch.ones(4, 4)}, {"w": torch.zeros(4, 4)}
    dcp.save(first, storage_writer=StrataStorageWriter(store, step=20), no_dist=True)
    for step in (20, 10):
        with pytest.raises(CheckpointException) as e:
            dcp.save(second, storage_writer=StrataStorageWriter(store, step=step), no_dist=True)
        (failure, _trace), = e.value.failures.values()
        assert isinstance(failure, strata.CheckpointExists)
        assert f"saves step {step}" in str(failure) and "overwrite=True" in str(failure)
    with strata.open_read_only(store) as st:
        assert st.steps() == [20]
        first_run = st.metadata(20)["strata.run_id"]
    dcp.save(second, storage_writer=StrataStorageWriter(store, step=10, overwrite=True),
             no_dist=True)
    with strata.open_read_only(store) as st:
        assert st.steps() == [10]
        assert st.metadata(10)["strata.run_id"] != first_run
    out = {"w": torch.full((4, 4), 7.0)}
    dcp.load(out, storage_reader=StrataStorageReader(store), no_dist=True)
    assert torch.equal(out["w"], second["w"])

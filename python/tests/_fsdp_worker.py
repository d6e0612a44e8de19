"""One rank of test_dcp.py's FSDP2 tests: a small model sharded with ``fully_shard`` (DTensor
parameters and AdamW state) on gloo/CPU, saved to or loaded from a store through DCP, as
torch's own DCP tests do with ``FileSystemWriter``.

usage: _fsdp_worker.py save|load RANK WORLD PORT STORE REF

save: trains 2 steps, saves model and optimizer at step 7 (StrataStorageWriter), and rank 0
      writes the full (unsharded) state to REF with torch.save.
load: builds the model on WORLD ranks, loads step 7 (StrataStorageReader), gathers the full
      state and rank 0 compares it with REF; prints "ok" on success.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from _gloo_exit import leave
from strata.dcp import StrataStorageReader, StrataStorageWriter

STEP = 7


def build(world):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 48), torch.nn.ReLU(), torch.nn.Linear(48, 48), torch.nn.ReLU(),
        torch.nn.Linear(48, 5),
    )
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def full_state(model, opt):
    return get_state_dict(model, opt,
                          options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def same(a, b, path="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (path, sorted(a), sorted(b))
        for k in a:
            same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}/{i}")
    else:
        assert a == b, (path, a, b)


def main():
    mode, rank, world, port, store, ref = sys.argv[1:7]
    rank, world = int(rank), int(world)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model, opt = build(world)
    if mode == "save":
        g = torch.Generator().manual_seed(rank)
        for _ in range(2):
            model(torch.randn(8, 16, generator=g)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        model_sd, optim_sd = get_state_dict(model, opt)
        assert any(type(v).__name__ == "DTensor" for v in model_sd.values())
        dcp.save({"model": model_sd, "optim": optim_sd},
                 storage_writer=StrataStorageWriter(store, step=STEP))
        full = full_state(model, opt)
        if rank == 0:
            torch.save(full, ref)
    else:
        model_sd, optim_sd = get_state_dict(model, opt)  # (initializes the optimizer state)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, storage_reader=StrataStorageReader(store, step=STEP))
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        full = full_state(model, opt)
        if rank == 0:
            same(torch.load(ref, weights_only=False), full)
            print("ok", flush=True)
    leave()


if __name__ == "__main__":
    main()

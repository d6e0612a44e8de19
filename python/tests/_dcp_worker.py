"""One rank of test_dcp.py: dcp.save then dcp.load through the Strata storage, gloo on CPU.

usage: _dcp_worker.py RANK WORLD PORT STORE OUT [REMOTE]

With REMOTE (a URL), each rank pushes its part there and the coordinator joins them.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from _gloo_exit import leave
from strata.dcp import StrataStorageReader, StrataStorageWriter


def state(rank, seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "model": {
            "w": torch.randn(64, 32, generator=g),
            "b": torch.randn(32, generator=g).to(torch.bfloat16),
        },
        f"rank{rank}.only": torch.full((5,), float(rank)) + seed,
        "extra": {"epoch": 3 + seed, "names": ["a", "b"]},
    }


def main():
    rank, world, port, store, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    rank, world = int(rank), int(world)
    remote = sys.argv[6] if len(sys.argv) > 6 else None
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sd = state(rank, 0)
    dcp.save(sd, storage_writer=StrataStorageWriter(store, step=100, remote=remote))
    dist.barrier()
    target = state(rank, 1)  # other values: load must overwrite them
    dcp.load(target, storage_reader=StrataStorageReader(store, step=100, remote=remote))
    ok = (
        torch.equal(target["model"]["w"], sd["model"]["w"])
        and torch.equal(target["model"]["b"], sd["model"]["b"])
        and torch.equal(target[f"rank{rank}.only"], sd[f"rank{rank}.only"])
        and target["extra"] == sd["extra"]
    )
    with open(out, "w") as f:
        f.write("ok" if ok else f"mismatch: {target}")
    leave()


if __name__ == "__main__":
    main()

"""One rank of test_training_state.py's DCP run: a small MLP, FSDP2-sharded (``fully_shard``,
DTensor parameters and AdamW state) on gloo/CPU or plain, trained 12 steps with AdamW and saved
with its optimizer state through ``StrataStorageWriter`` every 3 steps (steps 3, 6, 9, 12).
The test imports :func:`model`, :func:`optimizer` and :func:`train_step` to resume the plain
run in its own process.

usage: _dcp_train_worker.py fsdp|plain RANK WORLD PORT STORE
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from _gloo_exit import leave
from strata.dcp import StrataStorageWriter


def model():
    """The MLP, seeded."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 96), torch.nn.Tanh(), torch.nn.Linear(96, 96), torch.nn.Tanh(),
        torch.nn.Linear(96, 4),
    )


def optimizer(m):
    """AdamW, lr 1e-2."""
    return torch.optim.AdamW(m.parameters(), lr=1e-2)


def train_step(m, opt, g):
    """One AdamW step on a batch drawn from generator ``g``; the loss."""
    x = torch.randn(16, 32, generator=g)
    loss = torch.nn.functional.mse_loss(m(x), x[:, :4].sin())
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def main():
    mode, rank, world, port, store = sys.argv[1:6]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    net = model()
    if mode == "fsdp":
        mesh = init_device_mesh("cpu", (world,))
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(net, mesh=mesh)
    opt = optimizer(net)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, 13):
        train_step(net, opt, g)
        if step % 3 == 0:
            model_sd, optim_sd = get_state_dict(net, opt)
            dcp.save({"model": model_sd, "optim": optim_sd},
                     storage_writer=StrataStorageWriter(store, step=step))
    leave()


if __name__ == "__main__":
    main()

"""One rank of test_training_state.py's DCP run: a small MLP, FSDP2-sharded (``fully_shard``,
DTensor parameters and AdamW state) on gloo/CPU or plain, trained 12 steps with AdamW and saved
with its optimizer state through ``StrataStorageWriter`` every 3 steps (steps 3, 6, 9, 12).

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

from strata.dcp import StrataStorageWriter

torch.set_num_threads(1)


def main():
    mode, rank, world, port, store = sys.argv[1:6]
    rank, world = int(rank), int(world)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 96), torch.nn.Tanh(), torch.nn.Linear(96, 96), torch.nn.Tanh(),
        torch.nn.Linear(96, 4),
    )
    if mode == "fsdp":
        mesh = init_device_mesh("cpu", (world,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, 13):
        x = torch.randn(16, 32, generator=g)
        torch.nn.functional.mse_loss(model(x), x[:, :4].sin()).backward()
        opt.step()
        opt.zero_grad()
        if step % 3 == 0:
            model_sd, optim_sd = get_state_dict(model, opt)
            dcp.save({"model": model_sd, "optim": optim_sd},
                     storage_writer=StrataStorageWriter(store, step=step))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""How the gloo worker scripts end.

A gloo process can abort with SIGABRT ("terminate called without an active exception") while
the interpreter finalizes, even after ``destroy_process_group``: objects that still hold gloo
work (FSDP2's DTensors and hooks, the optimizer state) are torn down after the C++ runtime has
begun to exit (pytorch/pytorch#179291 describes the same crash). Once a worker has done and
checked its work, it leaves with ``os._exit`` so that a clean run cannot fail in teardown.
Every store a worker opens is closed by a ``with`` block before this point.
"""

import os
import sys

import torch.distributed as dist


def leave():
    """Wait for every rank, destroy the process group, flush and exit 0 without finalization."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

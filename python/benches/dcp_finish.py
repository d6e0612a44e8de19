"""What the DCP coordinator's commit costs in memory (ADR 0016, issue 29 item 5).

Two ranks' staging stores of --mb MB each (f32 tensors of 4 MiB, random: incompressible, the
worst case for memory) are committed into one checkpoint of a new store, each way in its own
child process, whose peak RSS (VmHWM, Linux) is reported with its peak before the commit:

- ``load + save_checkpoint``: what ``StrataStorageWriter.finish`` did: every staging checkpoint
  loaded whole, then one ``save_checkpoint`` of all tensors;
- ``save_checkpoint_from``: what it does now: the staging stores copied tensor by tensor.

    python python/benches/dcp_finish.py [--mb 512]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import strata

CHILD = """
import sys, time
import strata

def peak_mb():  # this process's own high-water mark (ru_maxrss carries the parent's over exec)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) // 1024

mode, dst, *stagings = sys.argv[1:]
before = peak_mb()
start = time.perf_counter()
with strata.Store(dst) as st:
    if mode == "load":
        tensors = {}
        for s in stagings:
            with strata.Store(s) as src:
                tensors.update(src.load_checkpoint(0))
        st.save_checkpoint(1, tensors)
    else:
        st.save_checkpoint_from(1, [(s, 0) for s in stagings])
print(before, peak_mb(), f"{time.perf_counter() - start:.2f}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=512, help="MB per rank's staging store")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="strata-dcp-finish-")
    rng = np.random.default_rng(0)
    per = 1 << 20  # f32 elements per tensor: 4 MiB
    stagings = []
    for rank in range(2):
        path = os.path.join(tmp, f"rank{rank}.staging")
        with strata.Store(path) as st:
            n = max(1, args.mb * 2**20 // (4 * per))
            st.save_checkpoint(0, {f"r{rank}.t{i}": rng.standard_normal(per, np.float32)
                                   for i in range(n)})
        stagings.append(path)
    raw = sum(os.path.getsize(s) for s in stagings) / 2**20
    print(f"2 staging stores, {raw:.0f} MB on disk together; peak RSS of a child process "
          f"(MB), the commit into a new store; {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    print("| commit | peak RSS before MB | peak RSS MB | seconds |")
    print("|---|---|---|---|")
    for mode, name in (("load", "load + save_checkpoint (before)"),
                       ("copy", "save_checkpoint_from (now)")):
        dst = os.path.join(tmp, f"{mode}.strata")
        out = subprocess.run([sys.executable, "-c", CHILD, mode, dst, *stagings],
                             capture_output=True, text=True, check=True).stdout.split()
        print(f"| {name} | {out[0]} | {out[1]} | {out[2]} |")
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()

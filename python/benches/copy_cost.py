"""What the zero-copy output of ADR 0015 saves: loading a checkpoint as the package does (the
decoded buffers become the arrays' memory) against the same load plus one copy per tensor (what
a binding that returns `bytes` and builds arrays from them, e.g. `np.frombuffer(...).copy()` or
`torch.frombuffer(bytearray(b))`, pays), and `get` per tensor (the store decodes into an array
created empty) against `load_checkpoint` (arrays allocated first, every block of the checkpoint
decoded into them in parallel: `CheckpointReader::read_into`).

    python python/benches/copy_cost.py [SAFETENSORS_FILE] [--runs N]

Prints a markdown table; seconds are medians and depend on the machine's load.
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import strata

DEFAULT = "/work/cache/minilm/all-MiniLM-L6-v2.safetensors"


def median_time(f, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.strata")
        with strata.Store(path) as st:
            st.import_safetensors(args.file, 0)
            names = st.keys(0)
            raw = sum(a.nbytes for a in st.load_checkpoint(0).values())

        # Each read opens the store, so the store's block cache is cold (as in a new process).
        def load(copy):
            with strata.Store(path) as st:
                sd = st.load_checkpoint(0)
                return {k: np.array(v, copy=True) for k, v in sd.items()} if copy else sd

        def get_each():
            with strata.Store(path) as st:
                return {k: st.get(k, 0) for k in names}

        rows = [
            ("load_checkpoint (zero copy, as shipped)", lambda: load(False)),
            ("load_checkpoint + one copy per tensor", lambda: load(True)),
            ("get per tensor (decode into a new array)", get_each),
        ]
        print(f"{os.path.basename(args.file)}: {len(names)} tensors, {raw / 1e6:.1f} MB raw; "
              f"median of {args.runs} runs, load average {os.getloadavg()[0]:.1f}\n")
        print("| read | seconds | MB/s |")
        print("|---|---|---|")
        for label, f in rows:
            f()  # warm the page cache
            s = median_time(f, args.runs)
            print(f"| {label} | {s:.3f} | {raw / 1e6 / s:.0f} |")


if __name__ == "__main__":
    main()

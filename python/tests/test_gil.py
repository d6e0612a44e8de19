"""The GIL is released while the store encodes, decodes and writes: another Python thread keeps
running during a long save and a long load."""

import threading
import time

import numpy as np

import strata


def longest_stall(work):
    """Runs `work` in a thread; returns (its duration, the longest gap between two iterations
    of a Python loop in this thread meanwhile)."""
    done = threading.Event()
    spent = {}

    def run():
        t0 = time.perf_counter()
        work()
        spent["s"] = time.perf_counter() - t0
        done.set()

    t = threading.Thread(target=run)
    t.start()
    last, gap = time.perf_counter(), 0.0
    while not done.is_set():
        now = time.perf_counter()
        gap = max(gap, now - last)
        last = now
        time.sleep(0.001)
    t.join()
    return spent["s"], gap


def test_save_and_load_release_the_gil(store_path):
    big = {f"w{i}": np.random.default_rng(i).standard_normal(4_000_000, dtype=np.float32)
           for i in range(4)}  # 64 MB of incompressible floats
    with strata.Store(store_path) as st:
        duration, gap = longest_stall(lambda: st.save_checkpoint(1, big))
        assert gap < max(0.5 * duration, 0.05), (duration, gap)
        duration, gap = longest_stall(lambda: st.load_checkpoint(1))
        assert gap < max(0.5 * duration, 0.05), (duration, gap)

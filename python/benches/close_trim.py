"""A PyTorch training loop's store before and after ``close()`` (issue 29 item 7, ADR 0028).

    python python/benches/close_trim.py [--width 512] [--steps 400] [--every 10] [--json]

Trains a small MLP (256 -> width -> width -> 10, AdamW) on random data and saves the model's and
the optimizer's tensors with ``Store.save_checkpoint`` every ``--every`` steps, in one store
opened with ``with strata.Store(...)``. Prints the file's length (``ls -l``) and bytes on disk
(``st_blocks * 512``, ``du``) before and after the close, ``stats()``'s ratio, and the seconds
the saves and the close took. Figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import torch

import strata


def sizes(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_blocks * 512


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, a.width), torch.nn.ReLU(), torch.nn.Linear(a.width, a.width),
        torch.nn.ReLU(), torch.nn.Linear(a.width, 10),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))

    def training_state() -> dict[str, torch.Tensor]:
        state = {f"model/{k}": v for k, v in model.state_dict().items()}
        for name, p in model.named_parameters():
            for moment in ("exp_avg", "exp_avg_sq"):
                state[f"optimizer/{name}/{moment}"] = opt.state[p][moment]
        return state

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.strata")
        save_s = 0.0
        st = strata.Store(path)
        for step in range(1, a.steps + 1):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if step % a.every == 0:
                t0 = time.perf_counter()
                st.save_checkpoint(step, training_state())
                save_s += time.perf_counter() - t0
        before = sizes(path)
        stats = st.stats()
        t0 = time.perf_counter()
        st.close()
        close_s = time.perf_counter() - t0
        after = sizes(path)
        with strata.open_read_only(path) as r:
            closed_stats = r.stats()

    doc = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "parameters": sum(p.numel() for p in model.parameters()),
        "checkpoints": stats["checkpoints"],
        "raw_bytes": stats["raw_bytes"],
        "before_close": {"file_bytes": before[0], "disk_bytes": before[1]},
        "after_close": {"file_bytes": after[0], "disk_bytes": after[1]},
        "ratio": closed_stats["ratio"],
        "save_s": save_s,
        "close_s": close_s,
    }
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"{doc['parameters']} parameters, {doc['checkpoints']} checkpoints, "
          f"raw {doc['raw_bytes'] / 1e6:.2f} MB, ratio {doc['ratio']:.3f} (raw / bytes on disk); "
          f"saves {save_s:.2f} s, close {close_s:.3f} s")
    print("| | file MB (ls -l) | on disk MB | length / disk |")
    print("|---|---|---|---|")
    for label, (length, disk) in [("before close()", before), ("after close()", after)]:
        print(f"| {label} | {length / 1e6:.2f} | {disk / 1e6:.2f} | {length / disk:.3f} |")


if __name__ == "__main__":
    main()

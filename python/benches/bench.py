"""Save and load through the Python API: Strata vs safetensors.torch vs torch.save/torch.load vs
`torch.distributed.checkpoint` (DCP) with its FileSystemWriter/FileSystemReader.

    python python/benches/bench.py [--minilm PATH] [--series DIR] [--runs N] [--json OUT]

Data sets (each skipped with a note if absent):
- MiniLM (all-MiniLM-L6-v2.safetensors, f32, 90.9 MB; `../shared/data/fetch-minilm.sh` gets it;
  default /work/cache/minilm/ or ../shared/data/minilm/), as is and cast to bf16: one checkpoint.
- The dev series (../shared/data/series/dev_pre, dev_ft and their bf16/): every checkpoint of a
  series, saved in step order (Strata: one store with one checkpoint per step; the others:
  one file per step; DCP: one checkpoint folder per step), then all loaded back.

DCP runs in one process without a process group (as `dcp.save(sd, checkpoint_id=...)` allows)
and loads in place, into tensors the load allocates first (`torch.empty_like`), as DCP's users
do.

Each (tool, operation, data set) runs in its own subprocess, which repeats it `--runs` times
(fresh output each time for saves) and reports the median seconds and its peak RSS. A Strata
save opens the store as a writer and closes it; a Strata load opens it read-only
(`strata.open_read_only`), as a process that only loads does
(ru_maxrss, which includes the ~0.3-0.5 GB of importing torch: the `import only` row is that
baseline). Bytes on disk: the files the save wrote, and for Strata also after `compact()`
(closing the store trims redb's growth room when it exceeds a tenth of the bytes on disk, ADR
0028, so the two differ by less than that). Loads are timed twice: as they return, and with
one byte of every 4 KiB page of every tensor read after (a first use; safetensors' `load_file`
maps the file and reads a page when it is first touched). Every load is checked bit-exact against
the input in the child. Prints a markdown table (and JSON with --json). Figures depend on the
machine and its load: this workplace's machines have 2 shared cores.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
MINILM_CANDIDATES = [
    "/work/cache/minilm/all-MiniLM-L6-v2.safetensors",
    os.path.join(SHARED, "minilm", "all-MiniLM-L6-v2.safetensors"),
]
TOOLS = ["strata", "safetensors", "torch.save", "dcp"]


# ---------------------------------------------------------------- child side


def load_dataset(spec: dict) -> list[tuple[int, dict]]:
    import torch
    from safetensors.torch import load_file

    out = []
    for step, path in spec["files"]:
        sd = load_file(path)
        if spec.get("cast") == "bf16":
            sd = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()}
        out.append((step, sd))
    return out


def child(args: argparse.Namespace) -> None:
    import torch

    spec = json.loads(args.child)
    tool, op = spec["tool"], spec["op"]
    if tool == "import":
        print(json.dumps({"maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
        return
    data = load_dataset(spec)
    work = spec["work"]
    times = []

    def save(dst: str) -> None:
        if tool == "strata":
            import strata

            with strata.Store(os.path.join(dst, "run.strata")) as st:
                for step, sd in data:
                    st.save_checkpoint(step, sd)
        elif tool == "safetensors":
            from safetensors.torch import save_file

            for step, sd in data:
                save_file(sd, os.path.join(dst, f"step_{step}.safetensors"))
        elif tool == "dcp":
            import torch.distributed.checkpoint as dcp

            for step, sd in data:
                dcp.save(sd, storage_writer=dcp.FileSystemWriter(os.path.join(dst, f"step_{step}")))
        else:
            for step, sd in data:
                torch.save(sd, os.path.join(dst, f"step_{step}.pt"))

    def load(src: str) -> list[dict]:
        if tool == "strata":
            import strata

            # Read-only, as a process that only loads opens it (strata.torch.load_file does):
            # a writer's handle would add the commit redb makes as a writer's file closes.
            with strata.open_read_only(os.path.join(src, "run.strata")) as st:
                return [st.load_checkpoint(step, framework="pt") for step, _ in data]
        if tool == "safetensors":
            from safetensors.torch import load_file

            return [load_file(os.path.join(src, f"step_{step}.safetensors")) for step, _ in data]
        if tool == "dcp":
            import torch.distributed.checkpoint as dcp

            out = []
            for step, sd in data:
                into = {k: torch.empty_like(v) for k, v in sd.items()}
                dcp.load(into, storage_reader=dcp.FileSystemReader(os.path.join(src, f"step_{step}")))
                out.append(into)
            return out
        return [torch.load(os.path.join(src, f"step_{step}.pt"), weights_only=True)
                for step, _ in data]

    if op == "async":
        # How long save_checkpoint_async blocks the caller, against copying the same tensors
        # (clone, the least a snapshot costs) and against a synchronous save.
        import strata

        blocked, copied, synced = [], [], []
        for i in range(spec["runs"]):
            with strata.Store(os.path.join(work, f"async{i}.strata")) as st:
                for step, sd in data:
                    t0 = time.perf_counter()
                    fut = st.save_checkpoint_async(step, sd)
                    blocked.append(time.perf_counter() - t0)
                    fut.result()
                    t0 = time.perf_counter()
                    copy = {k: v.clone() for k, v in sd.items()}
                    copied.append(time.perf_counter() - t0)
                    del copy
            with strata.Store(os.path.join(work, f"sync{i}.strata")) as st:
                for step, sd in data:
                    t0 = time.perf_counter()
                    st.save_checkpoint(step, sd)
                    synced.append(time.perf_counter() - t0)
        result = {"blocked": statistics.median(blocked), "copy": statistics.median(copied),
                  "sync": statistics.median(synced)}
    elif op == "save":
        # Measure saves only: free the loaded input's files-cache effects by a warm-up save.
        for i in range(spec["runs"]):
            dst = os.path.join(work, f"save{i}")
            os.makedirs(dst)
            t0 = time.perf_counter()
            save(dst)
            times.append(time.perf_counter() - t0)
            if i < spec["runs"] - 1:
                shutil.rmtree(dst)
        disk = sum(os.path.getsize(p) for p in glob.glob(os.path.join(dst, "**"), recursive=True)
                   if os.path.isfile(p))
        compacted = disk
        if tool == "strata":
            import strata

            with strata.Store(os.path.join(dst, "run.strata")) as st:
                st.compact()
            compacted = os.path.getsize(os.path.join(dst, "run.strata"))
        result = {"seconds": statistics.median(times), "disk": disk, "compacted": compacted}
    else:
        src = spec["src"]
        del_data = data
        used = []
        for _ in range(spec["runs"]):
            t0 = time.perf_counter()
            back = load(src)
            times.append(time.perf_counter() - t0)
            touch(back)
            used.append(time.perf_counter() - t0)
            for (step, sd), got in zip(del_data, back):
                for k, v in sd.items():
                    assert torch.equal(v, got[k]), (step, k)
            del back
        result = {"seconds": statistics.median(times), "used_seconds": statistics.median(used)}
    result["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result))


def touch(loaded: list[dict]) -> int:
    """Reads one byte of every 4 KiB page of every tensor, as the first use of the data does
    (a copy to a device, a forward pass): a tool that maps the file lazily (safetensors'
    `load_file`) reads the data here, one that decoded it (Strata, torch.load) does not."""
    import torch

    total = 0
    for sd in loaded:
        for v in sd.values():
            b = v.reshape(-1).view(torch.uint8)
            if b.numel():
                total += int(b[::4096].sum())
    return total


# ---------------------------------------------------------------- parent side


def run_child(spec: dict) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise RuntimeError(f"{spec['tool']} {spec['op']}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def datasets(args: argparse.Namespace) -> list[dict]:
    out = []
    minilm = args.minilm or next((p for p in MINILM_CANDIDATES if os.path.exists(p)), None)
    if minilm and os.path.exists(minilm):
        out.append({"name": "MiniLM f32", "files": [[0, minilm]]})
        out.append({"name": "MiniLM bf16", "files": [[0, minilm]], "cast": "bf16"})
    else:
        print("note: MiniLM not found (../shared/data/fetch-minilm.sh); skipped", file=sys.stderr)
    for series in ("dev_pre", "dev_ft", "dev_pre/bf16", "dev_ft/bf16"):
        files = sorted(glob.glob(os.path.join(args.series, series, "step_*.safetensors")))
        if not files:
            print(f"note: series {series} not found under {args.series}; skipped", file=sys.stderr)
            continue
        steps = [[int(os.path.basename(f)[5:-12]), f] for f in files]
        out.append({"name": f"{series} ({len(files)} ckpts)", "files": steps})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minilm")
    ap.add_argument("--series", default=os.path.join(SHARED, "series"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", help="substring of the data set names to run")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    base = run_child({"tool": "import", "op": "import"})["maxrss"]
    rows = []
    for ds in datasets(args):
        if args.only and args.only not in ds["name"]:
            continue
        raw = None
        for tool in TOOLS:
            with tempfile.TemporaryDirectory() as work:
                spec = dict(ds, tool=tool, runs=args.runs, work=work)
                s = run_child(dict(spec, op="save"))
                src = os.path.join(work, f"save{args.runs - 1}")
                lo = run_child(dict(spec, op="load", src=src))
            rows.append({
                "data": ds["name"], "tool": tool,
                "save_s": s["seconds"], "load_s": lo["seconds"], "used_s": lo["used_seconds"],
                "save_rss": s["maxrss"], "load_rss": lo["maxrss"], "disk": s["disk"],
                "compacted": s["compacted"],
            })
            if tool == "safetensors":
                raw = s["compacted"]
            print(f"  {ds['name']}: {tool} done", file=sys.stderr)
        for r in rows:
            if r["data"] == ds["name"]:
                r["raw_over_disk"] = raw / r["compacted"] if raw else None

    asyncs = []
    for ds in datasets(args):
        if ds["name"].startswith("MiniLM") and (not args.only or args.only in ds["name"]):
            with tempfile.TemporaryDirectory() as work:
                r = run_child(dict(ds, tool="strata", op="async", runs=args.runs, work=work))
            asyncs.append(dict(r, data=ds["name"]))

    mb = 1e6
    print(f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; median of {args.runs} runs; "
          f"peak RSS of a child that only imports torch and strata: {base / mb:.0f} MB.\n")
    print("Save / st and load / st: the tool's seconds over safetensors' on the same data in the "
          "same run (targets for Strata: save within 2x, load within 3x). Load + use: the load, "
          "then one byte of every 4 KiB page of every tensor read, as a first use of the data "
          "does (safetensors maps the file and reads a page when it is first touched).\n")
    print("| data | tool | save s | save / st | load s | load / st | load + use s | load + use / st | "
          "save peak RSS MB | load peak RSS MB | disk MB | disk MB after compact() | "
          "safetensors bytes / compacted |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    st = {r["data"]: r for r in rows if r["tool"] == "safetensors"}
    for r in rows:
        ratio = f"{r['raw_over_disk']:.3f}" if r.get("raw_over_disk") else "-"
        peer = st.get(r["data"])
        save_x = f"{r['save_s'] / peer['save_s']:.1f}x" if peer else "-"
        load_x = f"{r['load_s'] / peer['load_s']:.1f}x" if peer else "-"
        used_x = f"{r['used_s'] / peer['used_s']:.1f}x" if peer else "-"
        print(f"| {r['data']} | {r['tool']} | {r['save_s']:.3f} | {save_x} | {r['load_s']:.3f} | "
              f"{load_x} | {r['used_s']:.3f} | {used_x} | {r['save_rss'] / mb:.0f} | {r['load_rss'] / mb:.0f} | "
              f"{r['disk'] / mb:.2f} | {r['compacted'] / mb:.2f} | {ratio} |")
    if asyncs:
        print("\nHow long `save_checkpoint_async` blocks the training loop (it snapshots the tensors, "
              "then encodes and writes in a thread), against cloning the same tensors and a "
              "synchronous save; target: blocked no longer than the copy.\n")
        print("| data | save_checkpoint_async blocks s | clone of the tensors s | blocked / clone | "
              "save_checkpoint s |")
        print("|---|---|---|---|---|")
        for r in asyncs:
            print(f"| {r['data']} | {r['blocked']:.4f} | {r['copy']:.4f} | "
                  f"{r['blocked'] / r['copy']:.2f} | {r['sync']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"import_rss": base, "rows": rows, "async": asyncs}, f, indent=1)


if __name__ == "__main__":
    main()

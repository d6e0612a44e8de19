#!/usr/bin/env python3
"""Compares Strata with ZipNN, blosc2, zstd, safetensors, icechunk and TileDB on the same real data.

Run through benches/compare/run.sh, which makes the venv and builds strata-bench:

    benches/compare/run.sh [--quick] [--no-readme] [--from-json target/compare/results.json]

- single models: all-MiniLM-L6-v2 (f32 and its bf16 cast): ratio, encode and decode GB/s on one
  thread and on all cores, for Strata (strata-bench codec), ZipNN, blosc2 and zstd (peers.py codec);
- checkpoint series (every series of ../shared/data/series): bytes on disk, write MB/s, time to read
  one tensor and to load one checkpoint at the middle step, peak memory, for Strata (strata-bench)
  and safetensors files, ZipNN, ZipNN XOR-delta, icechunk, TileDB (peers.py);
- deltas on one thread (every series): each step's tensors coded against the step before, codec calls
  only: ratio, encode and decode GB/s, for Strata (strata-bench delta: segment::encode_delta per block)
  and ZipNN's XOR delta (peers.py delta zipnn).

Every tool runs in its own processes; every output is compared with the input and a tool whose
round trip fails is reported as failing. Writes target/compare/results.{json,md} and the section
between <!-- compare:start --> and <!-- compare:end --> in docs/benchmarks.md (not with
--no-readme; benches/readme_tables.py --only compare also writes the README's headline table).
--quick: MiniLM's bf16 cast and the dev_ft/bf16 series only, fewer repetitions.
--from-json of a results.json written before the deltas were measured renders without their table.
"""
import argparse
import datetime
import importlib.metadata
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
STRATA_BENCH = os.path.join(ROOT, "target", "release", "strata-bench")
PEERS = os.path.join(HERE, "peers.py")
SERIES = ["dev_pre", "dev_pre/bf16", "dev_ft", "dev_ft/bf16"]
QUICK_SERIES = ["dev_ft/bf16"]
SERIES_TOOLS = ["strata", "zipnn", "zipnn-delta", "icechunk", "tiledb", "safetensors"]
CODEC_TOOLS = ["zipnn", "blosc2", "zstd"]
PACKAGES = ["zipnn", "blosc2", "zstandard", "safetensors", "numpy", "icechunk", "zarr", "tiledb", "torch"]
TOOL_NAMES = {"strata": "Strata", "zipnn": "ZipNN per checkpoint", "zipnn-delta": "ZipNN XOR-delta",
              "icechunk": "icechunk", "tiledb": "TileDB", "safetensors": "safetensors files"}
START, END = "<!-- compare:start -->", "<!-- compare:end -->"


class ToolFailed(Exception):
    """A tool's process failed: a round trip that differs, or an error."""


def run_json(cmd):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        tail = " ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
        raise ToolFailed(tail[-400:] or f"exit code {p.returncode}")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise ToolFailed(f"no result from {' '.join(cmd[:3])}")
    return json.loads(lines[-1])


def machine():
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "date": datetime.date.today().isoformat()}


def strata_version():
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    # Uncommitted changes to what is measured (the docs this harness writes do not count).
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "Cargo.toml", "Cargo.lock", "codec", "store", "benches/compare")
    return commit + ("+changes" if dirty else "")


# ---------------------------------------------------------------------------------------------
# Data


def minilm():
    out = subprocess.run(["bash", os.path.join(DATA, "fetch-minilm.sh"), "target/data"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    path = out.strip().splitlines()[-1]
    return path if os.path.isabs(path) else os.path.join(ROOT, path)


def f32_to_bf16(data):
    """Little-endian f32 bytes to bf16 bytes, round to nearest even; NaN stays NaN (quiet)."""
    bits = np.frombuffer(data, dtype="<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    out = np.where(nan, (bits >> 16) | 0x40, rounded).astype("<u2")
    return out.tobytes()


def write_bf16_cast(src, dst):
    """The safetensors file `src` with every F32 tensor cast to BF16 (other tensors unchanged)."""
    with open(src, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    base, offset, parts, new = 8 + n, 0, [], {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = info["data_offsets"]
        data = raw[base + a:base + b]
        dtype = info["dtype"]
        if dtype == "F32":
            data, dtype = f32_to_bf16(data), "BF16"
        new[name] = {"dtype": dtype, "shape": info["shape"], "data_offsets": [offset, offset + len(data)]}
        parts.append(data)
        offset += len(data)
    if meta is not None:
        new["__metadata__"] = meta
    head = json.dumps(new, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for p in parts:
            f.write(p)
    os.replace(dst + ".tmp", dst)


def largest_tensor(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return max(items, key=lambda kv: kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0])[0]


def series_files(folder):
    out = []
    for name in os.listdir(folder):
        if name.startswith("step_") and name.endswith(".safetensors"):
            out.append((int(name[5:-12]), os.path.join(folder, name)))
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# Measurements


def codec_round(path, plan, threads):
    """One round on one file: every codec tool once. {tool name: row} (a row may hold "error")."""
    rows = {}
    try:
        r = run_json([STRATA_BENCH, "codec", path, "--threads", threads, "--reps", str(plan["reps"]),
                      "--min-time", str(plan["min_time"])])
        rows["Strata"] = {"tool": "Strata", "config": "strata-bench: store blocks (1 MiB) on a rayon pool",
                          "raw_bytes": r["raw_bytes"], "stored_bytes": r["stored_bytes"], "runs": r["runs"]}
    except ToolFailed as e:
        rows["Strata"] = {"tool": "Strata", "error": str(e)}
    for tool in CODEC_TOOLS:
        try:
            r = run_json([sys.executable, PEERS, "codec", tool, path, "--threads", threads,
                          "--reps", str(plan["reps"]), "--min-time", str(plan["min_time"])])
            for v in r["variants"]:
                row = {"tool": v["name"], "config": v.get("config", "")}
                row.update({k: v[k] for k in ("raw_bytes", "stored_bytes", "runs", "error") if k in v})
                rows[v["name"]] = row
        except ToolFailed as e:
            rows[tool] = {"tool": tool, "error": str(e)}
    return rows


def merge_rounds(rounds):
    """Rows whose timings are the medians of the rounds' medians; a failure in any round fails the row."""
    merged = []
    for name, first in rounds[0].items():
        seen = [r.get(name, {"tool": name, "error": "missing in a round"}) for r in rounds]
        failed = next((r for r in seen if "error" in r), None)
        if failed:
            merged.append({"tool": name, "error": failed["error"]})
            continue
        if len({r["stored_bytes"] for r in seen}) != 1:
            merged.append({"tool": name, "error": "stored bytes differ between rounds"})
            continue
        row = {k: first[k] for k in ("tool", "config", "raw_bytes", "stored_bytes")}
        row["ratio"] = row["raw_bytes"] / row["stored_bytes"]
        row["runs"] = []
        for run in first["runs"]:
            n = run["threads"]
            per = [next(x for x in r["runs"] if x["threads"] == n) for r in seen]
            enc = statistics.median(x["encode_s"] for x in per)
            dec = statistics.median(x["decode_s"] for x in per)
            row["runs"].append({"threads": n, "encode_s": enc, "decode_s": dec,
                                "encode_gbps": row["raw_bytes"] / 1e9 / enc,
                                "decode_gbps": row["raw_bytes"] / 1e9 / dec,
                                "rounds": [{"encode_s": x["encode_s"], "decode_s": x["decode_s"],
                                            "encode_reps": x["encode_reps"], "decode_reps": x["decode_reps"]}
                                           for x in per]})
        merged.append(row)
    return merged


def single_models(models, plan, threads, log):
    """Every codec tool on every model, in rounds: each round runs every tool once, so that the load of a
    shared machine falls on all tools alike; a timing is the median of the rounds' medians."""
    rounds = {label: [] for label, _ in models}
    for i in range(plan["rounds"]):
        for label, path in models:
            log(f"single models, round {i + 1}/{plan['rounds']}: {label}")
            rounds[label].append(codec_round(path, plan, threads))
    return [{"data": label, "file": os.path.relpath(path, ROOT), "rows": merge_rounds(rounds[label])}
            for label, path in models]


DELTA_TOOLS = {"Strata": "strata-bench delta: segment::encode_delta per 1 MiB block against the block at the step "
                          "before, one thread, blocks one after another",
               "ZipNN XOR-delta": "peers.py delta zipnn: ZipNN(delta_compressed_type='byte', threads=1) per tensor"}


def delta_round(folder, plan):
    """One round on one series: Strata's delta encode, then ZipNN's XOR delta, once each. {tool name: row}
    (a row may hold "error"), shaped as codec_round's rows with one run on one thread."""
    reps = ["--reps", str(plan["reps"]), "--min-time", str(plan["min_time"])]
    cmds = {"Strata": [STRATA_BENCH, "delta", folder, *reps],
            "ZipNN XOR-delta": [sys.executable, PEERS, "delta", "zipnn", folder, *reps]}
    rows = {}
    for tool, cmd in cmds.items():
        try:
            r = run_json(cmd)
            rows[tool] = {"tool": tool, "config": r.get("config", DELTA_TOOLS[tool]),
                          **{k: r[k] for k in ("raw_bytes", "stored_bytes", "skipped_bytes", "pairs")},
                          "runs": [{"threads": 1, **{k: r[k] for k in ("encode_s", "decode_s", "encode_reps",
                                                                        "decode_reps")}}]}
        except ToolFailed as e:
            rows[tool] = {"tool": tool, "error": str(e)}
    return rows


def deltas(names, plan, log):
    """Strata's delta encode against ZipNN's XOR delta on every series, in rounds as for single models (each
    round runs both tools once per series); a timing is the median of the rounds' medians."""
    rounds = {name: [] for name in names}
    for i in range(plan["rounds"]):
        for name in names:
            log(f"deltas, round {i + 1}/{plan['rounds']}: {name}")
            rounds[name].append(delta_round(os.path.join(DATA, "series", name), plan))
    out = []
    for name in names:
        rows = merge_rounds(rounds[name])
        for row in rows:
            if "error" not in row:
                first = rounds[name][0][row["tool"]]
                row.update({k: first[k] for k in ("pairs", "skipped_bytes")})
        pairs = next((r["pairs"] for r in rows if "pairs" in r), None)
        out.append({"series": name, "pairs": pairs, "rows": rows})
    return out


def series_commands(tool, folder, store, step, tensor, expect, reps):
    """The command of each operation (write, verify, read, load) for one tool."""
    r = ["--reps", str(reps)]
    if tool == "strata":
        b = [STRATA_BENCH]
        return {"write": [*b, "write", store, folder, *r], "verify": [*b, "verify", store, folder],
                "read": [*b, "read", store, "--step", str(step), "--tensor", tensor, "--expect", expect, *r],
                "load": [*b, "load", store, "--step", str(step), "--expect", expect, *r]}
    b = [sys.executable, PEERS]
    return {"write": [*b, "write", tool, store, folder, *r], "verify": [*b, "verify", tool, store, folder],
            "read": [*b, "read", tool, store, folder, "--step", str(step), "--tensor", tensor, *r],
            "load": [*b, "load", tool, store, folder, "--step", str(step), *r]}


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def merge_ops(results):
    """One operation's results over the rounds: median of the medians, peak memory the largest."""
    out = dict(results[-1])
    for key in ("seconds", "open_seconds", "compact_seconds"):
        values = [r[key] for r in results if r.get(key) is not None]
        if values:
            out[key] = statistics.median(values)
    peaks = [r["peak_bytes"] for r in results if r.get("peak_bytes") is not None]
    out["peak_bytes"] = max(peaks) if peaks else None
    out["rounds"] = [{k: r.get(k) for k in ("seconds", "open_seconds", "peak_bytes")} for r in results]
    return out


def series(name, plan, stores, log):
    """Every tool on one series, in rounds as for single models: writes (each round a fresh store),
    one verify per tool, then reads and loads. The first failure of a tool ends it."""
    folder = os.path.join(DATA, "series", name)
    files = series_files(folder)
    step, expect = files[len(files) // 2]
    tensor = largest_tensor(expect)
    state = {}
    for tool in SERIES_TOOLS:
        store = os.path.join(stores, name.replace("/", "_"), tool + (".strata" if tool == "strata" else ""))
        os.makedirs(os.path.dirname(store), exist_ok=True)
        state[tool] = {"store": store, "row": {"tool": TOOL_NAMES[tool]}, "ops": {},
                       "cmds": series_commands(tool, folder, store, step, tensor, expect, plan["reps"])}

    def do(tool, op):
        st = state[tool]
        if "error" in st["row"]:
            return
        if op == "write":
            remove(st["store"])
        try:
            st["ops"].setdefault(op, []).append(run_json(st["cmds"][op]))
        except ToolFailed as e:
            st["row"]["error"] = f"{op}: {e}"

    for i in range(plan["rounds"]):
        log(f"series {name}, round {i + 1}/{plan['rounds']}: write")
        for tool in SERIES_TOOLS:
            do(tool, "write")
    log(f"series {name}: verify")
    for tool in SERIES_TOOLS:
        do(tool, "verify")
    for i in range(plan["rounds"]):
        log(f"series {name}, round {i + 1}/{plan['rounds']}: read and load")
        for tool in SERIES_TOOLS:
            do(tool, "read")
            do(tool, "load")
    rows = []
    for tool in SERIES_TOOLS:
        st = state[tool]
        row = st["row"]
        if "error" not in row:
            for op, results in st["ops"].items():
                row[op] = merge_ops(results)
            w = row["write"]
            row["config"] = w.get("config", "strata-bench: Store::import_safetensors_bytes per step, then compact")
            row["ratio"] = w["raw_bytes"] / w["file_bytes"]
            row["write_mbps"] = w["raw_bytes"] / 1e6 / w["seconds"]
        rows.append(row)
    return {"series": name, "steps": len(files), "step": step, "tensor": tensor, "rows": rows}


# ---------------------------------------------------------------------------------------------
# Report


def advantage(strata, peer, higher_is_better=True, digits=2):
    """Strata's advantage over the peer, rounded as shown (above 1: Strata ahead), or None."""
    if strata is None or peer is None or strata <= 0 or peer <= 0:
        return None
    return round(strata / peer if higher_is_better else peer / strata, digits)


def x_cell(strata, peer, higher_is_better=True, digits=2):
    """The advantage as a cell; bold and marked when Strata is behind."""
    x = advantage(strata, peer, higher_is_better, digits)
    if x is None:
        return "–"
    return f"{x:.{digits}f}" if x >= 1 else f"**{x:.{digits}f} behind**"


def behind(strata, peer, higher_is_better=True, digits=2):
    """The advantage when Strata is behind at the precision shown, else None."""
    x = advantage(strata, peer, higher_is_better, digits)
    return x if x is not None and x < 1 else None


def run_of(row, threads):
    return next((r for r in row.get("runs", []) if r["threads"] == threads), None)


# Why Strata can be behind, by what it is behind on; only those that occur are printed.
REASONS = {
    "speed-lz4": "blosc2 with LZ4 does no entropy coding: it is faster than any entropy coder and keeps more "
                 "bytes (see its ratio).",
    "speed-zstd": "zstd (alone or inside blosc2) finds almost no matches in float weights and codes the "
                  "literals with a fast Huffman/FSE stage; Strata's order-0 rANS per byte plane (ADR 0004) does "
                  "more work per byte for its better ratio.",
    "speed-zipnn": "ZipNN Huffman-codes its byte groups; Strata's rANS (ADR 0004) codes the exponent and top "
                   "mantissa bits as one symbol for a slightly better ratio. A Huffman stage measured on the "
                   "same blocks decoded no faster here and cost 0.36-0.56 % of the bytes (ADR 0043).",
    "ratio-single": "on a single model there is no previous version to delta against: both tools code the "
                    "same exponent redundancy and differ by tenths of a percent.",
    "ratio-series": "a peer's coding beats Strata's deltas on this series: the delta policy (ADR 0006) or the "
                    "entropy stage (ADR 0004) needs a look.",
    "store-plain": "plain safetensors files need no coding: a write is a buffered copy into the page cache "
                   "(no fsync) and a read a copy out of it, while Strata encodes, commits every checkpoint "
                   "durably (fsync), compacts the file at the end, and decodes a chain of deltas (at most 6 "
                   "segments per block) on reads.",
    "store-zipnn": "ZipNN's files are written without fsync or compaction and, per checkpoint, read back with "
                   "one Huffman decode per tensor; Strata commits every checkpoint durably (fsync), compacts at "
                   "the end, and reads through a chain of rANS-coded deltas, the price of its smaller files. "
                   "ZipNN XOR-delta also walks its chain, from the first step, with a faster decoder.",
    "store-peer": "icechunk and TileDB keep every step whole (nothing to walk on reads) and decode it with "
                  "byte shuffle + zstd, a faster decoder than Strata's rANS; their files are several times "
                  "larger.",
    "ratio-delta": "ZipNN's XOR delta codes this series' step-to-step changes in fewer bytes than Strata's delta "
                   "segments: the entropy stage (ADR 0004) needs a look.",
    "speed-delta": "both tools XOR each tensor with its predecessor; ZipNN then Huffman-codes the XOR's byte "
                   "groups, while Strata rANS-codes it per block (ADR 0004), hashes the base (xxh3, checked again "
                   "on decode) and checksums each segment.",
    "memory": "Strata decodes the chain of versions below the one asked for and keeps decoded blocks in its "
              "block cache (up to 256 MiB by default; redb caches single pages only, ADR 0042); a write holds "
              "its encoders' buffers (about 10 MB on 2 threads) and a malloc arena per thread; a tool that "
              "codes one tensor at a time holds less.",
}


def single_tables(single, cores, rounds):
    lines = []
    for block in single:
        lines += [f"**{block['data']}** (`{block['file']}`): GB/s of raw input, medians over {rounds} rounds "
                  "in which every tool runs once; × = Strata / peer (above 1: Strata ahead).", "",
                  f"| tool | ratio | × | encode GB/s 1 thread | × | decode GB/s 1 thread | × | "
                  f"encode GB/s {cores} threads | × | decode GB/s {cores} threads | × |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        strata = next((r for r in block["rows"] if r["tool"] == "Strata" and "error" not in r), None)
        for row in block["rows"]:
            if "error" in row:
                lines.append(f"| {row['tool']} | fails: {row['error'][:120]} |" + " – |" * 9)
                continue
            cells = [row["tool"], f"{row['ratio']:.4f}",
                     "" if row is strata else x_cell(strata and strata["ratio"], row["ratio"], digits=3)]
            for threads in (1, cores):
                mine, theirs = run_of(row, threads), strata and run_of(strata, threads)
                for k in ("encode_gbps", "decode_gbps"):
                    cells.append(f"{mine[k]:.3f}" if mine else "–")
                    cells.append("" if row is strata else x_cell(theirs and theirs[k], mine and mine[k]))
            if cores == 1:
                cells = cells[:7]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if cores == 1:
        lines = [ln.replace(f" encode GB/s {cores} threads | × | decode GB/s {cores} threads | × |", "")
                 .replace("|---|---|---|---|---|---|---|---|---|---|---|", "|---|---|---|---|---|---|---|")
                 for ln in lines]
    return lines


def ms(seconds):
    return "–" if seconds is None else f"{seconds * 1e3:.2f}"


def series_tables(series_results):
    lines = ["Checkpoint series: one store per tool holding every step (MB = 10^6 bytes); open = what a "
             "reader does once before reading any step (– : nothing to open); read = the largest tensor at "
             "the middle step; load = the whole middle checkpoint; medians over rounds in which every tool runs "
             "once, page cache warm. "
             "× = Strata's advantage (above 1: Strata ahead).", "",
             "| series | tool | MB on disk | raw / disk | × | write MB/s | × | open ms | read ms | × | load ms | × |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    mem = ["Peak memory in MB: growth of the process's peak resident size over its size when the "
           "operation began (inputs already in memory for writes). × = peer / Strata, with a floor of 1 MB.", "",
           "| series | tool | write | × | read | × | load | × |", "|---|---|---|---|---|---|---|---|"]
    for s in series_results:
        strata = next((r for r in s["rows"] if r["tool"] == "Strata" and "error" not in r), None)
        label = f"{s['series']} ({s['steps']} steps)"
        for row in s["rows"]:
            if "error" in row:
                lines.append(f"| {label} | {row['tool']} | fails: {row['error'][:120]} |" + " – |" * 9)
                mem.append(f"| {label} | {row['tool']} | fails |" + " – |" * 5)
                continue
            me = row is strata

            def x(key, op=None, higher=True, digits=2):
                mine = row[op][key] if op else row[key]
                theirs = strata[op][key] if strata and op else strata and strata[key]
                return "" if me or strata is None else x_cell(theirs, mine, higher, digits)

            cells = [label, row["tool"], f"{row['write']['file_bytes'] / 1e6:.2f}", f"{row['ratio']:.3f}",
                     x("ratio", digits=3), f"{row['write_mbps']:.1f}", x("write_mbps"),
                     ms(row["read"].get("open_seconds")),
                     ms(row["read"]["seconds"]), x("seconds", "read", False),
                     ms(row["load"]["seconds"]), x("seconds", "load", False)]
            lines.append("| " + " | ".join(cells) + " |")
            mcells = [label, row["tool"]]
            for op in ("write", "read", "load"):
                pb = row[op].get("peak_bytes")
                mcells.append("–" if pb is None else f"{pb / 1e6:.1f}")
                sp = strata[op].get("peak_bytes") if strata else None
                # Small working sets are noise-dominated: compare with a 1 MB floor.
                mcells.append("" if me or pb is None or sp is None
                              else x_cell(max(sp, 1e6), max(pb, 1e6), False))
            mem.append("| " + " | ".join(mcells) + " |")
    return lines + [""] + mem + [""]


def delta_tables(delta_results, rounds):
    lines = ["**Deltas on one thread** (every step against the one before it, each tensor with a predecessor of "
             "the same name, dtype and size; codec calls only, no store): GB/s of raw input, medians over "
             f"{rounds} rounds; × = Strata / ZipNN XOR-delta (above 1: Strata ahead).", "",
             "| series | tool | ratio | × | encode GB/s | × | decode GB/s | × |",
             "|---|---|---|---|---|---|---|---|"]
    for s in delta_results:
        strata = next((r for r in s["rows"] if r["tool"] == "Strata" and "error" not in r), None)
        label = s["series"] if s.get("pairs") is None else f"{s['series']} ({s['pairs']} pairs)"
        for row in s["rows"]:
            if "error" in row:
                lines.append(f"| {label} | {row['tool']} | fails: {row['error'][:120]} |" + " – |" * 5)
                continue
            me = row is strata
            cells = [label, row["tool"], f"{row['ratio']:.4f}",
                     "" if me else x_cell(strata and strata["ratio"], row["ratio"], digits=3)]
            mine, theirs = run_of(row, 1), strata and run_of(strata, 1)
            for k in ("encode_gbps", "decode_gbps"):
                cells.append(f"{mine[k]:.3f}" if mine else "–")
                cells.append("" if me else x_cell(theirs and theirs[k], mine and mine[k]))
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def behind_notes(single, series_results, cores, delta_results=()):
    groups, reasons = {}, []

    def note(where, what, x, reason, digits=2):
        groups.setdefault(where, []).append(f"{what} {x:.{digits}f}×")
        if reason not in reasons:
            reasons.append(reason)

    for block in single:
        strata = next((r for r in block["rows"] if r["tool"] == "Strata" and "error" not in r), None)
        if not strata:
            continue
        for row in block["rows"]:
            if row is strata or "error" in row:
                continue
            where = f"{row['tool']} on {block['data']}"
            x = behind(strata["ratio"], row["ratio"], digits=3)
            if x:
                note(where, "ratio", x, "ratio-single", 3)
            family = "speed-lz4" if "lz4" in row["tool"] else "speed-zipnn" if "ZipNN" in row["tool"] else "speed-zstd"
            for threads in sorted({1, cores}):
                a, b = run_of(strata, threads), run_of(row, threads)
                for k, word in (("encode_gbps", "encode"), ("decode_gbps", "decode")):
                    x = behind(a and a[k], b and b[k])
                    if x:
                        note(where, f"{word} {threads}T", x, family)
    for s in series_results:
        strata = next((r for r in s["rows"] if r["tool"] == "Strata" and "error" not in r), None)
        if not strata:
            continue
        for row in s["rows"]:
            if row is strata or "error" in row:
                continue
            where = f"{row['tool']} on {s['series']}"
            family = "store-plain" if row["tool"] == "safetensors files" else \
                "store-zipnn" if row["tool"].startswith("ZipNN") else "store-peer"
            checks = [("ratio", strata["ratio"], row["ratio"], True, "ratio-series", 3),
                      ("write", strata["write_mbps"], row["write_mbps"], True, family, 2),
                      ("read", strata["read"]["seconds"], row["read"]["seconds"], False, family, 2),
                      ("load", strata["load"]["seconds"], row["load"]["seconds"], False, family, 2)]
            for op in ("write", "read", "load"):
                sp, pp = strata[op].get("peak_bytes"), row[op].get("peak_bytes")
                if sp is not None and pp is not None:
                    checks.append((f"{op} memory", max(sp, 1e6), max(pp, 1e6), False, "memory", 2))
            for what, a, b, hib, fam, digits in checks:
                x = behind(a, b, hib, digits)
                if x:
                    note(where, what, x, fam, digits)
    for s in delta_results:
        strata = next((r for r in s["rows"] if r["tool"] == "Strata" and "error" not in r), None)
        if not strata:
            continue
        for row in s["rows"]:
            if row is strata or "error" in row:
                continue
            where = f"{row['tool']} on {s['series']}"
            x = behind(strata["ratio"], row["ratio"], digits=3)
            if x:
                note(where, "delta ratio", x, "ratio-delta", 3)
            a, b = run_of(strata, 1), run_of(row, 1)
            for k, word in (("encode_gbps", "delta encode 1T"), ("decode_gbps", "delta decode 1T")):
                x = behind(a and a[k], b and b[k])
                if x:
                    note(where, word, x, "speed-delta")
    if not groups:
        return ["Strata is ahead of every peer on every figure above."]
    return (["Where Strata is behind (Strata's figure over the peer's, nT = n threads):", ""]
            + [f"- {where}: {', '.join(items)}" for where, items in groups.items()]
            + ["", "Why:", ""] + [f"- {REASONS[r]}" for r in reasons] + [""])


def report(res):
    m = res["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in res["versions"].items())
    lines = [f"Measured {m['date']} on {m['cpu']}, {m['cores']} cores, by `{res['command']}` "
             f"({res['runtime_s']:.0f} s; Strata at {res['strata']}; peers from PyPI: {versions}). "
             "The machine is shared: throughput is indicative (the all-cores figures exceed one thread's only "
             "when the other cores are free), ratios and bytes are exact. Every tool's "
             "output was decoded and compared with its input byte for byte; a tool that fails is shown "
             "as failing. `--quick` (MiniLM bf16 and dev_ft/bf16, fewer repetitions) is for use before a change "
             "lands. How each tool is configured and what each figure means: "
             "[benches/compare/README.md](benches/compare/README.md).", ""]
    lines += single_tables(res["single"], m["cores"], res["single_plan"]["rounds"])
    lines += series_tables(res["series"])
    # Results written before the deltas were measured have no "deltas": no table then.
    delta_results = res.get("deltas") or []
    if delta_results:
        lines += delta_tables(delta_results, res["delta_plan"]["rounds"])
    lines += behind_notes(res["single"], res["series"], m["cores"], delta_results)
    return "\n".join(lines) + "\n"


def write_readme(body):
    """The tables into docs/benchmarks.md, between the compare markers (links made relative
    to docs/)."""
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    body = body.replace("](benches/", "](../benches/")
    with open(path) as f:
        text = f.read()
    if START not in text or END not in text:
        sys.exit(f"docs/benchmarks.md lacks the markers {START} / {END}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(head + START + "\n" + body + END + tail)


def main():
    p = argparse.ArgumentParser(description="Strata against other tools on the same data")
    p.add_argument("--quick", action="store_true", help="MiniLM bf16 and dev_ft/bf16 only, fewer repetitions")
    p.add_argument("--no-readme", action="store_true", help="do not write the section of docs/benchmarks.md")
    p.add_argument("--out", default=os.path.join(ROOT, "target", "compare"))
    p.add_argument("--from-json", metavar="RESULTS.json",
                   help="measure nothing: write the tables (and the README section) of an earlier run")
    args = p.parse_args()
    t0 = time.perf_counter()
    if args.from_json:
        with open(args.from_json) as f:
            publish(json.load(f), args)
        return

    def log(msg):
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if not os.access(STRATA_BENCH, os.X_OK):
        sys.exit(f"{STRATA_BENCH} is missing: run benches/compare/run.sh, which builds it")
    # Single models: rounds x (at least `reps` repetitions, more until `min_time` seconds).
    plan = {"rounds": 2, "reps": 2, "min_time": 0.5} if args.quick else {"rounds": 3, "reps": 3, "min_time": 0.5}
    # Series: rounds x (write, read, load, each `reps` repetitions in one process).
    series_plan = {"rounds": 1, "reps": 3} if args.quick else {"rounds": 2, "reps": 3}
    cores = len(os.sched_getaffinity(0))
    threads = "1" if cores == 1 else f"1,{cores}"
    f32 = minilm()
    bf16 = os.path.join(args.out, "data", "all-MiniLM-L6-v2.bf16.safetensors")
    write_bf16_cast(f32, bf16)
    models = [("MiniLM bf16 cast", bf16)] if args.quick else [("MiniLM f32", f32), ("MiniLM bf16 cast", bf16)]
    single = single_models(models, plan, threads, log)
    stores = os.path.join(args.out, "stores")
    shutil.rmtree(stores, ignore_errors=True)
    names = QUICK_SERIES if args.quick else SERIES
    series_results = [series(name, series_plan, stores, log) for name in names]
    # Deltas: as single models, rounds x (at least `reps` repetitions, more until `min_time` seconds).
    delta_plan = dict(plan)
    delta_results = deltas(names, delta_plan, log)
    res = {
        "command": "benches/compare/run.sh" + (" --quick" if args.quick else ""),
        "machine": machine(),
        "strata": strata_version(),
        "versions": {k: importlib.metadata.version(k) for k in PACKAGES},
        "single_plan": plan,
        "series_plan": series_plan,
        "single": single,
        "series": series_results,
        "delta_plan": delta_plan,
        "deltas": delta_results,
    }
    res["runtime_s"] = time.perf_counter() - t0
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    publish(res, args)


def publish(res, args):
    """results.md, the section of docs/benchmarks.md (unless --no-readme) and the tables on stdout."""
    body = report(res)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("# Strata against other tools\n\n" + body)
    if not args.no_readme:
        write_readme(body)
    print(body)
    print(f"wrote {os.path.relpath(args.out, ROOT)}/results.md" + ("" if args.no_readme else " and docs/benchmarks.md"),
          file=sys.stderr)


if __name__ == "__main__":
    main()

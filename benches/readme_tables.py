#!/usr/bin/env python3
"""Measures Strata on the shared real data and writes the figures into README.md.

Usage: python3 benches/readme_tables.py [--check]

Tables, each between markers in README.md, with the date, the machine and the commands:
- `<!-- codec-bench:start -->` ... `<!-- codec-bench:end -->`: codec-bench on MiniLM (f32 and its
  bf16 cast) and one bf16 training checkpoint;
- `<!-- store-series:start -->` ... `<!-- store-series:end -->`: every series in ../shared/data/series
  imported with the `strata` CLI, raw / file bytes from `strata stats --json`, beside ZipNN's
  XOR-delta figure from ../shared/data/README.md;
- `<!-- tier-sim:start -->` ... `<!-- tier-sim:end -->`: the tier simulation through the store
  (`examples/tier-sim.rs`) at 100 000 blocks and 1 000 000 reads;
- `<!-- wasm-figures:start -->` ... `<!-- wasm-figures:end -->`: the .wasm size from wasm/build.sh
  and WASM against native speeds from wasm/bench.mjs (Node).

Nothing in the tables is typed by hand. --check prints the tables without writing README.md;
--only NAME (repeatable) runs only those tables.
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
# ZipNN's XOR-delta ratios on the same series, from ../shared/data/README.md.
ZIPNN_XOR = {"dev_pre": 1.291, "dev_pre/bf16": 1.820, "dev_ft": 1.617, "dev_ft/bf16": 3.949}


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def machine():
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{datetime.date.today().isoformat()} on {model}, {os.cpu_count()} cores"


def codec_table():
    minilm = run(["bash", os.path.join(DATA, "fetch-minilm.sh"), "target/data"]).strip().splitlines()[-1]
    inputs = [
        (minilm, []),
        (minilm, ["--as", "bf16"]),
        (os.path.join(DATA, "series/dev_ft/bf16/step_000430.safetensors"), []),
    ]
    run(["cargo", "build", "--release", "-p", "strata-codec", "--example", "codec-bench"])
    rows, cmds = [], []
    for path, extra in inputs:
        cmd = ["cargo", "run", "-q", "--release", "-p", "strata-codec", "--example", "codec-bench", "--", path, *extra, "--json"]
        cmds.append(" ".join(c if c != path else os.path.relpath(path, ROOT) for c in cmd))
        rows.append(json.loads(run(cmd)))
    lines = [
        f"Measured {machine()}, one thread, median of repeated runs; GB = 10^9 bytes of raw input.",
        "",
        "| data | dtype | raw MB | format | ratio | max rel. error | encode GB/s | decode GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name, raw, l = os.path.basename(r["file"]), r["raw_bytes"] / 1e6, r["lossless"]
        lines.append(f"| {name} | {r['dtype']} | {raw:.1f} | lossless | {l['ratio']:.4f} | 0 | {l['encode_gbps']:.2f} | {l['decode_gbps']:.2f} |")
        for bits in ["8", "7", "5", "3"]:
            t = r["tiers"][bits]
            lines.append(
                f"| {name} | {r['dtype']} | {raw:.1f} | {bits}-bit | {t['ratio']:.3f} | {t['max_rel_err']:.4f} | {t['encode_gbps']:.2f} | {t['decode_gbps']:.2f} |"
            )
    return "\n".join(lines + ["", "Commands:", "", "```"] + cmds + ["```"])


def store_table():
    run(["cargo", "build", "--release", "-p", "strata-cli", "--bin", "strata"])
    strata = os.path.join(ROOT, "target", "release", "strata")
    lines = [
        f"Measured {machine()}; each series imported into a fresh store (default options: 1 MiB blocks, "
        "chain deltas, at most 6 segments per read), one checkpoint per file, compacted.",
        "",
        "| series | steps | raw MB | file MB | Strata raw/file | ZipNN XOR-delta | Strata / ZipNN | import MB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cmds = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, zipnn in ZIPNN_XOR.items():
            folder = os.path.join(DATA, "series", name)
            store = os.path.join(tmp, name.replace("/", "_") + ".strata")
            steps = len([f for f in os.listdir(folder) if f.endswith(".safetensors")])
            t0 = time.perf_counter()
            run([strata, "-q", "import", store, folder])
            secs = time.perf_counter() - t0
            s = json.loads(run([strata, "stats", store, "--json"]))
            ratio = s["ratio"]
            lines.append(
                f"| {name} | {steps} | {s['raw_bytes'] / 1e6:.2f} | {s['file_bytes'] / 1e6:.2f} | {ratio:.3f} | {zipnn:.3f} | {ratio / zipnn:.2f} | {s['raw_bytes'] / 1e6 / secs:.0f} |"
            )
            cmds.append(f"strata import STORE ../shared/data/series/{name} && strata stats STORE --json")
    return "\n".join(lines + ["", "Commands (`target/release/strata`):", "", "```"] + cmds + ["```"])


def tier_sim_table():
    cmd = ["cargo", "run", "-q", "--release", "--example", "tier-sim", "--", "--blocks", "100000", "--accesses", "1000000", "--json"]
    r = json.loads(run(cmd))
    tiers = ["hot8", "warm7", "warm5", "cold3", "absent"]
    err = r["mean_rel_err_by_tier"]
    by = r["bytes_by_tier"]
    lines = [
        f"Measured {machine()}: {r['blocks']} blocks of 4096 real f32 values (dev_ft), {r['accesses']} Zipf(1.2) reads "
        f"10 ms apart, `maintain` every 10 000 reads, warm cap {r['warm_byte_cap'] / 1e6:.1f} MB.",
        "",
        "| warm bytes after maintain (max) | cap violations | tier flips per block | read p50 us | read p95 us | maintain ms (p50 / max) |",
        "|---|---|---|---|---|---|",
        f"| {r['max_warm_bytes_after_maintain']} | {r['cap_violations']} of {r['maintain_passes']} passes | {r['tier_flips_per_block']:.4f} "
        f"| {r['p50_read_us']:.1f} | {r['p95_read_us']:.1f} | {r['maintain_ms_p50']:.0f} / {r['maintain_ms_max']:.0f} |",
        "",
        "| precision of the data read | " + " | ".join(tiers) + " |",
        "|---|" + "---|" * len(tiers),
        "| mean max error / group max | " + " | ".join(f"{err[t]:.4f}" if t in err else "-" for t in tiers) + " |",
        "| bytes on disk at the end | " + " | ".join(str(by.get(t, 0)) for t in tiers) + " |",
        "",
        "Command: `" + " ".join(cmd[:2] + cmd[3:]) + "`",
    ]
    return "\n".join(lines)


def wasm_table():
    size = [l for l in run(["bash", "wasm/build.sh"]).splitlines() if "gzipped" in l][-1]
    bench = run(["node", "wasm/bench.mjs"]).splitlines()
    lines = [f"Measured {machine()}, Node {run(['node', '--version']).strip()}, one thread.", "", f"`{size}`", ""]
    lines += [l for l in bench if l.startswith("|") or l.startswith("MB/s")]
    lines += ["", "Commands: `bash wasm/build.sh`, `node wasm/bench.mjs` (dev_ft bf16 step 430)."]
    return "\n".join(lines)


def replace_section(readme, name, body):
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in readme or end not in readme:
        sys.exit(f"README.md lacks the markers {start} / {end}")
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + body + "\n" + end + tail


def main():
    makers = {
        "codec-bench": codec_table,
        "store-series": store_table,
        "tier-sim": tier_sim_table,
        "wasm-figures": wasm_table,
    }
    only = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--only"]
    tables = {name: make() for name, make in makers.items() if not only or name in only}
    for body in tables.values():
        print(body, end="\n\n")
    if "--check" in sys.argv:
        return
    path = os.path.join(ROOT, "README.md")
    with open(path) as f:
        readme = f.read()
    for name, body in tables.items():
        readme = replace_section(readme, name, body)
    with open(path, "w") as f:
        f.write(readme)


if __name__ == "__main__":
    main()

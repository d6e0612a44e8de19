#!/usr/bin/env python3
"""Runs codec-bench on the shared real weights and writes its table into README.md.

Usage: python3 benches/readme_codec_table.py [--check]

The table sits between the markers `<!-- codec-bench:start -->` and `<!-- codec-bench:end -->`
in README.md, with the date, the machine and the exact commands. Nothing in it is typed by
hand. Needs ../shared/data (MiniLM is fetched by ../shared/data/fetch-minilm.sh into
target/data if missing). --check only runs the bench and prints the table.
"""
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
START, END = "<!-- codec-bench:start -->", "<!-- codec-bench:end -->"


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main():
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
        f"Measured {datetime.date.today().isoformat()} on {cpu_model()}, {os.cpu_count()} cores, one thread, "
        "median of repeated runs; GB = 10^9 bytes of raw input. Produced by `python3 benches/readme_codec_table.py`.",
        "",
        "| data | dtype | raw MB | format | ratio | max rel. error | encode GB/s | decode GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = os.path.basename(r["file"])
        raw = r["raw_bytes"] / 1e6
        l = r["lossless"]
        lines.append(f"| {name} | {r['dtype']} | {raw:.1f} | lossless | {l['ratio']:.4f} | 0 | {l['encode_gbps']:.2f} | {l['decode_gbps']:.2f} |")
        for bits in ["8", "7", "5", "3"]:
            t = r["tiers"][bits]
            lines.append(
                f"| {name} | {r['dtype']} | {raw:.1f} | {bits}-bit | {t['ratio']:.3f} | {t['max_rel_err']:.4f} | {t['encode_gbps']:.2f} | {t['decode_gbps']:.2f} |"
            )
    lines += ["", "Commands:", "", "```"] + cmds + ["```"]
    table = "\n".join(lines)
    if "--check" in sys.argv:
        print(table)
        return
    readme_path = os.path.join(ROOT, "README.md")
    with open(readme_path) as f:
        readme = f.read()
    if START not in readme or END not in readme:
        sys.exit(f"README.md lacks the markers {START} / {END}")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    with open(readme_path, "w") as f:
        f.write(head + START + "\n" + table + "\n" + END + tail)
    print(table)


if __name__ == "__main__":
    main()

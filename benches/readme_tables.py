#!/usr/bin/env python3
"""Measures Strata on the shared real data and writes the figures into docs/benchmarks.md and
README.md.

Usage: python3 benches/readme_tables.py [--check] [--only NAME ...]

Each section is written between its markers, `<!-- NAME:start -->` ... `<!-- NAME:end -->`, in
whichever of README.md and docs/benchmarks.md holds them (the README holds the headline table and
the reliability summaries, docs/benchmarks.md the full tables), with the date, the machine and the
commands. Paths are written relative to the repository (../shared/data/...), never as this
machine's absolute paths; links in docs/ are made relative to docs/.

- `codec-bench`: codec-bench on MiniLM (f32 and its bf16 cast) and one bf16 training checkpoint;
- `store-series`: every series in ../shared/data/series imported with the `strata` CLI, the
  store's ratio (raw / bytes on disk) from `strata stats --json`, beside ZipNN's XOR-delta figure
  from ../shared/data/README.md;
- `compare` (and the README's `headline`): benches/compare/run.sh, Strata against ZipNN, blosc2,
  zstd, safetensors files, icechunk and TileDB (the harness's venv, target/compare-venv, is made
  when missing: the first run downloads torch, ~3 GB); --compare-saved writes both from
  target/compare/results.json without measuring again, --compare-quick runs the harness's --quick;
- `delta-policy`: the delta policy's cost and the newest checkpoint's read under the store's
  forward chains, thrifty forward chains and two reverse layouts (`examples/delta-policy.rs`;
  ADR 0035) on the shared series, and on the training-state series when
  target/trainstate/series holds them (the `trainstate` section generates them);
- `tier-sim`: the tier simulation through the store (`examples/tier-sim.rs`) at 100 000 blocks
  and 1 000 000 reads;
- `wasm-figures`: the .wasm size from wasm/build.sh and WASM against native speeds from
  wasm/bench.mjs (Node);
- `python`: save and load through the Python package against safetensors.torch and torch.save
  (python/benches/bench.py, in the venv of python/ci.sh);
- `scale`: GB-scale checkpoints and long runs of small ones (`examples/scale-bench.rs`), with
  their targets beside the figures. Sizes with --scale-gb G (repeatable, default 2); the first
  size runs everything, larger ones only the big-checkpoint part (import, export, load,
  cp + sync, ZipNN unless it would take over ~10 minutes at that size). ZipNN comes from the
  comparison harness's venv (target/compare-venv, made here as benches/compare/run.sh makes it
  when missing). Each size's JSON is kept in target/scale-bench/scale-G.json; --scale-saved
  writes the table from those files without measuring again.
- `faults` (and the README's `faults-summary`): injected I/O faults and power losses under every
  store operation that writes (store/tests/faults.rs, the full matrix: every position), and the
  real full disk of store/tests/disk_full.rs (a tmpfs; needs root).
- `kills` (and `kills-summary`): a writer killed with SIGKILL during import, save, retain,
  maintain and compaction (`examples/kill-bench.rs`), the store checked after each kill.
  --kills N (default 1000) kills, seed 14.
- `flips` (and `flips-summary`): single-byte flips in the low-entropy pages of a compacted store
  (`examples/flip-bench.rs`), each judged caught, harmless, silent, panic or hang. --flips N
  (default 1000), seed 26.
- `remote`: push, a second push, pull, a cold-cache get and export through `RemoteStore`, on
  moto's S3 server (127.0.0.1, the venv of tests/s3/venv.sh) and a file:// folder
  (`examples/remote-bench.rs`), with their targets beside the figures.
- `age`, `age-quality`: aging old checkpoints (`examples/age-bench.rs`) and the model quality
  of aged checkpoints (benches/age_quality.py).
- `trainstate`: full training-state series (weights and AdamW state; pretrain and finetune, f32
  and bf16 with f32 masters) stored lossless beside ZipNN, aged with `strata age` under the
  default policy and the training-state preset, and training resumed from 6 aged checkpoints of
  each against their exact selves (benches/trainstate/bench.py; the first run generates the
  series, about an hour), in the venv of benches/trainstate/requirements.txt
  (~/.cache/strata/train-venv or $STRATA_TRAIN_VENV, made when missing); its plot goes to
  benches/figures/trainstate.png. --trainstate-args 'ARGS' passes arguments to bench.py (e.g.
  `--resume-limit 0`, `--series pretrain-f32`; an `--age-args=...` there adds a policy);
  --trainstate-saved writes the table from target/trainstate/results.json without measuring again.

Nothing in the tables is typed by hand. --check prints the tables without writing the files;
--only NAME (repeatable) runs only those sections (a summary is written with its section).
"""
import datetime
import json
import os
import re
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
        "chain deltas, at most 6 segments per read), one checkpoint per file, then compacted (`strata compact`, "
        "not in the import time).",
        "",
        "| series | steps | raw MB | MB on disk | Strata ratio (raw / disk) | ZipNN XOR-delta | Strata / ZipNN | import MB/s |",
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
            run([strata, "-q", "compact", store])
            s = json.loads(run([strata, "stats", store, "--json"]))
            ratio = s["ratio"]
            lines.append(
                f"| {name} | {steps} | {s['raw_bytes'] / 1e6:.2f} | {s['disk_bytes'] / 1e6:.2f} | {ratio:.3f} | {zipnn:.3f} | {ratio / zipnn:.2f} | {s['raw_bytes'] / 1e6 / secs:.0f} |"
            )
            cmds.append(f"strata import STORE ../shared/data/series/{name} && strata compact STORE && strata stats STORE --json")
    return "\n".join(lines + ["", "Commands (`target/release/strata`):", "", "```"] + cmds + ["```"])


def delta_policy_table():
    run(["cargo", "build", "--release", "--example", "delta-policy"])
    exe = os.path.join(ROOT, "target", "release", "examples", "delta-policy")
    series = [os.path.join(DATA, "series", s) for s in ("dev_ft", "dev_ft/bf16", "dev_pre", "dev_pre/bf16")]
    generated = os.path.join(ROOT, "target", "trainstate", "series")
    if os.path.isdir(generated):
        series += [os.path.join(generated, s) for s in sorted(os.listdir(generated))]
    args = [a for folder in series for a in ("--series", folder)]
    table = run([exe] + args).strip()
    return "\n".join([
        f"Measured {machine()} by `examples/delta-policy.rs` (one thread; every segment encoded and decoded "
        "by the codec and compared with its input). Segment bytes only (no metadata). Read ms: the decode time "
        "of every segment of a version's chain, summed over its blocks. Write encode ms: what a write encodes "
        "or re-encodes (every segment of the layout after it that the layout before it did not have), mean "
        "and worst over the series' writes. forward: the store's chains today (ADR 0006); forward, thrifty: a delta that saves under 3 % of its "
        "lineage's keyframe written as a keyframe; reverse: the newest "
        "a keyframe, older versions deltas against the next, every 6th kept a keyframe; reverse, anchored: "
        "older keyframes replaced by anchors (deltas against the newest), re-encoded at every write (ADR 0035).",
        "",
        table,
        "",
        "Command:",
        "",
        "```",
        "cargo run --release --example delta-policy -- " + " ".join(args),
        "```",
    ])


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


def requirements_venv(venv, req):
    """The Python of a venv made from the requirements file `req`, (re)made when missing or made
    from another version of it (the first time downloads torch, ~3 GB)."""
    py = os.path.join(venv, "bin", "python")
    have = os.path.join(venv, "requirements.txt")
    if not (os.path.exists(py) and os.path.exists(have) and open(have).read() == open(req).read()):
        print(f"making {venv} from {req} (the first time downloads torch, ~3 GB)", file=sys.stderr)
        subprocess.run(["rm", "-rf", venv], check=True)
        subprocess.run([os.environ.get("PYTHON", "python3.11"), "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "-r", req], check=True)
        subprocess.run(["cp", req, have], check=True)
    return py


def compare_venv():
    """The comparison harness's venv (ZipNN), made as benches/compare/run.sh makes it."""
    return requirements_venv(os.path.join(ROOT, "target", "compare-venv"),
                             os.path.join(ROOT, "benches", "compare", "requirements.txt"))


# ZipNN is skipped at a size where compress + decompress would take longer than this, judged
# from the first size's figures.
ZIPNN_MAX_SECONDS = 600
GIB = float(1 << 30)


def scale_table():
    sizes = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--scale-gb"] or ["2"]
    sizes = sorted(sizes, key=float)
    if "--scale-saved" not in sys.argv:
        compare_venv()
        run(["cargo", "build", "--release", "-p", "strata-cli", "--bin", "strata"])
    runs = []
    zipnn_secs_per_gb = None
    for i, gb in enumerate(sizes):
        cmd = ["cargo", "run", "-q", "--release", "--example", "scale-bench", "--", "--gb", gb, "--json"]
        if i > 0:
            cmd += ["--no-chain", "--no-many"]
            if zipnn_secs_per_gb is None or zipnn_secs_per_gb * float(gb) > ZIPNN_MAX_SECONDS:
                cmd += ["--no-zipnn"]
        saved = os.path.join(ROOT, "target", "scale-bench", f"scale-{gb}.json")
        if "--scale-saved" in sys.argv:
            with open(saved) as f:
                doc = json.load(f)
        else:
            t0 = time.perf_counter()
            doc = json.loads(run(cmd))
            print(f"scale-bench --gb {gb}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            os.makedirs(os.path.dirname(saved), exist_ok=True)
            with open(saved, "w") as f:
                json.dump(doc, f, indent=1)
        z = [o for o in doc["ops"] if o["op"].startswith("ZipNN") and o["model"] == "main"]
        if i == 0 and z:
            zipnn_secs_per_gb = sum(o["process_seconds"] or o["seconds"] for o in z) / float(gb)
        runs.append((gb, cmd, doc))
    return scale_markdown(runs)


def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def scale_markdown(runs):
    first = runs[0][2]
    m = first["machine"]
    commit = (m.get("git_commit") or "?") + ("+changes" if m.get("git_dirty") else "")

    def op(doc, name, model="main"):
        return next((o for o in doc["ops"] if o["op"] == name and o["model"] == model), None)

    def starts(doc, prefix):
        return next((o for o in doc["ops"] if o["op"].startswith(prefix)), None)

    lines = [
        f"Measured {machine()} (Strata at {commit}) by `examples/scale-bench.rs`. GB = 10^9 bytes of tensor "
        "data; each operation is a separate process (the release `strata` binary; load is `Store::read_checkpoint` "
        "in a child process; python load is the Python package's `load_checkpoint` and ZipNN a python process, "
        "their time taken inside it, without python's start and imports), timed by wall clock (exports, loads, gets and histories: the run of median time of 3); peak RSS is "
        "the process's `ru_maxrss` from `wait4`, read by a small "
        "process that starts it (a child's `ru_maxrss` counts the memory of the process it was forked from). The page cache is "
        "warm (the files were just generated and fsynced) and the machine is shared: times are indicative. "
        "Every export, Python load and ZipNN's decompressed file were compared with the generated checkpoint "
        "tensor by tensor, bit for bit.",
        "",
    ]
    for gb, _, doc in runs:
        mm = doc["models"]["main"]
        lines.append(
            f"- **{gb} GB**: {mm['tensors']} bf16 tensors ({mm['weights_4096x4096']} of 4096 x 4096, std 0.02; "
            f"norms near 1, biases near 0), {mm['raw_bytes'] / 1e9:.2f} GB, and {mm['steps'] - 1} fine-tuned "
            f"successor(s) (every value moved by {doc['config']['drift']:g} x std x N(0,1), rounded to bf16)."
        )
    chain = first["models"].get("chain")
    deep = first["models"].get("deep")
    if deep:
        where = (f"a separate {chain['raw_bytes'] / 1e9:.2f} GB model of {chain['steps']} steps" if chain
                 else "the main model")
        lines.append(
            f"- **deep chain**: {where}; the default store (max_chain 6) reaches depth {deep['depth']} "
            f"at step {deep['step']} (depth by step: {', '.join(f'{k}: {v}' for k, v in deep['depths'].items())})."
        )
    lines += [
        "",
        "| checkpoint | operation | seconds | GB/s | peak RSS MiB | / (cp + sync) |",
        "|---|---|---|---|---|---|",
    ]
    names = ["cp + sync", "import keyframes", "import deltas", "export keyframes", "export depth 2",
             "load keyframes", "python load keyframes", "ZipNN compress", "ZipNN decompress"]
    for gb, _, doc in runs:
        cp = op(doc, "cp + sync")
        for name in names:
            o = op(doc, name)
            if o is None:
                continue
            rss = fmt(o["peak_rss_bytes"] and o["peak_rss_bytes"] / (1 << 20), ".0f")
            vs = f"{o['seconds'] / cp['seconds']:.2f}" if cp and name != "cp + sync" else ""
            lines.append(f"| {gb} GB | {name} | {o['seconds']:.2f} | {o['gbps']:.3f} | {rss} | {vs} |")
    if deep:
        lines += ["", "| deep chain | operation | depth | seconds | inside the command, s | GB/s | peak RSS MiB |",
                  "|---|---|---|---|---|---|---|"]
        for o in first["ops"]:
            if o["model"] != ("chain" if chain else "main"):
                continue
            if not (o["op"].startswith(("export depth", "load depth", "python load depth", "python load newest",
                                        "get ", "history"))):
                continue
            lines.append(
                f"| {'chain' if chain else 'main'} | {o['op']} | {o['depth']} | {o['seconds']:.3f} | "
                f"{fmt(o['inner_seconds'], '.3f')} | {o['gbps']:.3f} | {o['peak_rss_bytes'] / (1 << 20):.0f} |"
            )
        imports = [o for o in first["ops"] if o["op"].startswith("import") and o["model"] == "chain"]
        if imports:
            lines.append("")
            lines.append("Imports of the chain model's steps, seconds: " +
                         ", ".join(f"{o['step']}: {o['seconds']:.2f}" for o in imports) + ".")

    lines += ["", "Targets:", "", "| target | figure | met |", "|---|---|---|"]

    def row(what, figure, met):
        lines.append(f"| {what} | {figure} | {'yes' if met else '**no**' if met is not None else '–'} |")

    by_gb = {float(gb): doc for gb, _, doc in runs}
    for name in ["import keyframes", "import deltas", "export keyframes"]:
        for gb, _, doc in runs:
            o = op(doc, name)
            if o:
                r = o["peak_rss_bytes"] / GIB
                row(f"peak RSS of {name}, {gb} GB <= 1.5 GiB", f"{r:.3f} GiB", r <= 1.5)
        if 8.0 in by_gb and 2.0 in by_gb:
            a, b = op(by_gb[8.0], name), op(by_gb[2.0], name)
            if a and b:
                g = a["peak_rss_bytes"] / b["peak_rss_bytes"]
                row(f"peak RSS of {name}, 8 GB within 10% of 2 GB", f"{g:.3f} x", g <= 1.10)
    if 8.0 not in by_gb:
        row("peak RSS at 8 GB (<= 1.5 GiB, within 10% of 2 GB)", "not run here (`--scale-gb 8`)", None)
    for gb, _, doc in runs:
        i, c = op(doc, "import keyframes"), op(doc, "cp + sync")
        if i and c:
            row(f"import wall time <= cp + sync of the same file, {gb} GB",
                f"{i['seconds']:.2f} s vs {c['seconds']:.2f} s ({i['seconds'] / c['seconds']:.2f} x)",
                i["seconds"] <= c["seconds"])
        for name in ["export keyframes", "load keyframes", "python load keyframes"]:
            o = op(doc, name)
            if o:
                what = name.removesuffix(" keyframes")
                row(f"{what} >= 1.5 GB/s, keyframes, {gb} GB", f"{o['gbps']:.3f} GB/s", o["gbps"] >= 1.5)
    for prefix in ["export depth", "load depth", "python load depth"]:
        o = max((o for o in first["ops"] if o["op"].startswith(prefix)), key=lambda o: o["depth"], default=None)
        if o and o["depth"] >= 6:
            row(f"{prefix.removesuffix(' depth')} >= 1 GB/s at the deepest chain (depth {o['depth']})",
                f"{o['gbps']:.3f} GB/s", o["gbps"] >= 1.0)
    n = starts(first, "python load newest")
    if n:
        row(f"python load >= 1.5 GB/s, the newest checkpoint of the chain model (depth {n['depth']})",
            f"{n['gbps']:.3f} GB/s", n["gbps"] >= 1.5)
    g = starts(first, "get 32 MiB tensor,")
    if g:
        row(f"get of a 32 MiB tensor at depth {g['depth']} <= 40 ms",
            f"{g['seconds'] * 1e3:.0f} ms (command), {fmt(g['inner_seconds'] and g['inner_seconds'] * 1e3, '.0f')} ms (read)",
            g["seconds"] <= 0.040)
    h = starts(first, "history")
    if h:
        n = max(h["raw_bytes"] // 2, 1)
        row(f"history of one element <= 1 ms per version ({n} versions)",
            f"{h['seconds'] * 1e3 / n:.2f} ms (command), {fmt(h['inner_seconds'] and h['inner_seconds'] * 1e3 / n, '.2f')} ms (read)",
            h["seconds"] * 1e3 / n <= 1.0)
    small = first.get("small_cost")
    if small:
        w, c = small["as_written"], small["compacted"]
        row(f"metadata bytes per version <= 40 ({small['checkpoints']} checkpoints x {small['tensors']} tensors "
            f"of {small['values']} f32)", f"{w['metadata_bytes_per_version']:.1f} B", w["metadata_bytes_per_version"] <= 40)
        row("file <= 1.1 x (segments + metadata), as written", f"{w['file_over_stored']:.3f} x", w["file_over_stored"] <= 1.1)
        row("the same after `compact`", f"{c['file_over_stored']:.3f} x", c["file_over_stored"] <= 1.1)
        if "disk_over_stored" in w:
            row("bytes on disk <= 1.1 x (segments + metadata), as written", f"{w['disk_over_stored']:.3f} x",
                w["disk_over_stored"] <= 1.1)

    many = first.get("many") or []
    if many:
        lines += ["", f"Many checkpoints: {many[0]['tensors']} tensors of 256 f32 values per checkpoint, written with "
                  "`Store::save_checkpoint`; open and get_at in-process (median of 5, a fresh handle each), log and "
                  "retain as `strata` commands (retain on a copy of the store, stopped after a time limit).", "",
                  "| checkpoints | file MB | `Store::open` ms | `strata log` ms | `get_at` ms | `strata retain --keep-last 3` s | retain peak RSS MiB |",
                  "|---|---|---|---|---|---|---|"]
        for p in many:
            rs = f"{p['retain_seconds']:.2f}"
            if p.get("retain_timed_out"):
                rs = f"> {p['retain_seconds']:.0f} (stopped)"
            lines.append(
                f"| {p['checkpoints']} | {p['file_bytes'] / 1e6:.2f} | {p['open_seconds'] * 1e3:.2f} | "
                f"{p['log_seconds'] * 1e3:.0f} | {p['get_at_seconds'] * 1e3:.3f} | {rs} | {p['retain_peak_rss_bytes'] / (1 << 20):.0f} |"
            )
    if small:
        w, c = small["as_written"], small["compacted"]
        lines += ["", f"Small-tensor cost ({small['checkpoints']} checkpoints x {small['tensors']} tensors x "
                  f"{small['values']} f32, {w['raw_bytes'] / 1e6:.1f} MB raw, `Store::stats()`):", "",
                  "| | file bytes | on disk | segment bytes | metadata bytes | versions | metadata B / version | file / (segments + metadata) | on disk / (segments + metadata) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for label, x in [("as written", w), ("after compact", c)]:
            disk = x.get("disk_bytes", "–")
            disk_ratio = f"{x['disk_over_stored']:.3f}" if "disk_over_stored" in x else "–"
            lines.append(f"| {label} | {x['file_bytes']} | {disk} | {x['segment_bytes']} | {x['metadata_bytes']} | "
                         f"{x['versions']} | {x['metadata_bytes_per_version']:.1f} | {x['file_over_stored']:.3f} | "
                         f"{disk_ratio} |")
    notes = [n for _, _, doc in runs for n in doc.get("notes", [])]
    if notes:
        lines += [""] + [f"Note: {n}." for n in dict.fromkeys(notes)]
    lines += ["", "Commands:", "", "```"]
    lines += [" ".join(c[:2] + c[3:]) for _, c, _ in runs]
    lines += ["```"]
    return "\n".join(lines)


def faults_table():
    """The full fault matrix and the real disk-full test, from the tests' own output."""
    cmd = ["cargo", "test", "-q", "--release", "-p", "strata-store", "--test", "faults", "--",
           "--ignored", "--nocapture", "at_every_position"]
    t0 = time.perf_counter()
    out = run(cmd)
    secs = time.perf_counter() - t0
    rows = [json.loads(l.split(":", 1)[1]) for l in out.splitlines() if l.startswith("faults-json:")]
    lines = [
        f"Measured {machine()}: `{' '.join(cmd)}` (the matrix {sum(r['seconds'] for r in rows):.0f} s, "
        f"{secs:.0f} s with the build). Backend calls are",
        "those of one fault-free run on the test store; each position gets one fault (reads EIO;",
        "writes EIO, a short write with ENOSPC, or a disk that stays full; `set_len` ENOSPC; `sync_data`",
        "EIO), then a clean close or a power loss; each sync also gets three power losses (no, all, or a",
        "seeded subset of the unsynced writes kept). \"recovery opens\" are opens of a crashed file with a",
        "fault and a power loss inside redb's repair; \"close faults\" hit the clean close after the",
        "operation succeeded. Every run reopens the store, compares it with the state before and after",
        "the operation, verifies it and writes once more.",
        "",
        "| operation | calls: read / write / set_len / sync | runs | returned error / ok | reopened: before / after / unchanged | recovery opens | close faults | failures |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["calls"]
        lines.append(
            f"| {r['operation']} | {c['read']} / {c['write']} / {c['set_len']} / {c['sync']} | {r['tried'] + r['power_losses']} "
            f"| {r['errors']} / {r['successes']} | {r['before']} / {r['after']} / {r['same']} | {r['recovery_opens']} | {r['close_runs']} | {r['failures']} |"
        )
    df_cmd = ["cargo", "test", "-q", "--release", "-p", "strata-store", "--test", "disk_full", "--", "--nocapture", "--test-threads=1"]
    out = subprocess.run(df_cmd, cwd=ROOT, capture_output=True, text=True)
    # With -q the harness's progress dots may stand before a line.
    said = [
        l[l.index("disk_full"):] for l in (out.stdout + out.stderr).splitlines()
        if "disk_full" in l and any(w in l for w in ("failed with", "succeeded", "skipped"))
    ]
    lines += ["", f"Real full disk (`{' '.join(df_cmd)}`, exit {out.returncode}):", "", "```"] + said + ["```"]
    runs = sum(r["tried"] + r["power_losses"] for r in rows)
    failures = sum(r["failures"] for r in rows)
    verdict = ("every reopened store held the state before or after the operation and verified"
               if failures == 0 else f"**{failures} runs failed**")
    summary = (
        f"Measured {machine()}: {runs:,} runs of {len(rows)} writing operations, each with one injected "
        f"fault or power loss, and {sum(r['recovery_opens'] for r in rows):,} crashed-file recoveries "
        f"faulted in turn: {verdict} ([table](docs/benchmarks.md#injected-faults-and-power-losses))."
    )
    return {"faults": "\n".join(lines), "faults-summary": summary}


def python_table():
    """python/benches/bench.py in the venv python/ci.sh makes (Strata's Python API against
    safetensors.torch and torch.save on MiniLM and the dev series)."""
    venv = os.environ.get("STRATA_PY_VENV", os.path.expanduser("~/.cache/strata/py-venv"))
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        run(["bash", "python/ci.sh", "--collect-only", "-q"])
    # MiniLM where the comparison section keeps it (bench.py's own defaults are other
    # machines' caches; without it, its rows would be left out with a note on stderr).
    minilm = run(["bash", os.path.join(DATA, "fetch-minilm.sh"), "target/data"]).strip().splitlines()[-1]
    cmd = [py, "python/benches/bench.py", "--runs", "3", "--minilm", minilm]
    out = run(cmd).strip()
    shown = " ".join(["python"] + cmd[1:-2] + ["--minilm", os.path.relpath(minilm, ROOT)])
    # bench.py opens with its own "Measured DATE on N cores, load average ...; ..." line: one
    # line says both.
    first, _, rest = out.partition("\n")
    detail = re.sub(r"^Measured \S+ on \d+ cores, ", "", first)
    return f"Measured {machine()} by `{shown}` (the venv of `python/ci.sh`), {detail}\n" + rest


def kills_table():
    kills = "1000"
    for i, a in enumerate(sys.argv[:-1]):
        if a == "--kills":
            kills = sys.argv[i + 1]
    cmd = ["cargo", "run", "-q", "--release", "--example", "kill-bench", "--", "--kills", kills, "--seed", "14", "--json"]
    # Not run(): kill-bench exits 1 when a check fails, and the table shows the failures.
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"kill-bench failed ({p.returncode}): {p.stderr}")
    r = json.loads(p.stdout)
    lines = [
        f"Measured {machine()}: {r['kills']} SIGKILLs of a writer process in {r['wall_s']:.0f} s "
        f"(seed {r['seed']}); after each kill the store was opened, verified and compared with what the writer "
        "had reported committed (every checkpoint bit for bit against its source file, nothing partial, retained "
        "steps gone, tags, and the tiered `kv.*` versions bit for bit through `get_exact`).",
        "",
        "| operation | kills | inside the operation | rounds passed | checks passed | mean operation ms |",
        "|---|---|---|---|---|---|",
    ]
    for o in r["ops"]:
        lines.append(
            f"| {o['op']} | {o['kills']} | {o['inside_op']} | {o['rounds_ok']} | {o['checks']} | {o['mean_op_ms']:.1f} |"
        )
    failures = r["failures"]
    lines += [
        "",
        f"Failures: {len(failures)}." if failures else "Failures: none.",
    ]
    for f in failures[:10]:
        lines.append(f"- round {f['round']} ({f['op']}): {f['error']}")
    lines += ["", "Command: `" + " ".join(cmd[:2] + cmd[3:]) + "`"]
    passed = sum(o["rounds_ok"] for o in r["ops"])
    checks = sum(o["checks"] for o in r["ops"])
    after = "every one" if passed == r["kills"] and not failures else f"{passed} of them (**not all**)"
    summary = (
        f"Measured {machine()}: {r['kills']} SIGKILLs of a writer during "
        + ", ".join(o["op"] for o in r["ops"])
        + f": after {after} the store opened, verified and held exactly what had been "
        f"committed ({checks:,} checks) ([table](docs/benchmarks.md#killed-writers))."
    )
    return {"kills": "\n".join(lines), "kills-summary": summary}


def remote_table():
    cmd = ["cargo", "run", "-q", "--release", "--example", "remote-bench", "--", "--json"]
    # Not run(): remote-bench exits 1 when a target is missed, and the table shows which.
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"remote-bench failed ({p.returncode}): {p.stderr}")
    r = json.loads(p.stdout)
    rs, st, t = r["remotes"], r["store"], r["tensor"]

    def b(x):
        return f"{x:,}"

    def met(ok):
        return "met" if ok else "**not met**"

    def every(test):
        return all(test(x) for x in rs)

    def row(label, cell, target=""):
        return f"| {label} | " + " | ".join(cell(x) for x in rs) + f" | {target} |"

    def io(x, op, key, secs=True):
        c = x[op]["counts"]
        out = f"{b(c[key])}, {c['requests']}"
        return out + (f", {x[op]['seconds']:.2f} s" if secs else "")

    seg, file = st["segment_bytes"], st["file_bytes"]
    chain = t["chain_version_bytes"]
    series = os.path.relpath(r["series"], ROOT)
    lines = [
        f"Measured {machine()}: `{series}` ({r['checkpoints']} checkpoints, {r['raw_bytes'] / 1e6:.1f} MB raw) imported "
        f"and compacted into a store of {b(file)} file bytes holding {b(seg)} bytes of {st['segments']} unique segments; "
        "then each remote in turn: moto's S3 server on 127.0.0.1 and a `file://` folder. Bytes are object bodies; "
        "requests are every get, put, list and delete (`Remote::counts`). "
        f"{r['wall_seconds']:.0f} s in all; peak RSS of the process {r['peak_rss_bytes'] / 1e6:.0f} MB.",
        "",
        "| measure | " + " | ".join(x["remote"] for x in rs) + " | target |",
        "|---|" + "---|" * len(rs) + "---|",
        row("push: checkpoints, seconds", lambda x: f"{x['push']['checkpoints']}, {x['push']['seconds']:.2f} s"),
        row(f"push: segment bytes sent (the store's segments: {b(seg)})",
            lambda x: b(x["push"]["segment_bytes_sent"]),
            "only the stored bytes: " + met(every(lambda x: x["push"]["segment_bytes_sent"] == seg))),
        row(f"push: all bytes sent, segments and manifests (the store's file: {b(file)})",
            lambda x: f"{b(x['push']['counts']['bytes_out'])} ({x['push']['counts']['bytes_out'] / file:.3f} of the file)",
            "at most the file: " + met(every(lambda x: x["push"]["counts"]["bytes_out"] <= file))),
        row("push: requests", lambda x: str(x["push"]["counts"]["requests"])),
        row("second push: segments sent, requests, seconds",
            lambda x: f"{x['push_again']['segments_sent']}, {x['push_again']['counts']['requests']}, "
                      f"{x['push_again']['seconds']:.2f} s",
            "no segment: " + met(every(lambda x: x["targets"]["second_push_no_segment"]))),
        row("pull into a new store: bytes received, requests, seconds", lambda x: io(x, "pull", "bytes_in"),
            "only the stored bytes: " + met(every(lambda x: x["pull"]["segment_bytes_received"] == seg))),
        row("pulled store: every checkpoint bit-exact; verify",
            lambda x: ("equal" if x["pull"]["equal"] else "DIFFERS") + f"; {x['pull']['verify_issues']} issues",
            met(every(lambda x: x["targets"]["pull_equal_and_verified"]))),
        row("`RemoteStore` open (manifests): bytes, requests", lambda x: io(x, "open", "bytes_in", secs=False)),
        row(f"cold get of `{t['name']}` at step {t['step']}: bytes, requests, ms",
            lambda x: f"{io(x, 'get_cold', 'bytes_in', secs=False)}, {x['get_cold']['seconds'] * 1e3:.0f} ms",
            f"at most its chain's {b(chain)} bytes: " + met(every(lambda x: x["targets"]["cold_get_within_chain"]))),
        row("the same get, warm: requests", lambda x: str(x["get_warm"]["counts"]["requests"]),
            "none: " + met(every(lambda x: x["targets"]["warm_get_no_request"]))),
        row(f"cold export of step {t['step']} to safetensors: bytes, requests, seconds",
            lambda x: io(x, "export", "bytes_in"),
            f"the checkpoint's chains: {b(rs[0]['export']['checkpoint_chain_bytes'])} bytes; file bit-exact: "
            + met(every(lambda x: x["targets"]["export_exact"]))),
        "",
        f"The chain under `{t['name']}` ({b(t['raw_bytes'])} raw bytes, {t['blocks']} block(s)) at step {t['step']}: "
        f"versions {', '.join(str(s) for s in t['chain_versions'])} (depth {t['chain_depth']}), {b(chain)} segment bytes "
        f"in those versions, {b(t['chain_block_bytes'])} in the blocks a decode reads; every version up to step "
        f"{t['step']} holds {b(t['upper_bound_bytes'])}. The bytes of a pull and of an open include the manifests.",
        "",
        "Command: `" + " ".join(cmd[:2] + cmd[3:]) + "`",
    ]
    return "\n".join(lines)


AGE_BUDGETS = "1e-3,3e-3,1e-2,3e-2"
GEN_SERIES = {
    # name: gen_series.py arguments (issue 15: 20 checkpoints, fine-tuning as the shared dev_ft)
    "gpt": ["pretrain", "--layers", "2", "--dim", "192", "--init",
            "{shared}/series/dev_pre/step_000350.safetensors", "--start", "350", "--lr", "2e-5",
            "--steps", "190", "--every", "10"],
    "minilm": ["finetune", "--minilm", "{minilm}", "--steps", "190", "--every", "10"],
}


def age_series():
    """The series age-bench runs on: the shared dev_ft bf16 and the generated 20-checkpoint ones
    (made into target/age-series with the Python package's venv when absent)."""
    shared = os.path.join(ROOT, "..", "shared", "data")
    if not os.path.isdir(shared):
        return [os.path.join(ROOT, "testdata", "series", "dev_ft", "bf16")]
    out = [os.path.join(shared, "series", "dev_ft", "bf16")]
    py = os.path.expanduser(os.environ.get("STRATA_PY_VENV", "~/.cache/strata/py-venv")) + "/bin/python"
    for name, args in GEN_SERIES.items():
        folder = os.path.join(ROOT, "target", "age-series", name)
        if not os.path.isdir(os.path.join(folder, "bf16")):
            minilm = ""
            if name == "minilm":
                minilm = run(["bash", os.path.join(shared, "fetch-minilm.sh"),
                              os.path.join(ROOT, "target", "minilm")]).strip().splitlines()[-1]
            cmd = [py, os.path.join(shared, "gen_series.py"), args[0], folder]
            cmd += [a.format(shared=shared, minilm=minilm) for a in args[1:]]
            print(f"generating {folder} (minutes)", file=sys.stderr)
            run(cmd)
        out.append(os.path.join(folder, "bf16"))
    return out


def age_table():
    cmd = ["cargo", "run", "-q", "--release", "--example", "age-bench", "--", "--json",
           "--budgets", AGE_BUDGETS]
    for s in age_series():
        cmd += ["--series", s]
    doc = json.loads(run(cmd))
    lines = [
        f"Measured {machine()} by `examples/age-bench.rs`; last 2 checkpoints exact, 1-D tensors exact. "
        "Ratios are raw bytes over bytes kept; the aged part counts the aged checkpoints' versions "
        "(records and segments) only; errors are relative Frobenius errors of whole tensors read back.",
        "",
        "| series | checkpoints | budget | whole series | aged part | exact part, bytes | worst / median tensor error | age | oldest read |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in doc["series"]:
        name = os.path.relpath(s["series"], ROOT).replace("../shared/data/series/", "shared ").replace(
            "target/age-series/", "generated ")
        l = s["lossless"]
        lines.append(
            f"| {name} | {s['checkpoints']} | lossless | {l['ratio_file']:.2f}x | {l['aged_ratio']:.2f}x "
            f"| {l['exact_bytes']:,} | exact | | |"
        )
        for r in s["runs"]:
            lines.append(
                f"| | | {r['budget']:.0e} | {r['ratio_file']:.2f}x | {r['aged_ratio']:.1f}x "
                f"| {r['exact_bytes']:,} | {r['tensor_rel_error_max']:.2e} / {r['tensor_rel_error_median']:.2e} "
                f"| {r['age_s']:.2f} s | {r['read_oldest_ms']:.0f} ms |"
            )
    syn = doc.get("synthetic")
    if syn:
        lines += [
            "",
            f"Aging {syn['checkpoints']} generated checkpoints of {syn['checkpoint_bytes'] / 1e6:.0f} MB (bf16) "
            f"at a budget of {syn['budget']:g}: {syn['age_s']:.2f} s (target {syn['target_s']:.0f} s), stored "
            f"ratio {syn['ratio_before']:.2f}x -> {syn['ratio_after']:.2f}x. Peak RSS of the bench "
            f"{doc['peak_rss_bytes'] / 2**20:.0f} MiB.",
        ]
    return "\n".join(lines)


def age_quality_table():
    """benches/age_quality.py on the generated GPT and MiniLM series (minutes): model quality
    against ratio, one Markdown table each, and their plots in benches/figures/."""
    series = [s for s in age_series() if "age-series" in s]
    if not series:
        return "The generated series need ../shared/data (gen_series.py): not measured here."
    py = os.path.expanduser(os.environ.get("STRATA_PY_VENV", "~/.cache/strata/py-venv")) + "/bin/python"
    out = os.path.join(ROOT, "target", "age-quality")
    figures = os.path.join(ROOT, "benches", "figures")
    os.makedirs(out, exist_ok=True)
    os.makedirs(figures, exist_ok=True)
    # Norm budgets at the default update budget (0.5), then the update budget swept at 1e-2,
    # and the norm budget alone ("none"), which lets old checkpoints turn into newer ones.
    budgets = {
        "gpt": "1e-3,1e-2:0.25,1e-2,1e-2:0.75,1e-2:0.9,1e-2:none,3e-2:none",
        "minilm": "3e-4,1e-3,1e-2:0.25,1e-2,1e-2:0.75,3e-4:none,1e-3:none",
    }
    parts = []
    for folder in series:
        kind = os.path.basename(os.path.dirname(folder))
        base = os.path.join(out, kind)
        run([py, os.path.join(ROOT, "benches", "age_quality.py"), "--series", folder, "--kind", kind,
             "--budgets", budgets[kind], "--out", base + ".json", "--svg", base + ".svg",
             "--markdown", base + ".md"])
        svg = os.path.join(figures, f"age-{kind}.svg")
        with open(base + ".svg") as src, open(svg, "w") as dst:
            dst.write(src.read())
        with open(base + ".md") as f:
            parts.append(f.read().strip())
        parts.append(f"![{kind}: ratio against quality](benches/figures/age-{kind}.svg)")
    return "\n\n".join(parts)


def trainstate_venv():
    """The training-state bench's venv, from benches/trainstate/requirements.txt."""
    venv = os.path.expanduser(os.environ.get("STRATA_TRAIN_VENV", "~/.cache/strata/train-venv"))
    return requirements_venv(venv, os.path.join(ROOT, "benches", "trainstate", "requirements.txt"))


def trainstate_table():
    """benches/trainstate/bench.py (issue 27): its Markdown tables, and its plot copied to
    benches/figures/trainstate.png."""
    import shlex

    py = trainstate_venv()
    out = os.path.join(ROOT, "target", "trainstate", "results")
    cmd = [py, os.path.join(ROOT, "benches", "trainstate", "bench.py"), "--out", out]
    if "--trainstate-saved" in sys.argv:
        cmd += ["--from-json", out + ".json"]
    else:
        # All four series, 6 aged checkpoints of each resumed (bench.py's default; every one, as
        # issue 27's targets ask, is --trainstate-args '--resume-limit 0': about 15 000 training
        # steps for the two policies, hours on 2 cores shared with builds).
        cmd += ["--series", "pretrain-f32,finetune-f32,pretrain-bf16,finetune-bf16"]
        # The default policy and the training-state preset (ADR 0027), each series aged under both.
        cmd += ["--age-args=--keep-exact-last 2 --budget 1e-3", "--age-args=--keep-exact-last 2 --training-state"]
        cmd += [x for i, a in enumerate(sys.argv[:-1]) if a == "--trainstate-args" for x in shlex.split(sys.argv[i + 1])]
        run(["cargo", "build", "--release", "-p", "strata-cli", "--bin", "strata"])
    t0 = time.perf_counter()
    run(cmd)
    print(f"trainstate bench: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    figures = os.path.join(ROOT, "benches", "figures")
    os.makedirs(figures, exist_ok=True)
    subprocess.run(["cp", out + ".png", os.path.join(figures, "trainstate.png")], check=True)
    with open(out + ".md") as f:
        body = f.read().strip()
    return body.replace("](results.png)", "](benches/figures/trainstate.png)")


def compare_tables():
    """benches/compare/run.sh (Strata against the peers on the same data): its tables for
    docs/benchmarks.md, and the README's headline table from the same results."""
    out = os.path.join(ROOT, "target", "compare")
    cmd = ["bash", "benches/compare/run.sh", "--no-readme"]
    if "--compare-saved" in sys.argv:
        cmd += ["--from-json", os.path.join(out, "results.json")]
    elif "--compare-quick" in sys.argv:
        cmd += ["--quick"]
    t0 = time.perf_counter()
    run(cmd)
    print(f"compare: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    with open(os.path.join(out, "results.md")) as f:
        body = f.read()
    # results.md opens with its own title; the page has its heading.
    if body.startswith("# "):
        body = body.split("\n", 1)[1]
    return {"compare": body.strip(), "headline": headline_table(res)}


# The headline's tools, in order, as the harness names them.
HEADLINE_TOOLS = ["Strata", "ZipNN XOR-delta", "ZipNN per checkpoint", "icechunk", "TileDB", "safetensors files"]


def headline_table(res):
    """One table: each tool's bytes on disk (raw / disk) and its load of the middle checkpoint,
    on every series the comparison ran."""
    m = res["machine"]
    series = res["series"]
    head = ["tool"] + [f"{s['series']} ({s['steps']} checkpoints)" for s in series]
    lines = [
        f"Real training checkpoints (`../shared/data/series`: a small GPT pre-trained and fine-tuned, f32 "
        f"and bf16), one store per tool holding every step. Each cell: raw bytes / bytes on disk (higher is "
        f"better) · milliseconds to load the middle checkpoint (lower is better). Measured {m['date']} on "
        f"{m['cpu']}, {m['cores']} cores, by `{res['command']}` (Strata at {res['strata']}; "
        + ", ".join(f"{k} {v}" for k, v in res["versions"].items() if k in ("zipnn", "icechunk", "tiledb", "safetensors"))
        + "); every round trip checked byte for byte.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for tool in HEADLINE_TOOLS:
        cells = []
        for s in series:
            row = next((r for r in s["rows"] if r["tool"] == tool), None)
            if row is None:
                cells.append("–")
            elif "error" in row:
                cells.append("fails")
            else:
                cell = f"{row['ratio']:.2f}x · {row['load']['seconds'] * 1e3:.1f} ms"
                cells.append(f"**{cell}**" if tool == "Strata" else cell)
        if any(c != "–" for c in cells):
            lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def flips_table():
    """examples/flip-bench.rs: single-byte flips in a compacted store's low-entropy pages,
    each judged as a reader finds it."""
    flips = "1000"
    for i, a in enumerate(sys.argv[:-1]):
        if a == "--flips":
            flips = sys.argv[i + 1]
    cmd = ["cargo", "run", "-q", "--release", "--example", "flip-bench", "--", "--flips", flips, "--json"]
    # Not run(): flip-bench exits 1 when a flip was silent, panicked or hung, and the table shows it.
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"flip-bench failed ({p.returncode}): {p.stderr}")
    r = json.loads(p.stdout)
    shown = " ".join(cmd[:2] + cmd[3:])
    bad = r["silent"] + r["panics"] + r["hangs"]
    full = [
        f"Measured {machine()}: {r['flips']} flips (seed {r['seed']}) in {r['wall_s']:.0f} s, each in one of the "
        f"{r['low_entropy_pages']} low-entropy pages of a {r['store_bytes']:,}-byte store ({r['pages']} pages of "
        "4 KiB) holding the committed bf16 series `testdata/series/dev_ft/bf16`.",
        "",
        "| flips | caught | of which by the database engine | harmless | silent | panic | hang |",
        "|---|---|---|---|---|---|---|",
        f"| {r['flips']} | {r['caught']} | {r['caught_by_engine']} | {r['harmless']} | {r['silent']} | "
        f"{r['panics']} | {r['hangs']} |",
    ]
    if r["examples"]:
        full += ["", "Silent or panicking flips (first ten):", ""] + [f"- {e}" for e in r["examples"]]
    full += ["", f"Command: `{shown}`"]
    summary = (
        f"Measured {machine()}: {r['flips']} single-byte flips in a store's low-entropy pages: "
        f"{r['caught']} caught ({r['caught_by_engine']} by the database engine), {r['harmless']} harmless, "
        f"{r['silent']} silent, {r['panics']} panics, {r['hangs']} hangs "
        f"([table](docs/benchmarks.md#flipped-bytes)){'' if bad == 0 else ': **not met**'}."
    )
    return {"flips": "\n".join(full), "flips-summary": summary}


# Where sections are written: a section goes to the file that holds its markers.
PAGES = ["README.md", os.path.join("docs", "benchmarks.md")]


def relative_paths(body):
    """This machine's absolute paths made relative to the repository: the work tree itself,
    the shared folder beside it, the home folder and temporary folders."""
    shared = os.path.normpath(os.path.join(ROOT, "..", "shared"))
    body = body.replace(ROOT + "/", "").replace(shared, "../shared")
    body = re.sub(r"/tmp/\.tmp[A-Za-z0-9_]+", "$TMPDIR", body)
    return body.replace(os.path.expanduser("~") + "/", "~/")


def links_from(page, body):
    """Relative Markdown links (written from the repository's root) made relative to `page`."""
    up = os.path.relpath(ROOT, os.path.dirname(os.path.join(ROOT, page)))
    if up == ".":
        return body
    return re.sub(r"\]\((?!https?:|mailto:|#|/|\.\./)([^)\s]+)\)", lambda m: f"]({up}/{m.group(1)})", body)


def replace_section(text, name, body):
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + body + "\n" + end + tail


def write_sections(sections):
    """Each section into the page that holds its markers."""
    pages = {}
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            pages[page] = f.read()
    for name, body in sections.items():
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        holders = [p for p, text in pages.items() if start in text and end in text]
        if len(holders) != 1:
            sys.exit(f"the markers {start} / {end} must be in exactly one of {', '.join(PAGES)} "
                     f"(found in {len(holders)})")
        page = holders[0]
        pages[page] = replace_section(pages[page], name, links_from(page, relative_paths(body)))
    for page, text in pages.items():
        with open(os.path.join(ROOT, page), "w") as f:
            f.write(text)


def main():
    makers = {
        "codec-bench": codec_table,
        "store-series": store_table,
        "compare": compare_tables,
        "delta-policy": delta_policy_table,
        "tier-sim": tier_sim_table,
        "wasm-figures": wasm_table,
        "scale": scale_table,
        "faults": faults_table,
        "python": python_table,
        "kills": kills_table,
        "flips": flips_table,
        "remote": remote_table,
        "age": age_table,
        "age-quality": age_quality_table,
        "trainstate": trainstate_table,
    }
    if "-h" in sys.argv or "--help" in sys.argv:
        # Without this, an unknown flag is ignored and every section runs (over an hour).
        print(__doc__.strip())
        print(f"\nsections: {', '.join(makers)}")
        return
    only = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--only"]
    unknown = [n for n in only if n not in makers]
    if unknown:
        sys.exit(f"no section {', '.join(unknown)}; sections: {', '.join(makers)}")
    sections = {}
    for name, make in makers.items():
        if only and name not in only:
            continue
        made = make()
        # A maker gives its section's body, or several sections (a full table and a summary).
        sections.update(made if isinstance(made, dict) else {name: made})
    for body in sections.values():
        print(relative_paths(body), end="\n\n")
    if "--check" in sys.argv:
        return
    write_sections(sections)


if __name__ == "__main__":
    main()

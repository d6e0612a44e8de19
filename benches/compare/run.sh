#!/usr/bin/env bash
# Strata against ZipNN, blosc2, zstd, safetensors, icechunk and TileDB on the same real data.
#
#   benches/compare/run.sh [--quick] [--no-readme]
#
# Makes its own venv (target/compare-venv, from requirements.txt, rebuilt when that file changes),
# builds strata-bench in release mode, then runs harness.py, which writes target/compare/results.{json,md}
# and the section between <!-- compare:start --> and <!-- compare:end --> in docs/benchmarks.md.
# Needs python3.11 (or PYTHON=...), a Rust toolchain, ../shared/data, and PyPI for the first run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/benches/compare
VENV=$ROOT/target/compare-venv
PY=${PYTHON:-python3.11}

if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$HERE/requirements.txt" "$VENV/requirements.txt"; then
    echo "run.sh: making $VENV from requirements.txt (the first time downloads torch, ~3 GB)" >&2
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -r "$HERE/requirements.txt"
    cp "$HERE/requirements.txt" "$VENV/requirements.txt"
fi

echo "run.sh: building strata-bench (release)" >&2
(cd "$HERE/strata-bench" && CARGO_TARGET_DIR="$ROOT/target" cargo build --release -q)

exec "$VENV/bin/python" "$HERE/harness.py" "$@"

#!/usr/bin/env bash
# Builds the strata Python package and runs its tests (python/tests) in a venv.
#
#   bash python/ci.sh            # from the repository root or anywhere
#
# Needs Rust and Python >= 3.10 (3.11 on CI). The venv is kept outside the work tree, in
# $STRATA_PY_VENV (default ~/.cache/strata/py-venv), and reinstalled only when
# python/requirements-ci.txt changes: PyPI's torch brings ~5 GB of CUDA wheels and pip's HTTP
# cache stays empty on this workplace's registry mirror, so a cold install takes ~10 min and a
# kept venv ~0 s. The package itself is rebuilt every run (maturin, release, into the venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
VENV="${STRATA_PY_VENV:-$HOME/.cache/strata/py-venv}"
REQ="$ROOT/python/requirements-ci.txt"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

# Debian's own python3 ships venv (and the headers PyO3 links against) separately.
if ! "$PY" -m venv --help >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv python3-dev >/dev/null
fi

stamp="$VENV/.strata-requirements"
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQ" "$stamp"; then
    echo "python/ci.sh: installing the test requirements into $VENV"
    start=$(date +%s)
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -r "$REQ"
    cp "$REQ" "$stamp"
    echo "python/ci.sh: requirements installed in $(( $(date +%s) - start )) s"
fi

echo "python/ci.sh: building the package (maturin, release)"
start=$(date +%s)
# `pip install ./python` works too; maturin develop skips building an sdist and a wheel copy.
VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" \
    "$VENV/bin/maturin" develop --release -q -m "$ROOT/python/Cargo.toml"
echo "python/ci.sh: built in $(( $(date +%s) - start )) s"

cd "$ROOT/python"
# -rs prints the reason of every skipped test (a missing optional package).
"$VENV/bin/python" -m pytest tests -q -rs -p no:cacheprovider "$@"

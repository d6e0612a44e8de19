#!/usr/bin/env bash
# Makes the venv holding moto's S3 server for the remote tests and prints the path of its
# `moto_server`. The venv is kept in $STRATA_MOTO_VENV (default ~/.cache/strata/moto-venv)
# and remade only when tests/s3/requirements.txt changes (about a minute from PyPI).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
VENV="${STRATA_MOTO_VENV:-$HOME/.cache/strata/moto-venv}"
REQ="$ROOT/tests/s3/requirements.txt"
stamp="$VENV/.strata-requirements"
if [ ! -x "$VENV/bin/moto_server" ] || ! cmp -s "$REQ" "$stamp"; then
    if ! "$PY" -m venv --help >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq python3-venv >&2
    fi
    rm -rf "$VENV"
    "$PY" -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install -q --upgrade pip >&2
    "$VENV/bin/python" -m pip install -q -r "$REQ" >&2
    cp "$REQ" "$stamp"
fi
echo "$VENV/bin/moto_server"

#!/usr/bin/env bash
# Makes the venv holding moto's S3 server for the remote tests and prints the path of its
# `moto_server`. The venv is kept in $STRATA_MOTO_VENV (default ~/.cache/strata/moto-venv)
# and remade only when tests/s3/requirements.txt changes (about a minute from PyPI).
#
# Safe to run from many processes at once (test binaries and the tests inside them start it in
# parallel): an exclusive lock (flock) on "$VENV.lock" serialises the ones that find it missing
# or stale, and each checks again once it holds the lock, so it is made once, and no caller
# deletes a venv another one has just made.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
VENV="${STRATA_MOTO_VENV:-$HOME/.cache/strata/moto-venv}"
REQ="$ROOT/tests/s3/requirements.txt"
stamp="$VENV/.strata-requirements"
ready() { [ -x "$VENV/bin/moto_server" ] && cmp -s "$REQ" "$stamp"; }
if ! ready; then
    mkdir -p "$(dirname "$VENV")"
    exec 9>"$VENV.lock"
    flock 9
    # Another caller may have made it while this one waited for the lock.
    if ! ready; then
        if ! "$PY" -m venv --help >/dev/null 2>&1; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq >&2
            apt-get install -y -qq python3-venv >&2
        fi
        # Removed and made again whole under the lock; the stamp, written last, is what
        # ready() waits for, so a caller never uses a venv that is still being made.
        rm -rf "$VENV"
        "$PY" -m venv "$VENV" >&2
        "$VENV/bin/python" -m pip install -q --upgrade pip >&2
        "$VENV/bin/python" -m pip install -q -r "$REQ" >&2
        cp "$REQ" "$stamp"
    fi
    flock -u 9
fi
echo "$VENV/bin/moto_server"

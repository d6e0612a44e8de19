#!/usr/bin/env bash
# What a user of the wheel gets (issue 29 item 8): builds the release wheel of the strata
# package with maturin, installs it into a fresh venv where no Rust toolchain can be found and
# pip may only install binaries (so nothing is compiled), then saves and reads a checkpoint
# through it. Prints the wheel's size and each phase's time.
#
#   bash python/wheel-check.sh        # after python/ci.sh, which made the venv with maturin
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_VENV="${STRATA_PY_VENV:-$HOME/.cache/strata/py-venv}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

start=$(date +%s)
"$BUILD_VENV/bin/maturin" build --release -m "$ROOT/python/Cargo.toml" -o "$WORK/dist"
wheel=("$WORK"/dist/strata-*.whl)
echo "wheel-check: built $(basename "${wheel[0]}") ($(du -k "${wheel[0]}" | cut -f1) KiB) in $(( $(date +%s) - start )) s"

# A PATH without cargo, rustc or rustup (~/.cargo/bin, rustup's toolchains).
no_rust_path=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -e cargo -e rustup | paste -sd: -)
start=$(date +%s)
python3 -m venv "$WORK/venv"
(
    cd "$WORK"
    export PATH="$no_rust_path" CARGO=/nonexistent RUSTC=/nonexistent VENV="$WORK/venv"
    if command -v cargo >/dev/null || command -v rustc >/dev/null; then
        echo "wheel-check: a Rust toolchain is still on PATH" >&2
        exit 1
    fi
    "$WORK/venv/bin/python" -m pip install -q --only-binary :all: "${wheel[0]}"
    "$WORK/venv/bin/python" - <<'EOF'
import os
import tempfile

import numpy as np
import strata

# the installed wheel, not the source tree
assert os.path.realpath(strata.__file__).startswith(os.path.realpath(os.environ["VENV"]))
path = os.path.join(tempfile.mkdtemp(), "wheel.strata")
w = np.arange(12, dtype=np.float32).reshape(3, 4)
with strata.Store(path) as st:
    st.save_checkpoint(1, {"w": w}, metadata={"ok": True})
with strata.open_read_only(path) as st:
    np.testing.assert_array_equal(st.get("w", 1), w)
    assert st.metadata(1) == {"ok": True} and st.verify()["ok"]
print(f"wheel-check: strata {strata.__version__} from {os.path.dirname(strata.__file__)} saves and loads")
EOF
)
echo "wheel-check: installed without Rust and checked in $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# CI of strata-wasm, for .ci/run: installs what a fresh Debian machine lacks (Chromium,
# Node and npm, the Node packages of package-lock.json; build.sh adds clang, the wasm32
# target and wasm-bindgen-cli with its test runner), builds the package, then runs the
# wasm-bindgen tests under Node, the Node API and determinism tests, and the end-to-end test
# in headless Chromium (and clippy on the wasm32 build, which the workspace's native clippy
# does not see). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== wasm: %s ===\n' "$*"; }

step "install: chromium, node, npm packages"
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
(cd wasm && npm ci --no-audit --no-fund --loglevel=error)

step "build (wasm/build.sh)"
bash wasm/build.sh

step "clippy on the wasm32 build (the bindings and tests/node.rs)"
cargo clippy -q -p strata-wasm --target wasm32-unknown-unknown --lib --test node -- -D warnings

step "wasm-bindgen tests under Node"
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test -p strata-wasm --target wasm32-unknown-unknown --test node

step "native reference (native-ref) for the comparisons"
cargo build -q --release -p strata-wasm --example native-ref

step "Node: API and determinism against native on real weights"
node --test wasm/test/api.test.mjs wasm/test/determinism.test.mjs

step "browser: the demo page in headless Chromium"
node --test wasm/test/e2e.test.mjs

step "done"

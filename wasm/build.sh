#!/usr/bin/env bash
# Builds strata-wasm for the web and for Node: wasm/pkg/web, wasm/pkg/node, and a copy of
# pkg/web in wasm/www/pkg for the demo page. Installs what it needs first: clang (zstd's C
# code), the wasm32 target and wasm-bindgen-cli at the version in Cargo.lock. Prints the
# raw and gzipped size of the .wasm.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang >/dev/null 2>&1; then
  echo "build.sh: installing clang" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq clang >/dev/null
fi
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown

# wasm-bindgen-cli must match the wasm-bindgen crate exactly.
wb_version=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
if [ -z "$wb_version" ]; then
  echo "build.sh: no wasm-bindgen in Cargo.lock" >&2
  exit 1
fi
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $wb_version"; then
  echo "build.sh: installing wasm-bindgen-cli $wb_version" >&2
  # --locked first; its lock file can name a crate version the registry has since yanked
  # (0.2.130's names webpki-roots 1.0.11), and then a fresh resolution is the only way.
  cargo install --locked wasm-bindgen-cli --version "$wb_version" ||
    cargo install wasm-bindgen-cli --version "$wb_version"
fi

# Release build for wasm32: 128-bit SIMD (every current browser and Node >= 16.4 has it;
# it more than doubles lossless decode), one codegen unit and LTO, no debug info (the
# workspace's release profile keeps line tables for native profiling).
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
CARGO_PROFILE_RELEASE_LTO=true \
CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
CARGO_PROFILE_RELEASE_DEBUG=false \
  cargo build -q -p strata-wasm --lib --release --target wasm32-unknown-unknown

wasm=target/wasm32-unknown-unknown/release/strata_wasm.wasm
rm -rf wasm/pkg wasm/www/pkg
wasm-bindgen --target web --out-dir wasm/pkg/web "$wasm"
wasm-bindgen --target nodejs --out-dir wasm/pkg/node "$wasm"

# No wasm-opt: binaryen's -O3 (npm package binaryen) made the module smaller but lossless
# decode in Node much slower (ADR 0010); the size target is met without it.

# The Node build is CommonJS; wasm/package.json says "module" for the tests and tools.
printf '{ "type": "commonjs" }\n' > wasm/pkg/node/package.json
cp -r wasm/pkg/web wasm/www/pkg

out=wasm/pkg/web/strata_wasm_bg.wasm
raw=$(stat -c %s "$out")
gz=$(gzip -9 -c "$out" | wc -c)
printf 'strata_wasm_bg.wasm: %d bytes raw, %d bytes gzipped (gzip -9)\n' "$raw" "$gz"
if [ "$gz" -ge $((400 * 1024)) ]; then
  echo "build.sh: gzipped size over 400 KiB" >&2
  exit 1
fi

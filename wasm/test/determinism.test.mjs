// Determinism: segments encoded in WebAssembly are byte for byte the segments the native
// build writes, on real weights. `native-ref encode` writes the native segments of every
// tensor of a dev_ft checkpoint (keyframe, XOR delta against the previous checkpoint, and
// the 8/7/5/3-bit tiers); this test encodes the same tensors through the JavaScript API
// (typed arrays, as a page would) and compares. Needs wasm/build.sh first and the series
// in ../shared/data next to the repository.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseSafetensors } from '../www/safetensors.js';

const w = createRequire(import.meta.url)('../pkg/node/strata_wasm.js');
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SERIES = join(root, '../shared/data/series/dev_ft');
const CASES = [
  ['bf16', join(SERIES, 'bf16/step_000360.safetensors'), join(SERIES, 'bf16/step_000350.safetensors')],
  ['f32', join(SERIES, 'step_000360.safetensors'), join(SERIES, 'step_000350.safetensors')],
];

function load(path) {
  const buf = readFileSync(path);
  return parseSafetensors(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength)).tensors;
}

/** The tensor's bytes as the typed array the API takes for its dtype. */
function encodeKey(t, base) {
  const b = new Uint8Array(t.bytes); // a copy: aligned for the typed-array views
  const bb = base && new Uint8Array(base.bytes);
  switch (t.dtype) {
    case 'BF16': return w.encodeBf16(new Uint16Array(b.buffer), bb && new Uint16Array(bb.buffer));
    case 'F16': return w.encodeF16(new Uint16Array(b.buffer), bb && new Uint16Array(bb.buffer));
    case 'F32': return w.encodeF32(new Float32Array(b.buffer), bb && new Float32Array(bb.buffer));
    default: return w.encodeBytes(t.dtype, b, bb);
  }
}

function widen(t) {
  const b = new Uint8Array(t.bytes);
  switch (t.dtype) {
    case 'BF16': return w.bf16ToF32(new Uint16Array(b.buffer));
    case 'F16': return w.f16ToF32(new Uint16Array(b.buffer));
    case 'F32': return new Float32Array(b.buffer);
    default: return Float32Array.from(new Float64Array(b.buffer));
  }
}

for (const [label, file, basePath] of CASES) {
  test(`WASM segments equal native ones: dev_ft ${label} step 360 (delta against 350)`, () => {
    assert.ok(existsSync(file), `real data missing: ${file} (shared/data next to the repository)`);
    const out = join(root, 'target/wasm-determinism', label);
    execFileSync('cargo', ['run', '-q', '--release', '-p', 'strata-wasm', '--example', 'native-ref', '--', 'encode', file, basePath, '--out', out],
      { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
    const manifest = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8'));
    const tensors = load(file);
    const bases = new Map(load(basePath).map((t) => [t.name, t]));
    assert.deepEqual(tensors.map((t) => t.name), manifest.tensors.map((t) => t.name));
    let compared = 0;
    let bytes = 0;
    tensors.forEach((t, i) => {
      const files = manifest.tensors[i].files;
      const native = (f) => new Uint8Array(readFileSync(join(out, f)));
      const check = (kind, wasmBytes) => {
        const f = `${i}.${kind}`;
        assert.ok(files.includes(f), `${t.name}: native wrote no ${f}`);
        const n = native(f);
        assert.equal(wasmBytes.length, n.length, `${t.name} ${kind}: length`);
        assert.ok(Buffer.from(wasmBytes).equals(Buffer.from(n)), `${t.name} ${kind}: bytes differ`);
        compared += 1;
        bytes += n.length;
      };
      check('key', encodeKey(t));
      const base = bases.get(t.name);
      check('delta', encodeKey(t, base));
      const values = widen(t);
      for (const bits of [8, 7, 5, 3]) check(`q${bits}`, w.quantize(values, bits, t.dtype));
      // And the WASM decoders give the tensor back.
      assert.deepEqual(w.decodeBytes(native(`${i}.key`)), new Uint8Array(t.bytes));
      assert.deepEqual(w.decodeBytes(native(`${i}.delta`), new Uint8Array(base.bytes)), new Uint8Array(t.bytes));
    });
    assert.equal(compared, tensors.length * 6);
    console.log(`${label}: ${compared} segments (${bytes} bytes) identical in WASM and native`);
  });
}

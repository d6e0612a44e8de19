// Times strata-wasm in Node (one thread) and prints the figures beside the native ones.
//
//   node wasm/bench.mjs [FILE.safetensors] [--json]      (after wasm/build.sh)
//
// WASM figures go through the JavaScript API, copies in and out of WebAssembly memory
// included. Native figures come from `native-ref bench` (the same definitions, see
// wasm/examples/native-ref.rs) and, for the lossless codec, from strata-codec's
// `codec-bench --json` as a cross-check. MB/s are 10^6 bytes per second, as the median and
// the best of repeated runs (on a shared machine the best shows the speed without
// interference, the median what a busy machine gives).
// Default FILE: ../shared/data/series/dev_ft/bf16/step_000430.safetensors (bf16 weights).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseSafetensors, DTYPE_SIZES } from './www/safetensors.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..');
const w = createRequire(import.meta.url)('./pkg/node/strata_wasm.js');

const args = process.argv.slice(2);
const json = args.includes('--json');
const file = resolve(args.find((a) => !a.startsWith('--')) ?? join(root, '../shared/data/series/dev_ft/bf16/step_000430.safetensors'));
const TIERS = [8, 7, 5, 3];
const BLOCK = 1 << 20;
const REPS = 5;
const MIN_MS = 1000;

/** [median, best] seconds of f over at least REPS runs and MIN_MS. */
function time(f) {
  const runs = [];
  const start = performance.now();
  while (runs.length < REPS || performance.now() - start < MIN_MS) {
    const t = performance.now();
    f();
    runs.push((performance.now() - t) / 1e3);
  }
  runs.sort((a, b) => a - b);
  return [runs[runs.length >> 1], runs[0]];
}
/** [median, best] MB/s. */
const mbps = (bytes, [median, best]) => [bytes / median / 1e6, bytes / best / 1e6];

/** The codes native-ref makes: the same sequence. */
function codes(n, bits) {
  const q = (1 << (bits - 1)) - 1;
  const out = new Int8Array(n);
  for (let i = 0; i < n; i++) out[i] = ((i * 7919 + Math.floor(i / 8)) % (2 * q + 1)) - q;
  return out;
}

function wasmBench() {
  const { tensors } = parseSafetensors(readFileSync(file).buffer.slice(0));
  const lower = (d) => d.toLowerCase();
  const isFloat = (d) => ['F32', 'F16', 'BF16', 'F64'].includes(d);
  const floats = tensors.filter((t) => isFloat(t.dtype));
  const values = floats.reduce((s, t) => s + t.bytes.length / DTYPE_SIZES[t.dtype], 0);
  const out = { pack: {}, unpack: {}, quantize: {}, dequantize: {} };
  for (const bits of TIERS) {
    const c = codes(values, bits);
    const packed = w.pack(c, bits);
    out.pack[bits] = mbps(values, time(() => w.pack(c, bits)));
    out.unpack[bits] = mbps(values, time(() => w.unpack(packed, bits, values)));
  }
  const raw = tensors.reduce((s, t) => s + t.bytes.length, 0);
  const blocks = [];
  for (const t of tensors) {
    for (let o = 0; o < t.bytes.length; o += BLOCK) blocks.push({ dtype: t.dtype, bytes: t.bytes.slice(o, o + BLOCK) });
  }
  const encodeAll = () => blocks.map((b) => w.encodeBytes(lower(b.dtype), b.bytes));
  const segments = encodeAll();
  out.lossless_encode = mbps(raw, time(encodeAll));
  out.lossless_decode = mbps(raw, time(() => segments.forEach((s) => w.decodeBytes(s))));
  // The typed-array form a page would use for bf16: Uint16Array out.
  const u16 = segments.filter((_, i) => DTYPE_SIZES[blocks[i].dtype] === 2);
  const u16Raw = blocks.filter((b) => DTYPE_SIZES[b.dtype] === 2).reduce((s, b) => s + b.bytes.length, 0);
  if (u16.length) out.lossless_decode_u16 = mbps(u16Raw, time(() => u16.forEach((s) => w.decodeU16(s))));
  const fblocks = [];
  for (const t of floats) {
    for (let o = 0; o < t.bytes.length; o += BLOCK) {
      const b = t.bytes.slice(o, o + BLOCK);
      let f;
      if (t.dtype === 'F32') f = new Float32Array(b.buffer);
      else if (t.dtype === 'BF16') f = w.bf16ToF32(new Uint16Array(b.buffer));
      else if (t.dtype === 'F16') f = w.f16ToF32(new Uint16Array(b.buffer));
      else f = Float32Array.from(new Float64Array(b.buffer));
      fblocks.push({ dtype: lower(t.dtype), f });
    }
  }
  const floatRaw = floats.reduce((s, t) => s + t.bytes.length, 0);
  for (const bits of TIERS) {
    const qAll = () => fblocks.map((b) => w.quantize(b.f, bits, b.dtype));
    const segs = qAll();
    out.quantize[bits] = mbps(floatRaw, time(qAll));
    out.dequantize[bits] = mbps(floatRaw, time(() => segs.forEach((s) => w.dequantize(s))));
  }
  out.raw_bytes = raw;
  out.values = values;
  return out;
}

function cargoJson(argv) {
  const out = execFileSync('cargo', ['run', '-q', '--release', ...argv], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 });
  return JSON.parse(out.trim().split('\n').pop());
}

const wasm = wasmBench();
const native = cargoJson(['-p', 'strata-wasm', '--example', 'native-ref', '--', 'bench', file]);
const codec = cargoJson(['-p', 'strata-codec', '--example', 'codec-bench', '--', file, '--json']);

const rows = [];
for (const bits of TIERS) rows.push([`pack ${bits}-bit`, wasm.pack[bits], native.pack[bits], 500]);
for (const bits of TIERS) rows.push([`unpack ${bits}-bit`, wasm.unpack[bits], native.unpack[bits], 500]);
rows.push(['lossless encode', wasm.lossless_encode, native.lossless_encode, null]);
rows.push(['lossless decode', wasm.lossless_decode, native.lossless_decode, 300]);
if (wasm.lossless_decode_u16 !== undefined) rows.push(['lossless decode (Uint16Array)', wasm.lossless_decode_u16, native.lossless_decode, 300]);
for (const bits of TIERS) rows.push([`quantize ${bits}-bit`, wasm.quantize[bits], native.quantize[bits], null]);
for (const bits of TIERS) rows.push([`dequantize ${bits}-bit`, wasm.dequantize[bits], native.dequantize[bits], null]);

const report = {
  file, node: process.version, raw_bytes: wasm.raw_bytes, values: wasm.values,
  rows: rows.map(([what, w_, n, target]) => ({
    what, wasm_mbps: w_, native_mbps: n, target_mbps: target, met: target === null ? null : w_[0] >= target,
  })),
  codec_bench: codec,
};
const f = ([median, best]) => `${median.toFixed(0)} (${best.toFixed(0)})`;
if (json) {
  console.log(JSON.stringify(report));
} else {
  console.log(`${file}: ${wasm.raw_bytes} raw bytes, ${wasm.values} float values; Node ${process.version}, one thread`);
  console.log('MB/s as median (best) of repeated runs; the target is checked on the median.');
  console.log('| operation | WASM MB/s | native MB/s | WASM / native (medians) | target (WASM) |');
  console.log('|---|---|---|---|---|');
  for (const r of report.rows) {
    const t = r.target_mbps === null ? '' : `>= ${r.target_mbps} ${r.met ? 'met' : 'NOT MET'}`;
    console.log(`| ${r.what} | ${f(r.wasm_mbps)} | ${f(r.native_mbps)} | ${(r.wasm_mbps[0] / r.native_mbps[0]).toFixed(2)} | ${t} |`);
  }
  const l = codec.lossless;
  console.log(`codec-bench --json (native, cross-check): lossless encode ${(l.encode_gbps * 1e3).toFixed(0)} MB/s, decode ${(l.decode_gbps * 1e3).toFixed(0)} MB/s, ratio ${l.ratio}`);
}

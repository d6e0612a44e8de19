// The demo's Web Worker: parses the file, runs strata-wasm on every tensor and replays a
// Zipf access pattern through the in-memory tiered store, posting progress as it goes.
import init, { analyzeTensor, Analysis, TieredStore, tierNames } from './pkg/strata_wasm.js';
import { parseSafetensors } from './safetensors.js';

const ready = init();
/** Tensors of the last analyzed file, for the replay. */
let tensors = [];

const HOUR = 3_600_000;
const MINUTE = 60_000;

self.onmessage = async (ev) => {
  const msg = ev.data;
  try {
    await ready;
    if (msg.type === 'analyze') analyze(msg);
    else if (msg.type === 'replay') replay(msg);
  } catch (e) {
    self.postMessage({ type: 'error', job: msg.type, message: e instanceof Error ? e.message : String(e) });
  }
};

function analyze({ buffer }) {
  const parsed = parseSafetensors(buffer);
  tensors = parsed.tensors;
  const total = new Analysis();
  const rows = [];
  let done = 0;
  const bytesTotal = tensors.reduce((s, t) => s + t.bytes.length, 0) || 1;
  self.postMessage({ type: 'progress', job: 'analyze', done: 0, total: bytesTotal, name: '' });
  for (const t of tensors) {
    const a = analyzeTensor(t.dtype, t.bytes);
    total.merge(a);
    const analysis = JSON.parse(a.toJson());
    a.free();
    rows.push({ name: t.name, dtype: t.dtype, shape: t.shape, analysis });
    done += t.bytes.length;
    self.postMessage({ type: 'progress', job: 'analyze', done, total: bytesTotal, name: t.name });
  }
  const totalJson = JSON.parse(total.toJson());
  total.free();
  self.postMessage({ type: 'analysis', rows, total: totalJson, skipped: parsed.skipped });
}

/** A deterministic generator (mulberry32). */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function replay({ warmByteCap, readsPerHour, zipf, hours = 24, blockValues = 4096, maintainEvery = 5 * MINUTE, seed = 1 }) {
  const floats = tensors.filter((t) => ['F32', 'F16', 'BF16', 'F64'].includes(t.dtype));
  if (floats.length === 0) throw new Error('the file has no float tensor to tier');
  const store = new TieredStore(warmByteCap, blockValues);
  try {
    for (const t of floats) store.put(t.name, 0, t.dtype, t.bytes, 'hot8', 0);
    // Zipf over the tensors in name order: the k-th name is the k-th most read.
    const rand = rng(seed);
    const order = floats.map((t) => t.name);
    const weights = order.map((_, k) => 1 / Math.pow(k + 1, zipf));
    const sum = weights.reduce((s, x) => s + x, 0);
    const cdf = [];
    let acc = 0;
    for (const w of weights) cdf.push((acc += w / sum));
    const end = hours * HOUR;
    const reads = Math.round(hours * readsPerHour);
    const gap = end / Math.max(reads, 1);
    const samples = [{ t: 0, bytes: Array.from(store.bytesByTier()), warm: store.warmBytes() }];
    const moves = { promoted: 0, demoted: 0, squeezed: 0, evicted: 0, restored: 0, absent: 0 };
    let next = gap;
    let maxWarm = 0;
    for (let now = maintainEvery; now <= end; now += maintainEvery) {
      while (next <= now) {
        const u = rand();
        let k = cdf.findIndex((c) => u < c);
        if (k < 0) k = cdf.length - 1;
        store.get(order[k], 0, Math.round(next));
        next += gap;
      }
      const r = store.maintain(now);
      for (const key of Object.keys(moves)) moves[key] += r[key];
      r.free();
      const warm = store.warmBytes();
      maxWarm = Math.max(maxWarm, warm);
      samples.push({ t: now, bytes: Array.from(store.bytesByTier()), warm });
      if (samples.length % 24 === 0) self.postMessage({ type: 'progress', job: 'replay', done: now, total: end });
    }
    const tiersByTensor = order.map((name, rank) => ({ name, rank: rank + 1, tiers: Array.from(store.versionTiers(name, 0)) }));
    self.postMessage({
      type: 'replay', tierNames: tierNames(), samples, warmByteCap, maxWarm, moves, tiersByTensor,
      reads, readsPerHour, zipf, hours,
    });
  } finally {
    store.free();
  }
}

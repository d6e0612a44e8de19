// The JavaScript API as a page or a Node program sees it (wasm/pkg/node, after build.sh):
// typed arrays in and out, and errors thrown as Error objects with messages; the module
// keeps working after every error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const w = createRequire(import.meta.url)('../pkg/node/strata_wasm.js');

const values = Float32Array.from({ length: 5000 }, (_, i) => Math.sin(i * 0.37) * 0.03);

test('lossless round trips of Float32Array and Uint16Array, keyframe and delta', () => {
  const key = w.encodeF32(values);
  assert.deepEqual(w.decodeF32(key), values);
  const next = values.map((x) => x * 1.0005);
  const delta = w.encodeF32(next, values);
  assert.equal(w.segmentInfo(delta).encoding, 'delta');
  assert.deepEqual(w.decodeF32(delta, values), next);
  const bf = w.f32ToBf16(values);
  assert.ok(bf instanceof Uint16Array);
  const seg = w.encodeBf16(bf);
  assert.deepEqual(w.decodeU16(seg), bf);
  assert.deepEqual(w.bf16ToF32(w.decodeU16(seg)), w.bf16ToF32(bf));
  const f16 = Uint16Array.from({ length: 999 }, (_, i) => (i * 37) & 0x7bff);
  assert.deepEqual(w.decodeU16(w.encodeF16(f16, undefined, 'max-ratio')), f16);
  const bytes = Uint8Array.from({ length: 777 }, (_, i) => i % 7);
  assert.deepEqual(w.decodeBytes(w.encodeBytes('u8', bytes)), bytes);
});

test('quantize and dequantize at every tier within the bound', () => {
  const max = Math.max(...values.map(Math.abs));
  for (const bits of [8, 7, 5, 3]) {
    const seg = w.quantize(values, bits, 'bf16');
    const info = w.segmentInfo(seg);
    assert.equal(info.bits, bits);
    assert.equal(info.groupSize, 64);
    const back = w.dequantize(seg);
    assert.ok(back instanceof Float32Array);
    const bound = max / (2 * ((1 << (bits - 1)) - 1));
    back.forEach((y, i) => assert.ok(Math.abs(y - values[i]) <= bound * 1.0001, `${bits}-bit value ${i}`));
  }
});

test('pack, unpack, xor', () => {
  const codes = Int8Array.from({ length: 1001 }, (_, i) => (i % 7) - 3);
  const packed = w.pack(codes, 3);
  assert.equal(packed.length, Math.ceil((1001 * 3) / 8));
  assert.deepEqual(w.unpack(packed, 3, 1001), codes);
  const a = Uint8Array.of(1, 2, 3);
  const b = Uint8Array.of(7, 7, 7);
  assert.deepEqual(w.xorBytes(w.xorBytes(a, b), b), a);
});

test('bad input throws an Error with a message, never a trap', () => {
  const key = w.encodeF32(values);
  const cases = [
    [() => w.unpack(new Uint8Array(1), 3, 100), /input buffer too small: 38 bytes required/],
    [() => w.pack(Int8Array.of(5), 3), /code 5 at index 0 is outside -3..=3/],
    [() => w.pack(Int8Array.of(0), 9), /invalid bit width 9/],
    [() => w.pack(Int8Array.of(0), 2 ** 32 + 3), /invalid bits/],
    [() => w.unpack(new Uint8Array(4), 8, 2.5), /invalid count/],
    [() => w.quantize(values, 8, 'f32', 0.5), /invalid groupSize/],
    [() => w.quantize(values, 4), /tiers are 8, 7, 5 or 3 bits/],
    [() => w.quantize(Float32Array.of(1, NaN), 8), /value at index 1 is not finite/],
    [() => w.quantize(values, 8, 'i32'), /float dtype/],
    [() => w.encodeBytes('f32', new Uint8Array(3)), /3 bytes, not a whole number of f32/],
    [() => w.encodeBytes('fp8', new Uint8Array(3)), /unknown dtype "fp8"/],
    [() => w.encodeF32(values, values.subarray(1)), /invalid base/],
    [() => w.decodeBytes(new Uint8Array(10)), /shorter than the 48-byte header/],
    [() => w.decodeBytes(key.map((x, i) => (i === 60 ? x ^ 1 : x))), /checksum mismatch/],
    [() => w.decodeF32(w.encodeF32(values, values)), /base required but not given/],
    [() => w.decodeF32(w.encodeF32(values, values), values.map((x) => x + 1)), /does not match the delta's base/],
    [() => w.dequantize(key), /lossless: use decode/],
    [() => w.decodeU16(key), /not a 2-byte dtype/],
    [() => w.xorBytes(new Uint8Array(2), new Uint8Array(3)), /lengths differ: 2 and 3 bytes/],
    [() => new w.TieredStore(-5), /invalid warmByteCap/],
    [() => new w.TieredStore(1e6, 0), /block_values/],
  ];
  for (const [f, re] of cases) {
    assert.throws(f, (e) => e instanceof Error && re.test(e.message), String(re));
  }
  // Still alive.
  assert.deepEqual(w.decodeF32(key), values);
});

test('a corrupted segment never decodes silently, whichever byte is hit', () => {
  const key = w.encodeF32(values.subarray(0, 300));
  for (let i = 0; i < key.length; i += 7) {
    const bad = key.slice();
    bad[i] ^= 0x10;
    assert.throws(() => w.decodeBytes(bad), Error, `byte ${i}`);
  }
});

test('the tiered store: put, get at a step, record access, maintain under the cap', () => {
  const bytes = new Uint8Array(values.buffer.slice(0));
  const st = new w.TieredStore(20_000, 1024);
  st.put('layer', 100, 'f32', bytes, 'exact', 0);
  const v2 = new Uint8Array(values.map((x) => x + 1e-4).buffer);
  st.put('layer', 200, 'f32', v2, 'exact', 0);
  assert.deepEqual(st.get('layer', 100, 1000), bytes);
  assert.deepEqual(st.get('layer', 200, 1000), v2);
  assert.deepEqual(Array.from(st.steps('layer')), [100, 200]);
  for (const name of ['a', 'b', 'c']) st.put(name, 0, 'f32', bytes, 'hot8', 0);
  assert.deepEqual(st.names(), ['a', 'b', 'c', 'layer']);
  // 5000 values: 4 blocks of 1024 (16 groups of 68 bytes) and one of 904 (15 scales, 904
  // codes), each with a 48-byte header.
  assert.equal(st.bytesByTier()[w.tierNames().indexOf('hot8')], 3 * (4 * (48 + 16 * 68) + (48 + 4 * 15 + 904)));
  const MIN = 60_000;
  let now = 0;
  for (let k = 1; k <= 120; k++) {
    now = k * MIN;
    st.recordAccess('a', 0, now); // 60 reads an hour: stays hot
    if (k % 6 === 0) st.getF32('b', 0, now); // 10 an hour: warm
    if (k % 5 === 0) {
      const r = st.maintain(now);
      assert.ok(st.warmBytes() <= 20_000, `warm ${st.warmBytes()} at ${k} min`);
      r.free();
    }
  }
  const tiers = (n) => Object.fromEntries(w.tierNames().map((t, i) => [t, st.versionTiers(n, 0)[i]]));
  assert.equal(tiers('a').hot8, 5);
  assert.equal(tiers('c').cold3, 5);
  assert.ok(tiers('b').warm7 + tiers('b').warm5 === 5, JSON.stringify(tiers('b')));
  assert.equal(st.errorBound('layer', 100), 0);
  assert.ok(st.errorBound('c', 0) > 1 / 6);
  const back = st.getF32('c', 0, now);
  back.forEach((y, i) => assert.ok(Math.abs(y - values[i]) <= 0.03 * st.errorBound('c', 0) * 1.001));
  assert.throws(() => st.put('layer', 100, 'f32', bytes, 'exact', 0), /already has a version at step 100/);
  assert.throws(() => st.get('layer', 150, 0), /no version at step 150/);
  assert.throws(() => st.get('layer', -1, 0), /invalid step/);
  assert.throws(() => st.put('x', 1, 'f32', bytes, 'lukewarm', 0), /invalid policy/);
  st.setWarmByteCap(0);
  st.maintain(now + MIN);
  assert.equal(st.warmBytes(), 0);
  st.free();
});

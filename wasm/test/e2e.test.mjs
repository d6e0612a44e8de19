// End to end: serves wasm/www on localhost, drives Debian's Chromium headless through
// playwright-core, loads the sample and checks the table and charts against the figures
// the native build computes for the same file (`native-ref report`). Saves a screenshot to
// target/wasm-e2e/demo.png. Needs wasm/build.sh first and /usr/bin/chromium
// (CHROMIUM=path to use another).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { serve } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const SAMPLE = join(root, 'wasm/www/sample/dev_ft-bf16-step_000430-sample.safetensors');
const SHOTS = join(root, 'target/wasm-e2e');
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// The page's formats (app.js `fmt`), repeated so a change there shows up here.
const fmt = {
  bytes: (n) => n.toLocaleString('en-US'),
  ratio: (x) => `${x.toFixed(3)}×`,
  err: (x) => (x === 0 ? '0' : x.toExponential(1)),
};

let native, server, url, browser, page;
const pageErrors = [];

before(async () => {
  const out = execFileSync('cargo', ['run', '-q', '--release', '-p', 'strata-wasm', '--example', 'native-ref', '--', 'report', SAMPLE],
    { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 });
  native = JSON.parse(out);
  ({ server, url } = await serve(0));
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true, args: FLAGS });
  page = await browser.newPage({ viewport: { width: 1500, height: 1600 } });
  page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(`console: ${m.text()}`); });
  await page.goto(url);
  await page.waitForSelector('body[data-state="ready"]');
});

after(async () => {
  await browser?.close();
  server?.close();
});

/** Cells of a row as {value (data-value), max, mean, text}. */
async function rowCells(selector) {
  return page.$$eval(`${selector} td`, (tds) => tds.map((td) => ({ value: td.dataset.value, max: td.dataset.max, mean: td.dataset.mean, text: td.textContent })));
}

/** What a row shows after the tensor and its dtype and shape: [value or [max, mean], text] per cell. */
function expectedCells(a) {
  const out = [
    [a.raw_bytes, fmt.bytes(a.raw_bytes)],
    [a.lossless_bytes, fmt.bytes(a.lossless_bytes)],
    [a.lossless_ratio, fmt.ratio(a.lossless_ratio)],
  ];
  for (const t of a.tiers) {
    out.push([t.stored_bytes, fmt.bytes(t.stored_bytes)], [t.ratio, fmt.ratio(t.ratio)],
      [[t.max_rel_err, t.mean_rel_err], `${fmt.err(t.max_rel_err)} / ${fmt.err(t.mean_rel_err)}`]);
  }
  return out;
}

function checkRow(cells, a, what) {
  const exp = expectedCells(a);
  assert.equal(cells.length, 2 + exp.length, `${what}: column count`);
  exp.forEach(([value, text], i) => {
    const c = cells[2 + i];
    if (Array.isArray(value)) {
      assert.deepEqual([Number(c.max), Number(c.mean)], value, `${what}: column ${2 + i} errors`);
    } else {
      assert.equal(Number(c.value), value, `${what}: column ${2 + i} value`);
    }
    assert.equal(c.text, text, `${what}: column ${2 + i} text`);
  });
}

test('the sample loads and the table shows the native figures', async () => {
  await page.click('#sample');
  await page.waitForSelector('body[data-state="replayed"]', { timeout: 180_000 });
  assert.deepEqual(pageErrors, []);
  const names = await page.$$eval('#table tbody tr', (trs) => trs.map((tr) => tr.dataset.tensor));
  assert.deepEqual(names, native.tensors.map((t) => t.name));
  for (const t of native.tensors) {
    checkRow(await rowCells(`#table tbody tr[data-tensor="${t.name}"]`), t.analysis, t.name);
  }
  const total = await rowCells('#table tfoot tr');
  checkRow(total, native.total, 'total');
  assert.equal(total[0].text, `total (${native.tensors.length} tensors)`);
});

test('the error chart plots every tier at its bits per value', async () => {
  for (const key of ['max', 'mean']) {
    const pts = await page.$$eval(`#chart-error circle.point.${key}`, (cs) => cs.map((c) => ({ bits: Number(c.dataset.bits), value: Number(c.dataset.value), x: Number(c.dataset.x) })));
    assert.deepEqual(pts.map((p) => p.bits), [8, 7, 5, 3]);
    native.total.tiers.forEach((t, i) => {
      assert.equal(pts[i].value, key === 'max' ? t.max_rel_err : t.mean_rel_err);
      assert.equal(pts[i].x, t.bits_per_value);
    });
  }
  const lossless = await page.$eval('#chart-error path.lossless', (p) => Number(p.dataset.x));
  assert.equal(lossless, native.total.lossless_bits_per_value);
  // Fewer bits, more error.
  const maxes = native.total.tiers.map((t) => t.max_rel_err);
  assert.ok(maxes[0] < maxes[1] && maxes[1] < maxes[2] && maxes[2] < maxes[3]);
});

test('the exponent histogram has one bar per exponent in range, with the native counts', async () => {
  const bars = await page.$$eval('#chart-exponent rect.bar', (rs) => rs.map((r) => [Number(r.dataset.exponent), Number(r.dataset.count)]));
  const hist = native.total.exponent_hist;
  const nz = hist.map((c, i) => (c > 0 ? i : -1)).filter((i) => i >= 0);
  assert.equal(bars.length, nz[nz.length - 1] - nz[0] + 1);
  for (const [e, c] of bars) assert.equal(c, hist[e], `exponent ${e}`);
  assert.equal(bars.reduce((s, [, c]) => s + c, 0), native.total.elements);
});

test('the replay draws bytes per tier and keeps warm bytes under the cap', async () => {
  const areas = await page.$$eval('#chart-replay polygon.area', (ps) => ps.map((p) => p.dataset.tier));
  assert.ok(areas.includes('hot8'), `tiers drawn: ${areas}`);
  assert.ok(areas.length >= 2, `tiers drawn: ${areas}`);
  const { maxWarm, cap } = await page.$eval('#replay-summary', (p) => ({ maxWarm: Number(p.dataset.maxWarm), cap: Number(p.dataset.cap) }));
  // The default cap is half the 7-bit size of the float tensors.
  assert.equal(cap, Math.round(native.total.tiers[1].stored_bytes * 0.5));
  assert.ok(maxWarm > 0 && maxWarm <= cap, `max warm ${maxWarm}, cap ${cap}`);
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, 'demo.png'), fullPage: true });
});

test('a lower cap replays with less warm data', async () => {
  await page.fill('#cap', '10');
  await page.dispatchEvent('#cap', 'input');
  await page.click('#run');
  await page.waitForFunction((c) => Number(document.querySelector('#replay-summary').dataset.cap) === c,
    Math.round(native.total.tiers[1].stored_bytes * 0.1));
  const { maxWarm, cap } = await page.$eval('#replay-summary', (p) => ({ maxWarm: Number(p.dataset.maxWarm), cap: Number(p.dataset.cap) }));
  assert.ok(maxWarm <= cap, `max warm ${maxWarm}, cap ${cap}`);
  assert.deepEqual(pageErrors, []);
});

test('a broken file is reported on the page, and the page keeps working', async () => {
  await page.setInputFiles('#file', { name: 'broken.safetensors', mimeType: 'application/octet-stream', buffer: Buffer.from([200, 0, 0, 0, 0, 0, 0, 0, 123]) });
  await page.waitForSelector('body[data-state="error"]');
  const msg = await page.textContent('#message');
  assert.match(msg, /^Error: safetensors: header length 200 exceeds the file/);
  await page.click('#sample');
  await page.waitForSelector('body[data-state="replayed"]', { timeout: 180_000 });
  assert.equal(await page.$$eval('#table tbody tr', (trs) => trs.length), native.tensors.length);
});

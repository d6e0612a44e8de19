// The demo page: hands files to the worker and draws what comes back (a table and SVG
// charts). No framework; every figure is computed by strata-wasm in the worker.

const $ = (id) => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
const TIERS = [8, 7, 5, 3];
const TIER_COLORS = { absent: '#cccccc', cold3: '#4c72b0', warm5: '#dd8452', warm7: '#f2b701', hot8: '#c44e52', exact: '#55a868' };
/** Stacking order of the replay chart, bottom up: warm first, so its top meets the cap line. */
const STACK = ['warm5', 'warm7', 'hot8', 'cold3', 'exact'];

const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
let lastAnalysis = null;

/** Formats, shared by the table and the tests' expectations. */
export const fmt = {
  bytes: (n) => n.toLocaleString('en-US'),
  ratio: (x) => `${x.toFixed(3)}×`,
  err: (x) => (x === 0 ? '0' : x.toExponential(1)),
  kb: (n) => `${(n / 1000).toFixed(1)} kB`,
};

function status(text, fraction) {
  $('message').textContent = text;
  const p = $('progress');
  if (fraction === undefined) {
    p.hidden = true;
  } else {
    p.hidden = false;
    p.value = fraction;
  }
}

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svgEl(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A table cell with the number it shows in data-value. */
function numCell(value, text, cls) {
  const td = el('td', { 'data-value': String(value), class: cls ?? 'num' }, text);
  return td;
}

function cells(tr, a) {
  tr.append(numCell(a.raw_bytes, fmt.bytes(a.raw_bytes)));
  tr.append(numCell(a.lossless_bytes, fmt.bytes(a.lossless_bytes)));
  tr.append(numCell(a.lossless_ratio, fmt.ratio(a.lossless_ratio)));
  a.tiers.forEach((t, i) => {
    const g = i % 2 ? 'num odd' : 'num even';
    if (a.tier_elements === 0) {
      tr.append(el('td', { class: g }, '–'), el('td', { class: g }, '–'), el('td', { class: g }, '–'));
      return;
    }
    tr.append(numCell(t.stored_bytes, fmt.bytes(t.stored_bytes), g));
    tr.append(numCell(t.ratio, fmt.ratio(t.ratio), g));
    tr.append(el('td', { class: g, 'data-max': String(t.max_rel_err), 'data-mean': String(t.mean_rel_err) },
      `${fmt.err(t.max_rel_err)} / ${fmt.err(t.mean_rel_err)}`));
  });
}

function drawTable(rows, total) {
  const table = $('table');
  table.replaceChildren();
  const thead = el('thead');
  const h1 = el('tr');
  h1.append(el('th', { rowspan: 2 }, 'tensor'), el('th', { rowspan: 2 }, 'dtype, shape'),
    el('th', { rowspan: 2 }, 'raw bytes'), el('th', { colspan: 2 }, 'lossless'));
  TIERS.forEach((b, i) => h1.append(el('th', { colspan: 3, class: i % 2 ? 'odd' : 'even' }, `${b}-bit`)));
  const h2 = el('tr');
  h2.append(el('th', {}, 'bytes'), el('th', {}, 'ratio'));
  TIERS.forEach((_, i) => {
    const c = i % 2 ? 'odd' : 'even';
    h2.append(el('th', { class: c }, 'bytes'), el('th', { class: c }, 'ratio'), el('th', { class: c }, 'max / mean err'));
  });
  thead.append(h1, h2);
  const tbody = el('tbody');
  for (const r of rows) {
    const tr = el('tr', { 'data-tensor': r.name });
    tr.append(el('td', { class: 'name' }, r.name), el('td', {}, `${r.dtype.toLowerCase()} ${r.shape.join('×')}`));
    cells(tr, r.analysis);
    tbody.append(tr);
  }
  const tfoot = el('tfoot');
  const tr = el('tr', { class: 'total' });
  tr.append(el('td', { class: 'name' }, `total (${rows.length} tensors)`),
    el('td', {}, `${total.dtype ?? 'mixed'}, ${fmt.bytes(total.elements)} values`));
  cells(tr, total);
  tfoot.append(tr);
  table.append(thead, tbody, tfoot);
}

/** Axis ticks for a linear range. */
function ticks(lo, hi, n) {
  const step0 = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(step0 || 1));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0) ?? step0;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

function drawErrorChart(rows, total) {
  const svg = $('chart-error');
  svg.replaceChildren();
  const W = 520, H = 320, L = 60, R = 20, T = 20, B = 45;
  const pts = total.tiers.map((t) => ({ bits: t.bits, x: t.bits_per_value, max: t.max_rel_err, mean: t.mean_rel_err }));
  const ys = pts.flatMap((p) => [p.max, p.mean]).filter((y) => y > 0);
  for (const r of rows) for (const t of r.analysis.tiers) if (t.mean_rel_err > 0) ys.push(t.mean_rel_err);
  if (ys.length === 0) {
    svg.append(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no float tensor: no tier errors'));
    return;
  }
  const y0 = Math.floor(Math.log10(Math.min(...ys))), y1 = Math.ceil(Math.log10(Math.max(...ys)));
  const xMax = Math.max(16, Math.ceil(total.lossless_bits_per_value + 1));
  const sx = (x) => L + (x / xMax) * (W - L - R);
  const sy = (y) => T + (1 - (Math.log10(y) - y0) / Math.max(1, y1 - y0)) * (H - T - B);
  const g = svgEl('g', { class: 'axes' });
  for (let e = y0; e <= y1; e++) {
    g.append(svgEl('line', { x1: L, x2: W - R, y1: sy(10 ** e), y2: sy(10 ** e), class: 'grid' }));
    g.append(svgEl('text', { x: L - 6, y: sy(10 ** e) + 4, 'text-anchor': 'end' }, `1e${e}`));
  }
  for (const x of ticks(0, xMax, 8)) {
    g.append(svgEl('line', { x1: sx(x), x2: sx(x), y1: T, y2: H - B, class: 'grid' }));
    g.append(svgEl('text', { x: sx(x), y: H - B + 16, 'text-anchor': 'middle' }, String(x)));
  }
  g.append(svgEl('text', { x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle' }, 'stored bits per value'));
  g.append(svgEl('text', { x: 14, y: (T + H - B) / 2, 'text-anchor': 'middle', transform: `rotate(-90 14 ${(T + H - B) / 2})` }, 'relative error'));
  svg.append(g);
  for (const r of rows) {
    const a = r.analysis;
    a.tiers.forEach((t, i) => {
      if (t.mean_rel_err > 0) svg.append(svgEl('circle', { cx: sx(a.tiers[i].bits_per_value), cy: sy(t.mean_rel_err), r: 2, class: 'tensor-point' }));
    });
  }
  for (const key of ['max', 'mean']) {
    const line = pts.filter((p) => p[key] > 0).map((p) => `${sx(p.x)},${sy(p[key])}`).join(' ');
    svg.append(svgEl('polyline', { points: line, class: `series ${key}` }));
    for (const p of pts) {
      if (p[key] <= 0) continue;
      const c = svgEl('circle', { cx: sx(p.x), cy: sy(p[key]), r: 4, class: `point ${key}`, 'data-bits': p.bits, 'data-value': String(p[key]), 'data-x': String(p.x) });
      c.append(svgEl('title', {}, `${p.bits}-bit: ${p.x.toFixed(2)} bits/value, ${key} error ${fmt.err(p[key])}`));
      svg.append(c);
      if (key === 'max') svg.append(svgEl('text', { x: sx(p.x) + 6, y: sy(p[key]) - 6, class: 'label' }, `${p.bits}-bit`));
    }
  }
  const lx = sx(total.lossless_bits_per_value);
  svg.append(svgEl('path', { d: `M${lx},${H - B - 9} l6,6 l-6,6 l-6,-6 z`, class: 'lossless', 'data-x': String(total.lossless_bits_per_value) }));
  svg.append(svgEl('text', { x: lx, y: H - B - 14, 'text-anchor': 'middle', class: 'label' }, 'lossless: exact'));
  const leg = svgEl('g', { class: 'legend' });
  leg.append(svgEl('line', { x1: W - 190, x2: W - 170, y1: T + 8, y2: T + 8, class: 'series max' }), svgEl('text', { x: W - 165, y: T + 12 }, 'max (worst group)'));
  leg.append(svgEl('line', { x1: W - 190, x2: W - 170, y1: T + 26, y2: T + 26, class: 'series mean' }), svgEl('text', { x: W - 165, y: T + 30 }, 'mean (dots: per tensor)'));
  svg.append(leg);
}

function drawExponentChart(total) {
  const svg = $('chart-exponent');
  svg.replaceChildren();
  const W = 520, H = 320, L = 60, R = 20, T = 20, B = 45;
  const hist = total.exponent_hist;
  const nz = hist.map((c, i) => (c > 0 ? i : -1)).filter((i) => i >= 0);
  if (nz.length === 0) {
    svg.append(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no float tensor'));
    return;
  }
  const lo = nz[0], hi = nz[nz.length - 1];
  const max = Math.max(...hist);
  const bw = (W - L - R) / (hi - lo + 1);
  const sy = (c) => T + (1 - c / max) * (H - T - B);
  const bias = total.dtype === 'f16' ? 15 : total.dtype === 'f64' ? 1023 >> 3 : 127;
  const g = svgEl('g', { class: 'axes' });
  for (const c of ticks(0, max, 5)) {
    g.append(svgEl('line', { x1: L, x2: W - R, y1: sy(c), y2: sy(c), class: 'grid' }));
    g.append(svgEl('text', { x: L - 6, y: sy(c) + 4, 'text-anchor': 'end' }, c >= 1000 ? `${c / 1000}k` : String(c)));
  }
  const every = Math.ceil((hi - lo + 1) / 10);
  for (let e = lo; e <= hi; e += every) {
    g.append(svgEl('text', { x: L + (e - lo + 0.5) * bw, y: H - B + 16, 'text-anchor': 'middle' }, String(e)));
  }
  g.append(svgEl('text', { x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle' }, `exponent field (value ≈ 2^(e − ${bias}))`));
  svg.append(g);
  for (let e = lo; e <= hi; e++) {
    const c = hist[e];
    const r = svgEl('rect', { x: L + (e - lo) * bw + 0.5, y: sy(c), width: Math.max(1, bw - 1), height: H - B - sy(c), class: 'bar', 'data-exponent': e, 'data-count': c });
    r.append(svgEl('title', {}, `exponent ${e} (2^${e - bias}): ${c.toLocaleString('en-US')} values`));
    svg.append(r);
  }
}

function drawReplay(res) {
  const svg = $('chart-replay');
  svg.replaceChildren();
  const W = 1040, H = 340, L = 70, R = 150, T = 20, B = 40;
  const idx = Object.fromEntries(res.tierNames.map((n, i) => [n, i]));
  const totals = res.samples.map((s) => s.bytes.reduce((a, b) => a + b, 0));
  const yMax = Math.max(...totals, res.warmByteCap) * 1.05 || 1;
  const tMax = res.hours * 3_600_000;
  const sx = (t) => L + (t / tMax) * (W - L - R);
  const sy = (b) => T + (1 - b / yMax) * (H - T - B);
  const g = svgEl('g', { class: 'axes' });
  for (const b of ticks(0, yMax, 6)) {
    g.append(svgEl('line', { x1: L, x2: W - R, y1: sy(b), y2: sy(b), class: 'grid' }));
    g.append(svgEl('text', { x: L - 6, y: sy(b) + 4, 'text-anchor': 'end' }, fmt.kb(b)));
  }
  for (let h = 0; h <= res.hours; h += Math.max(1, Math.round(res.hours / 12))) {
    g.append(svgEl('text', { x: sx(h * 3_600_000), y: H - B + 16, 'text-anchor': 'middle' }, `${h} h`));
  }
  svg.append(g);
  const base = res.samples.map(() => 0);
  const leg = svgEl('g', { class: 'legend' });
  STACK.forEach((name, k) => {
    const i = idx[name];
    const top = res.samples.map((s, j) => base[j] + s.bytes[i]);
    if (res.samples.some((s) => s.bytes[i] > 0)) {
      const up = res.samples.map((s, j) => `${sx(s.t)},${sy(top[j])}`);
      const down = res.samples.map((s, j) => `${sx(s.t)},${sy(base[j])}`).reverse();
      const area = svgEl('polygon', { points: [...up, ...down].join(' '), fill: TIER_COLORS[name], class: `area ${name}`, 'data-tier': name, 'data-final': String(res.samples[res.samples.length - 1].bytes[i]) });
      area.append(svgEl('title', {}, name));
      svg.append(area);
    }
    top.forEach((v, j) => { base[j] = v; });
    leg.append(svgEl('rect', { x: W - R + 15, y: T + 10 + k * 22, width: 14, height: 14, fill: TIER_COLORS[name] }));
    leg.append(svgEl('text', { x: W - R + 35, y: T + 22 + k * 22 }, name));
  });
  const cy = sy(res.warmByteCap);
  svg.append(svgEl('line', { x1: L, x2: W - R, y1: cy, y2: cy, class: 'cap', 'data-value': String(res.warmByteCap) }));
  svg.append(svgEl('text', { x: W - R - 4, y: cy - 5, 'text-anchor': 'end', class: 'label' }, `warm_byte_cap ${fmt.kb(res.warmByteCap)}`));
  leg.append(svgEl('line', { x1: W - R + 15, x2: W - R + 29, y1: T + 10 + STACK.length * 22 + 7, y2: T + 10 + STACK.length * 22 + 7, class: 'cap' }));
  leg.append(svgEl('text', { x: W - R + 35, y: T + 22 + STACK.length * 22 }, 'warm cap'));
  svg.append(leg);
  const m = res.moves;
  const last = res.samples[res.samples.length - 1];
  const summary = $('replay-summary');
  summary.dataset.maxWarm = String(res.maxWarm);
  summary.dataset.cap = String(res.warmByteCap);
  summary.textContent = `${res.reads.toLocaleString('en-US')} reads in ${res.hours} h (Zipf ${res.zipf}). Moves: ` +
    `${m.promoted} promoted, ${m.demoted} demoted, ${m.squeezed} squeezed 7→5, ${m.evicted} evicted to cold, ` +
    `${m.restored} restored 5→7. Largest warm total after a pass: ${fmt.kb(res.maxWarm)} ` +
    `(cap ${fmt.kb(res.warmByteCap)}). At the end: ` +
    res.tierNames.map((n, i) => `${n} ${fmt.kb(last.bytes[i])}`).join(', ') + '.';
}

function capBytes() {
  const full = lastAnalysis ? lastAnalysis.total.tiers[1].stored_bytes : 0;
  return Math.round((full * Number($('cap').value)) / 100);
}

function updateCap() {
  $('cap-out').textContent = `${fmt.kb(capBytes())} (${$('cap').value} % of the 7-bit size)`;
}

function runReplay() {
  if (!lastAnalysis) return;
  $('run').disabled = true;
  status('Replaying accesses…', 0);
  worker.postMessage({ type: 'replay', warmByteCap: capBytes(), readsPerHour: Number($('rate').value), zipf: Number($('zipf').value) });
}

worker.onmessage = (ev) => {
  const m = ev.data;
  if (m.type === 'progress') {
    const what = m.job === 'analyze' ? `Analyzing ${m.name}` : 'Replaying accesses';
    status(`${what}…`, m.total ? m.done / m.total : 0);
  } else if (m.type === 'analysis') {
    lastAnalysis = m;
    $('tiers').hidden = false;
    $('replay').hidden = false;
    drawTable(m.rows, m.total);
    drawErrorChart(m.rows, m.total);
    drawExponentChart(m.total);
    updateCap();
    const skipped = m.skipped.length ? ` (${m.skipped.length} tensors of unsupported dtypes skipped)` : '';
    status(`Analyzed ${m.rows.length} tensors${skipped}.`);
    document.body.dataset.state = 'analyzed';
    runReplay();
  } else if (m.type === 'replay') {
    drawReplay(m);
    $('run').disabled = false;
    status(`Analyzed ${lastAnalysis.rows.length} tensors; replay done.`);
    document.body.dataset.state = 'replayed';
  } else if (m.type === 'error') {
    status(`Error: ${m.message}`);
    $('run').disabled = false;
    document.body.dataset.state = 'error';
  }
};

function openBuffer(buffer, name) {
  document.body.dataset.state = 'working';
  $('file-name').textContent = `(${name})`;
  status(`Reading ${name}…`, 0);
  worker.postMessage({ type: 'analyze', buffer }, [buffer]);
}

async function openFile(file) {
  openBuffer(await file.arrayBuffer(), file.name);
}

$('file').addEventListener('change', (e) => {
  if (e.target.files[0]) openFile(e.target.files[0]);
});
$('sample').addEventListener('click', async () => {
  const url = 'sample/dev_ft-bf16-step_000430-sample.safetensors';
  const res = await fetch(url);
  if (!res.ok) {
    status(`Error: cannot load the sample (${res.status})`);
    return;
  }
  openBuffer(await res.arrayBuffer(), url.split('/').pop());
});
const drop = $('drop');
drop.addEventListener('dragover', (e) => {
  e.preventDefault();
  drop.classList.add('over');
});
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  const f = e.dataTransfer.files[0];
  if (f) openFile(f);
});
$('cap').addEventListener('input', updateCap);
$('replay-form').addEventListener('submit', (e) => {
  e.preventDefault();
  runReplay();
});
document.body.dataset.state = 'ready';

// The harch Inspector page. Every figure is read from the embedded data (the engine's one
// evaluation); the only arithmetic here is evaluating the engine's own formula text at the
// context the slider picks (`evalFormula`, the grammar of harch-inspect's formula.rs).
'use strict';

const DATA = JSON.parse(document.getElementById('harch-data').textContent);
const M = DATA.model;
const B = DATA.compare;

// ---------- numbers: integers arrive as numbers or, past 2^53, as decimal strings ----------
const big = (v) => (typeof v === 'bigint' ? v : typeof v === 'string' ? BigInt(v) : BigInt(Math.round(v || 0)));
function digits(v) {
  const b = big(v);
  const s = (b < 0n ? -b : b).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return (b < 0n ? '-' : '') + s;
}
function human(v, unit) {
  const x = Number(big(v));
  if (unit === 'B') {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let i = 0, y = x;
    while (Math.abs(y) >= 1024 && i + 1 < u.length) { y /= 1024; i++; }
    return i === 0 ? `${x} B` : `${y.toFixed(2)} ${u[i]}`;
  }
  const a = Math.abs(x);
  if (a >= 1e12) return `${(x / 1e12).toFixed(2)} T`;
  if (a >= 1e9) return `${(x / 1e9).toFixed(2)} B`;
  if (a >= 1e6) return `${(x / 1e6).toFixed(2)} M`;
  if (a >= 1e3) return `${(x / 1e3).toFixed(1)} K`;
  return String(x);
}

// ---------- the engine's formula text, evaluated exactly (BigInt) ----------
const FUNCTIONS = ['min', 'max', 'ceil_div', 'floor_div', 'isqrt', 'causal_positions', 'windowed_positions', 'entries', 'per_ratio'];
function tokens(text) {
  const out = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (/\s/.test(c)) { i++; continue; }
    if (/[0-9]/.test(c)) {
      let j = i; while (j < text.length && /[0-9]/.test(text[j])) j++;
      out.push({ t: 'num', v: BigInt(text.slice(i, j)) }); i = j; continue;
    }
    if (/[A-Za-z_]/.test(c)) {
      let j = i; while (j < text.length && /[A-Za-z0-9_.]/.test(text[j])) j++;
      const name = text.slice(i, j);
      if (text[j] === '(' && !FUNCTIONS.includes(name)) {
        let depth = 0, k = j;
        for (; k < text.length; k++) {
          if (text[k] === '(') depth++;
          if (text[k] === ')' && --depth === 0) break;
        }
        if (k >= text.length) throw new Error(`formula: unclosed ( after ${name}`);
        out.push({ t: 'atom', v: text.slice(i, k + 1) }); i = k + 1; continue;
      }
      out.push({ t: text[j] === '(' ? 'call' : 'atom', v: name }); i = j; continue;
    }
    if ('+-*/(),'.includes(c)) { out.push({ t: 'op', v: c }); i++; continue; }
    throw new Error(`formula: unexpected ${c}`);
  }
  return out;
}
function evalFormula(text, env) {
  const toks = tokens(String(text));
  let at = 0;
  const eat = (c) => (toks[at] && toks[at].t === 'op' && toks[at].v === c ? (at++, true) : false);
  const causal = (s) => (s * (s + 1n)) / 2n;
  const call = (f, a) => {
    switch (f) {
      case 'min': return a[0] < a[1] ? a[0] : a[1];
      case 'max': return a[0] > a[1] ? a[0] : a[1];
      case 'floor_div': case 'ceil_div': case 'entries': case 'per_ratio': {
        let q = a[0] / a[1]; const r = a[0] % a[1];
        if (r !== 0n && (r < 0n) !== (a[1] < 0n)) q -= 1n;
        const exact = a[0] === q * a[1];
        return f === 'ceil_div' && !exact ? q + 1n : q;
      }
      case 'isqrt': return BigInt(Math.round(Math.sqrt(Number(a[0]))));
      case 'causal_positions': return causal(a[0]);
      case 'windowed_positions': return a[1] < a[0] ? (a[1] * (a[1] + 1n)) / 2n + (a[0] - a[1]) * a[1] : causal(a[0]);
      default: throw new Error(`formula: unknown function ${f}`);
    }
  };
  function factor() {
    const t = toks[at++];
    if (!t) throw new Error('formula ends early');
    if (t.t === 'num') return t.v;
    if (t.t === 'atom') {
      if (!(t.v in env)) throw new Error(`formula: unbound ${t.v}`);
      return big(env[t.v]);
    }
    if (t.t === 'op' && t.v === '(') { const v = sum(); if (!eat(')')) throw new Error('formula: missing )'); return v; }
    if (t.t === 'op' && t.v === '-') return -factor();
    if (t.t === 'call') {
      eat('(');
      const args = [sum()];
      while (eat(',')) args.push(sum());
      if (!eat(')')) throw new Error('formula: missing )');
      return call(t.v, args);
    }
    throw new Error(`formula: unexpected ${t.v}`);
  }
  function product() {
    let v = factor();
    for (;;) {
      if (eat('*')) v *= factor();
      else if (eat('/')) v /= factor();
      else return v;
    }
  }
  function sum() {
    let v = product();
    for (;;) {
      if (eat('+')) v += product();
      else if (eat('-')) v -= product();
      else return v;
    }
  }
  const v = sum();
  if (at !== toks.length) throw new Error('formula: trailing input');
  return v;
}

// ---------- DOM helpers ----------
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k);
  return e;
}
const SVGNS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k) e.append(k);
  return e;
}
function figureCell(key, value, unit, model) {
  const td = h('td', { class: 'num', 'data-figure': key, 'data-value': value === null || value === undefined ? '' : String(big(value)) });
  if (value === null || value === undefined) { td.textContent = '—'; return td; }
  td.append(digits(value), ' ', h('span', { class: 'h', text: `(${human(value, unit)})` }));
  if ((model || M).verdict.unverified.includes(key)) td.append(h('span', { class: 'unverified', text: 'unverified (declared gap)' }));
  return td;
}
const fig = (m, k) => (m.figures ? m.figures[k] : null);
const dimOfKind = (m, kind) => m.dims.find((d) => d.kind === kind);

// ---------- header, problems, tabs ----------
function header() {
  document.getElementById('title').textContent = B ? `${M.title} vs ${B.title}` : M.title;
  document.getElementById('subtitle').textContent = M.summary || M.spec;
  const p = document.getElementById('problems');
  const bad = [M, B].filter((m) => m && !m.verdict.valid);
  if (bad.length) {
    p.hidden = false;
    for (const m of bad) {
      p.append(h('h2', { text: `${m.title}: the spec does not validate against its truth (${m.truth})` }),
        h('p', { text: m.verdict.stopped_at ? `The check stopped at ${m.verdict.stopped_at}; its figures are not shown.` : 'Its figures are not shown: a spec that fails validation has no trustworthy numbers.' }),
        h('ul', { class: 'errors' }, m.verdict.errors.map((e) => h('li', {},
          h('code', { text: e.code }), ` ${e.guard} · ${e.at}: ${e.message}`, e.hint ? h('div', { class: 'h', text: `hint: ${e.hint}` }) : null))));
    }
  } else if (M.verdict.declared_gap) {
    p.hidden = false;
    p.className = 'gap';
    p.append(h('h2', { text: 'Valid with a declared gap' }), h('p', { text: M.verdict.declared_gap }));
  }
}

const views = [];
function tabs() {
  const ok = M.verdict.valid && M.figures;
  views.push(['overview', 'Overview']);
  if (ok) views.push(['graph', 'Architecture'], ['breakdown', 'Breakdown']);
  if (B) views.push(['compare', 'Compare']);
  if (DATA.deployment && ok) views.push(['deployment', 'Deployment']);
  const bar = document.getElementById('tabs');
  for (const [id, label] of views) {
    bar.append(h('button', {
      role: 'tab', id: `tab-${id}`, 'aria-controls': `view-${id}`, 'aria-selected': 'false', tabindex: '-1',
      text: label, onclick: () => show(id, true),
      onkeydown: (ev) => {
        const i = views.findIndex((v) => v[0] === id);
        const d = ev.key === 'ArrowRight' ? 1 : ev.key === 'ArrowLeft' ? -1 : 0;
        if (d) { const n = views[(i + d + views.length) % views.length][0]; show(n, true); document.getElementById(`tab-${n}`).focus(); ev.preventDefault(); }
      },
    }));
  }
}
const rendered = {};
function show(id, push) {
  if (!views.some((v) => v[0] === id)) id = 'overview';
  for (const [v] of views) {
    const sel = v === id;
    document.getElementById(`view-${v}`).hidden = !sel;
    const t = document.getElementById(`tab-${v}`);
    t.setAttribute('aria-selected', String(sel));
    t.tabIndex = sel ? 0 : -1;
  }
  if (!rendered[id]) { rendered[id] = true; RENDER[id](); }
  if (push && location.hash.split('=')[0] !== `#${id}`) history.replaceState(null, '', `#${id}`);
}

// ---------- overview ----------
const FIGURES = [
  ['params_total', 'parameters, total', ''],
  ['params_active', 'parameters active per token (no embedding)', ''],
  ['params_active_with_embedding', 'parameters active, with embedding', ''],
  ['params_mtp', 'parameters in MTP', ''],
  ['weight_bytes', 'weight bytes (the spec)', 'B'],
  ['weight_tensors', 'weight tensors', ''],
  ['kv_bytes_per_token', 'KV bytes per token', 'B'],
  ['kv_window_bytes_per_token', 'windowed KV bytes per token', 'B'],
  ['state_bytes_per_sequence', 'state bytes per sequence', 'B'],
  ['decode_flops_per_token', 'decode FLOPs per token', ''],
  ['prefill_flops', 'prefill FLOPs', ''],
];
function overview(root, m) {
  const ident = h('table', { class: 'figures', id: `identity-${m === M ? 'a' : 'b'}` },
    h('tbody', {},
      h('tr', {}, h('th', { text: 'model type' }), h('td', { 'data-figure': 'model_type', text: m.model_type || '—' })),
      h('tr', {}, h('th', { text: 'architectures' }), h('td', { text: m.architectures.join(', ') })),
      h('tr', {}, h('th', { text: 'spec' }), h('td', {}, h('code', { text: m.spec }))),
      h('tr', {}, h('th', { text: 'validated against' }), h('td', { text: m.truth })),
      h('tr', {}, h('th', { text: 'verdict' }), h('td', { 'data-figure': 'verdict', class: m.verdict.valid ? 'ok' : 'bad',
        text: m.verdict.valid ? (m.verdict.declared_gap ? 'valid with a declared gap' : `valid — every guard passed (${m.verdict.warnings} warnings)`) : `INVALID — ${m.verdict.errors.length} errors` }))));
  root.append(h('h2', { text: 'Model' }), ident);
  if (!m.verdict.valid || !m.figures) return;
  const layers = dimOfKind(m, 'layers');
  const hidden = dimOfKind(m, 'hidden');
  const rows = [];
  if (layers) rows.push(['layers', `layers (${layers.symbol})`, layers.value, '']);
  if (hidden) rows.push(['hidden', `hidden size (${hidden.symbol})`, hidden.value, '']);
  for (const [k, label, unit] of FIGURES) rows.push([k, label, fig(m, k), unit]);
  rows.push(['checkpoint_bytes', 'checkpoint bytes (safetensors headers)', m.checkpoint_bytes, 'B']);
  rows.push(['context_limit', 'context limit (max_position_embeddings)', m.context_limit, '']);
  const t = h('table', { class: 'figures', id: 'figures' }, h('thead', {}, h('tr', {}, h('th', { text: 'figure' }), h('th', { class: 'num', text: 'value' }))),
    h('tbody', {}, rows.map(([k, label, v, unit]) => h('tr', {}, h('th', { text: label }), figureCell(k, v, unit, m)))));
  const reconcile = m.checkpoint_bytes === null ? 'no checkpoint inventory' :
    big(fig(m, 'weight_bytes')) === big(m.checkpoint_bytes) ? 'the spec\'s weight bytes equal the checkpoint\'s, byte for byte' : 'the spec\'s weight bytes differ from the checkpoint\'s';
  const total = big(fig(m, 'weight_bytes'));
  const mix = h('table', { class: 'figures', id: 'precision' }, h('thead', {}, h('tr', {}, h('th', { text: 'dtype' }), h('th', { class: 'num', text: 'bytes' }), h('th', { class: 'num', text: 'share' }))),
    h('tbody', {}, Object.entries(fig(m, 'weight_bytes_by_dtype')).map(([d, b]) => h('tr', {}, h('td', { text: d }), figureCell(`bytes_${d}`, b, 'B', m),
      h('td', { class: 'num', text: total ? `${(Number(big(b) * 10000n / total) / 100).toFixed(2)} %` : '—' })))));
  root.append(h('div', { class: 'grid' },
    h('div', {}, h('h2', { text: 'Figures' }), t, h('p', { class: 'h', text: `FLOPs at ${digits(fig(m, 'context'))} tokens of context; ${reconcile}.` })),
    h('div', {}, h('h2', { text: 'Precision mix' }), mix, groupsTable(m))));
  root.append(h('h2', { text: 'Dims' }), h('table', { class: 'figures', id: 'dims' },
    h('thead', {}, h('tr', {}, ['symbol', 'value', 'kind', 'binds', 'meaning'].map((x) => h('th', { text: x })))),
    h('tbody', {}, m.dims.map((d) => h('tr', {}, h('td', {}, h('code', { text: d.symbol })), h('td', { class: 'num', 'data-dim': d.symbol, text: digits(d.value) }),
      h('td', { text: d.kind }), h('td', {}, h('code', { text: d.binds })), h('td', { text: d.summary }))))));
}
function groupsTable(m) {
  return h('div', {}, h('h2', { text: 'Layer groups' }), h('table', { class: 'figures', id: 'groups' },
    h('thead', {}, h('tr', {}, ['group', 'layers', 'params', 'KV B/token', 'what fills it'].map((x) => h('th', { text: x })))),
    h('tbody', {}, m.groups.map((g) => h('tr', {}, h('td', {}, h('code', { text: g.id })), h('td', { text: `${g.layers} (${g.count})` }),
      figureCell(`group_params:${g.id}`, g.params, '', m), figureCell(`group_kv:${g.id}`, g.kv_bytes_per_token, 'B', m),
      h('td', {}, g.fills.map((f) => h('div', {}, h('b', { text: `${f.slot}: ` }), h('code', { text: f.component }),
        f.dims.length ? h('span', { class: 'h', text: ' ' + f.dims.map(([d, v]) => `${d}=${digits(v)}`).join(', ') }) : null))))))));
}

// ---------- architecture graph ----------
const SCOPES = Object.fromEntries(M.scopes.map((x) => [x.id, x]));
let scopeId = '';
const parentOf = (id) => { if (!id) return ''; const i = id.lastIndexOf('.'); return i < 0 ? '' : id.slice(0, i); };
function crumbs() {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren();
  const parts = [];
  let id = scopeId;
  while (id) { parts.unshift(id); id = parentOf(id); }
  nav.append(h('button', { text: M.spec, onclick: () => openScope('') }));
  for (const p of parts) nav.append(h('span', { class: 'sep', text: ' › ' }), h('button', { text: p.slice(parentOf(p).length).replace(/^\./, ''), onclick: () => openScope(p) }));
}
function details(n) {
  const d = document.getElementById('details');
  d.replaceChildren();
  if (n.kind === 'io') { d.append(h('h3', { text: n.label }), h('p', { class: 'hint', text: 'Where this scope\'s values come from or go to.' })); return; }
  const dl = h('dl', {});
  const row = (k, ...v) => dl.append(h('dt', { text: k }), h('dd', {}, ...v));
  row('kind', n.kind + (n.op ? ` · ${n.op}` : ''));
  if (n.role) row('role', n.role);
  if (n.layers) row('layers', String(n.layers));
  if (n.count !== 1 || n.active !== 1) row('copies', `${digits(n.count)} stored, ${digits(n.active)} per token`);
  if (n.shape) row('output', h('code', { text: n.shape }));
  row('params', h('span', { id: 'detail-params', 'data-value': String(big(n.params)), text: `${digits(n.params)} (${human(n.params, '')})` }), h('code', { class: 'formula', id: 'detail-params-formula', text: n.params_formula }));
  row('FLOPs / token', h('span', { 'data-value': String(big(n.flops)), text: `${digits(n.flops)} at ${digits(M.lens.context)} ctx` }), h('code', { class: 'formula', id: 'detail-flops-formula', text: n.flops_formula }));
  for (const [dt, b] of Object.entries(n.bytes_by_dtype)) row(`bytes ${dt}`, `${digits(b)} (${human(b, 'B')})`);
  for (const c of n.caches) {
    row(`cache ${c.kind}`, h('span', { class: 'cache-bytes', 'data-value': String(big(c.bytes)),
      text: `${digits(c.bytes)} B ${c.growth === 'constant' ? 'per sequence' : 'per token'} (${human(c.bytes, 'B')}), ${c.dtype}, ${c.growth}${c.window ? ` ≤ ${digits(c.window)}` : ''}` }),
      h('code', { class: 'formula', text: c.formula }));
  }
  d.append(h('h3', { text: n.id }), dl);
  if (n.opens) d.append(h('p', { class: 'hint', text: 'Enter or click opens it.' }));
}
function openScope(id, focusId) {
  if (!SCOPES[id]) return;
  scopeId = id;
  crumbs();
  const sc = SCOPES[id];
  const svg = s('svg', { width: sc.width, height: sc.height, viewBox: `0 0 ${sc.width} ${sc.height}`, role: 'group', 'aria-label': `graph of ${id || M.spec}` },
    s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' }, s('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#6b7780' }))));
  for (const e of sc.edges) {
    svg.append(s('g', { class: 'edge', 'data-from': e.from, 'data-to': e.to }, s('path', { d: e.path }), s('text', { x: e.lx + 4, y: e.ly, text: e.label })));
  }
  const W = 210, H = 60;
  const order = sc.nodes.map((n, i) => [n, i]).sort((a, b) => a[0].y - b[0].y || a[0].x - b[0].x).map((x) => x[1]);
  sc.nodes.forEach((n, i) => {
    const sub = n.kind === 'io' ? '' : [n.layers ? `× ${n.layers} layers` : n.op.replace(/^component:/, ''), n.params ? `${human(n.params, '')} params` : ''].filter(Boolean).join(' · ');
    const kv = n.caches.filter((c) => c.growth !== 'constant');
    const g = s('g', {
      class: `node kind-${n.kind}${n.opens ? ' opens' : ''}`, tabindex: '0', role: n.opens ? 'button' : 'img', 'data-id': n.id,
      'aria-label': `${n.id}: ${n.kind}${n.op ? ' ' + n.op : ''}, ${digits(n.params)} parameters${n.opens ? ', press Enter to open' : ''}`,
      transform: `translate(${n.x},${n.y})`,
    }, s('title', { text: `${n.id}\nparams = ${n.params_formula}\nFLOPs = ${n.flops_formula}` }),
    s('rect', { width: W, height: H, rx: '6' }),
    s('text', { x: '10', y: '20', 'font-weight': '600', text: n.label.length > 28 ? n.label.slice(0, 27) + '…' : n.label }),
    s('text', { x: '10', y: '37', class: 'sub', text: sub }),
    kv.length ? s('text', { x: '10', y: '53', class: 'cache', text: `cache ${human(kv.reduce((a, c) => a + big(c.bytes), 0n), 'B')}/token` }) : null);
    const go = () => { if (n.opens && SCOPES[n.id]) openScope(n.id); };
    g.addEventListener('mouseenter', () => details(n));
    g.addEventListener('focus', () => details(n));
    g.addEventListener('click', go);
    g.addEventListener('keydown', (ev) => {
      const k = order.indexOf(i);
      const move = (d) => { const j = order[(k + d + order.length) % order.length]; svg.querySelectorAll('.node')[j].focus(); };
      if (ev.key === 'Enter' || ev.key === ' ') { go(); ev.preventDefault(); }
      else if (ev.key === 'ArrowDown' || ev.key === 'ArrowRight') { move(1); ev.preventDefault(); }
      else if (ev.key === 'ArrowUp' || ev.key === 'ArrowLeft') { move(-1); ev.preventDefault(); }
      else if (ev.key === 'Escape' || ev.key === 'Backspace') { if (scopeId) openScope(parentOf(scopeId), scopeId); ev.preventDefault(); }
    });
    svg.append(g);
  });
  const box = document.getElementById('graph');
  box.replaceChildren(svg);
  const first = (focusId && svg.querySelector(`.node[data-id="${CSS.escape(focusId)}"]`)) || svg.querySelector('.node:not(.kind-io)') || svg.querySelector('.node');
  if (first) { first.classList.add('current'); if (document.activeElement && document.activeElement.closest && document.activeElement.closest('#view-graph')) first.focus(); details(sc.nodes[[...svg.querySelectorAll('.node')].indexOf(first)]); }
  if (location.hash.startsWith('#graph')) history.replaceState(null, '', id ? `#graph=${encodeURIComponent(id)}` : '#graph');
}
function graphView() {
  const m = /^#graph=(.+)$/.exec(location.hash);
  openScope(m && SCOPES[decodeURIComponent(m[1])] ? decodeURIComponent(m[1]) : '');
}

// ---------- breakdown: table, treemap, cost lens ----------
function leaves() {
  // The top level, each node that opens replaced by what it holds (one level down).
  const out = [];
  for (const n of SCOPES[''].nodes) {
    if (n.kind === 'io') continue;
    const inner = n.opens && SCOPES[n.id] ? SCOPES[n.id].nodes.filter((x) => x.kind !== 'io') : [];
    if (inner.length) out.push(...inner.map((x) => ({ n: x, parent: n }))); else out.push({ n, parent: null });
  }
  return out;
}
function breakdown() {
  const root = document.getElementById('view-breakdown');
  const dtypes = Object.keys(fig(M, 'weight_bytes_by_dtype'));
  const total = big(fig(M, 'params_total')) || 1n;
  const rows = [];
  for (const n of SCOPES[''].nodes) {
    if (n.kind === 'io') continue;
    rows.push([n, 0]);
    if (n.opens && SCOPES[n.id]) for (const c of SCOPES[n.id].nodes) if (c.kind !== 'io') rows.push([c, 1]);
  }
  const cell = (n) => h('td', { class: 'num', tabindex: '0', 'data-figure': `params:${n.id}`, 'data-value': String(big(n.params)), title: `params = ${n.params_formula}`, text: digits(n.params) });
  const table = [h('h2', { text: 'Parameters and bytes per group and component, by dtype' }),
    h('table', { class: 'figures', id: 'breakdown-table' },
      h('thead', {}, h('tr', {}, h('th', { text: 'node' }), h('th', { class: 'num', text: 'params' }), h('th', { class: 'num', text: 'share' }), dtypes.map((d) => h('th', { class: 'num', text: `bytes ${d}` })))),
      h('tbody', {}, rows.map(([n, depth]) => h('tr', {},
        h('td', { style: `padding-left:${10 + depth * 22}px` }, h('code', { text: depth ? n.label : n.id }), n.layers ? h('span', { class: 'h', text: ` × ${n.layers}` }) : null),
        cell(n), h('td', { class: 'num', text: `${(Number(big(n.params) * 10000n / total) / 100).toFixed(2)} %` }),
        dtypes.map((d) => h('td', { class: 'num', text: n.bytes_by_dtype[d] ? digits(n.bytes_by_dtype[d]) : '' })))),
      h('tr', {}, h('th', { text: 'whole checkpoint' }), figureCell('params_total', fig(M, 'params_total'), ''), h('td', {}),
        dtypes.map((d) => figureCell(`bytes_${d}`, fig(M, 'weight_bytes_by_dtype')[d], 'B')))))];
  // The cost lens.
  const L = M.lens;
  const env = (ctx) => Object.assign({}, M.bindings, { ctx: BigInt(ctx) });
  const slider = h('input', { type: 'range', id: 'ctx-slider', min: '1', max: String(L.max_context), value: String(L.context), 'aria-label': 'context length in tokens' });
  const num = h('input', { type: 'number', id: 'ctx-input', min: '1', max: String(L.max_context), value: String(L.context), 'aria-label': 'context length in tokens' });
  const metric = h('select', { id: 'lens-metric', 'aria-label': 'treemap metric' }, h('option', { value: 'params', text: 'parameters' }), h('option', { value: 'flops', text: 'FLOPs per token at the context' }), h('option', { value: 'kv', text: 'KV cache at the context' }));
  const out = {
    params: h('td', { class: 'num', id: 'lens-params' }), flops: h('td', { class: 'num', id: 'lens-flops' }), kv: h('td', { class: 'num', id: 'lens-kv' }),
  };
  const partRows = L.parts.map((p) => ({ p, flops: h('td', { class: 'num' }), kv: h('td', { class: 'num' }) }));
  const map = h('div', { class: 'treemap', id: 'treemap' });
  root.append(h('h2', { text: 'Cost lens' }),
    h('div', { class: 'lens' }, h('label', {}, 'context ', slider), h('label', {}, 'tokens ', num), h('label', {}, 'treemap by ', metric)),
    h('div', { class: 'grid' },
      h('div', {}, h('table', { class: 'figures', id: 'lens' }, h('tbody', {},
        h('tr', {}, h('th', { text: 'parameters' }), out.params),
        h('tr', {}, h('th', { text: 'FLOPs of one decode step' }), out.flops),
        h('tr', {}, h('th', { text: 'KV cache of one sequence' }), out.kv))),
      h('details', {}, h('summary', { text: 'the formulas the slider evaluates' }),
        h('p', { class: 'h', text: 'KV bytes =' }), h('code', { class: 'formula', id: 'kv-formula', text: L.total.kv_formula }),
        h('p', { class: 'h', text: 'FLOPs =' }), h('code', { class: 'formula', text: L.total.flops_formula }))),
      h('table', { class: 'figures', id: 'lens-parts' }, h('thead', {}, h('tr', {}, ['part', 'FLOPs / token', 'KV bytes'].map((x) => h('th', { text: x })))),
        h('tbody', {}, partRows.map((r) => h('tr', {}, h('td', {}, h('code', { text: r.p.id })), r.flops, r.kv))))),
    h('h2', { text: 'Treemap' }), map, ...table);
  const setNum = (td, v, unit) => { td.dataset.value = String(v); td.replaceChildren(digits(v), ' ', h('span', { class: 'h', text: `(${human(v, unit)})` })); };
  function update(ctx) {
    ctx = Math.max(1, Math.min(Number(L.max_context), Math.round(Number(ctx) || 1)));
    slider.value = String(ctx); num.value = String(ctx);
    const e = env(ctx);
    setNum(out.params, big(L.total.params), '');
    setNum(out.flops, evalFormula(L.total.flops_formula, e), '');
    setNum(out.kv, evalFormula(L.total.kv_formula, e), 'B');
    out.kv.dataset.context = String(ctx);
    for (const r of partRows) { setNum(r.flops, evalFormula(r.p.flops_formula, e), ''); setNum(r.kv, evalFormula(r.p.kv_formula, e), 'B'); }
    treemap(map, metric.value, e);
  }
  slider.addEventListener('input', () => update(slider.value));
  num.addEventListener('change', () => { if (num.value !== '') update(num.value); });
  metric.addEventListener('change', () => update(slider.value));
  update(L.context);
}
// Squarified treemap (Bruls et al.) of weighted items in a w×h box.
function squarify(items, x, y, w, h) {
  const total = items.reduce((a, b) => a + b.v, 0);
  const out = [];
  if (!total) return out;
  let rest = items.filter((i) => i.v > 0).sort((a, b) => b.v - a.v).map((i) => ({ ...i, a: (i.v / total) * w * h }));
  while (rest.length) {
    const short = Math.min(w, h);
    let row = [rest[0]], worst = Infinity;
    const ratio = (r) => { const s = r.reduce((a, b) => a + b.a, 0); const mx = Math.max(...r.map((i) => i.a)), mn = Math.min(...r.map((i) => i.a)); return Math.max((short * short * mx) / (s * s), (s * s) / (short * short * mn)); };
    worst = ratio(row);
    for (let k = 1; k < rest.length; k++) { const cand = rest.slice(0, k + 1); const r = ratio(cand); if (r > worst) break; row = cand; worst = r; }
    const s = row.reduce((a, b) => a + b.a, 0);
    const thick = s / short;
    let off = 0;
    for (const i of row) {
      const len = i.a / thick;
      out.push(w >= h ? { ...i, x, y: y + off, w: thick, h: len } : { ...i, x: x + off, y, w: len, h: thick });
      off += len;
    }
    if (w >= h) { x += thick; w -= thick; } else { y += thick; h -= thick; }
    rest = rest.slice(row.length);
  }
  return out;
}
const COLORS = ['#9ecae1', '#a1d99b', '#fdae6b', '#bcbddc', '#fdd0a2', '#c7e9c0', '#c6dbef', '#dadaeb', '#fcbba1', '#d9d9d9'];
function treemap(box, metric, env) {
  const W = 900, H = 380;
  const items = metric === 'params'
    ? leaves().map(({ n, parent }) => ({ id: n.id, label: parent ? `${parent.label} › ${n.label}` : n.label, v: Number(big(n.params)), group: parent ? parent.id : n.id }))
    : M.lens.parts.map((p) => ({ id: p.id, label: p.id, v: Number(evalFormula(metric === 'kv' ? p.kv_formula : p.flops_formula, env)), group: p.id }));
  const groups = [...new Set(items.map((i) => i.group))];
  const svg = s('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `treemap of ${metric}` });
  for (const r of squarify(items, 0, 0, W, H)) {
    svg.append(s('g', { 'data-id': r.id }, s('title', { text: `${r.id}: ${digits(Math.round(r.v))}` }),
      s('rect', { x: r.x, y: r.y, width: Math.max(0, r.w), height: Math.max(0, r.h), fill: COLORS[groups.indexOf(r.group) % COLORS.length] }),
      r.w > 60 && r.h > 16 ? s('text', { x: r.x + 4, y: r.y + 13, text: r.label.slice(0, Math.floor(r.w / 6.5)) }) : null));
  }
  box.replaceChildren(svg);
}

// ---------- compare ----------
function compare() {
  const root = document.getElementById('view-compare');
  const both = [M, B];
  const row = (label, key, unit, get) => h('tr', {}, h('th', { text: label }), both.map((m, i) => {
    const v = get(m);
    const td = figureCell(key, v, unit, m); td.dataset.model = i ? 'b' : 'a'; return td;
  }));
  const rows = [];
  for (const [k, label, unit] of FIGURES) rows.push(row(label, k, unit, (m) => (m.verdict.valid ? fig(m, k) : null)));
  rows.push(row('context limit', 'context_limit', '', (m) => m.context_limit));
  root.append(h('h2', { text: 'Side by side' }),
    h('table', { class: 'figures', id: 'compare-figures' }, h('thead', {}, h('tr', {}, h('th', {}), both.map((m, i) => h('th', { class: 'num', 'data-model': i ? 'b' : 'a', text: m.title })))), h('tbody', {}, rows)));
  const n = Math.max(M.groups.length, B.groups.length);
  const cell = (m, g) => (g ? h('td', {}, h('code', { text: g.id }), ` × ${g.count} · ${human(g.params, '')} params · KV ${digits(g.kv_bytes_per_token)} B/token`,
    h('div', { class: 'h', text: g.fills.map((f) => `${f.slot}: ${f.component}`).join(' · ') })) : h('td', { text: '—' }));
  const grows = [];
  for (let i = 0; i < n; i++) grows.push(h('tr', {}, cell(M, M.groups[i]), cell(B, B.groups[i])));
  root.append(h('h2', { text: 'Block by block' }), h('table', { class: 'figures', id: 'compare-blocks' },
    h('thead', {}, h('tr', {}, both.map((m) => h('th', { text: m.title })))), h('tbody', {}, grows)));
  const syms = [...new Set([...M.dims, ...B.dims].map((d) => d.symbol))];
  root.append(h('h2', { text: 'Dims' }), h('table', { class: 'figures' }, h('thead', {}, h('tr', {}, h('th', { text: 'symbol' }), both.map((m) => h('th', { class: 'num', text: m.title })))),
    h('tbody', {}, syms.map((sy) => h('tr', {}, h('td', {}, h('code', { text: sy })), both.map((m) => { const d = m.dims.find((x) => x.symbol === sy); return h('td', { class: 'num', text: d ? digits(d.value) : '—' }); }))))));
}

// ---------- deployment ----------
function deployment() {
  const root = document.getElementById('view-deployment');
  const { sweep, ...r } = DATA.deployment;
  const rows = [];
  const walk = (o, prefix, depth) => {
    for (const [k, v] of Object.entries(o)) {
      const key = prefix ? `${prefix}.${k}` : k;
      if (v !== null && typeof v === 'object' && !Array.isArray(v) && depth < 1) walk(v, key, depth + 1);
      else if (v === null || typeof v !== 'object') rows.push([key, v]);
    }
  };
  walk(r, '', 0);
  root.append(h('h2', { text: 'Deployment (harch-worker analyze)' }),
    h('table', { class: 'figures', id: 'deployment-figures' }, h('tbody', {}, rows.map(([k, v]) => h('tr', {}, h('th', {}, h('code', { text: k })),
      h('td', { class: 'num', text: typeof v === 'number' || (typeof v === 'string' && /^-?\d+$/.test(v)) ? (Number.isInteger(Number(v)) ? digits(v) : String(v)) : String(v) }))))));
  if (sweep && sweep.svg) {
    // The plot analyze --sweep --svg draws, as an image: an SVG in <img> runs no script.
    root.append(h('h3', { text: `Sweep ${sweep.spec}` }),
      h('img', { id: 'deployment-sweep', class: 'sweep', alt: `analyze sweep ${sweep.spec}`, src: 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(sweep.svg) }));
  }
}

const RENDER = {
  overview: () => { const root = document.getElementById('view-overview'); overview(root, M); },
  graph: graphView,
  breakdown,
  compare,
  deployment,
};

header();
tabs();
show((location.hash.slice(1).split('=')[0]) || 'overview', false);
document.documentElement.dataset.ready = 'true';

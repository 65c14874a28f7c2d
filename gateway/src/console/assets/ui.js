// Small DOM helpers. Everything is built with h(): text is always text, never markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

export function render(target, ...children) {
  target.replaceChildren();
  append(target, children);
}

// A state or status as a coloured badge that also says it in words.
export function badge(text, kind = text) {
  return h('span', { class: `badge ${kind}` }, text);
}

const UNITS = [
  ['year', 365 * 24 * 3600], ['month', 30 * 24 * 3600], ['day', 24 * 3600],
  ['h', 3600], ['min', 60], ['s', 1],
];

// "3 min ago", with the exact time on hover (and for screen readers, in datetime).
export function ago(iso) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  const then = new Date(iso);
  const seconds = Math.round((Date.now() - then.getTime()) / 1000);
  const abs = Math.abs(seconds);
  let text = 'just now';
  for (const [unit, size] of UNITS) {
    if (abs >= size && abs >= 5) {
      const n = Math.floor(abs / size);
      const label = unit.length > 3 ? `${n} ${unit}${n === 1 ? '' : 's'}` : `${n} ${unit}`;
      text = seconds >= 0 ? `${label} ago` : `in ${label}`;
      break;
    }
  }
  return h('time', { datetime: iso, title: then.toISOString().replace('T', ' ').replace('.000Z', ' UTC') }, text);
}

export function table(headers, rows, empty = 'Nothing here yet.') {
  if (!rows.length) return h('p', { class: 'muted' }, empty);
  return h('div', { class: 'table-wrap' },
    h('table', {},
      h('thead', {}, h('tr', {}, headers.map((c) => (typeof c === 'string' ? h('th', {}, c) : h('th', c.attrs, c.text))))),
      h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((c) => (c instanceof Cell ? h('td', c.attrs, c.value) : h('td', {}, c))))))));
}

// A table cell with attributes: cell(value, { class: 'num' }). Told apart from a plain value
// by its class, not by its value's truth: an empty cell is still a cell.
class Cell {
  constructor(value, attrs) {
    this.value = value;
    this.attrs = attrs;
  }
}
export const cell = (value, attrs) => new Cell(value, attrs);

// A count with the reader's digit grouping: 12,345 (or 12.345, 12 345).
const COUNT = new Intl.NumberFormat();
export function count(n) {
  return COUNT.format(n);
}

export function notice(text, kind = '') {
  return h('div', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

// An API error as a notice: its message, and each invalid field.
export function errorNotice(error) {
  const problems = (error.problems || []).map((p) => h('li', {}, p.path ? `${p.path}: ${p.reason}` : p.reason));
  return h('div', { class: 'notice error', role: 'alert' },
    h('strong', {}, error.code ? `${error.code}: ` : ''), error.message,
    problems.length ? h('ul', {}, problems) : null);
}

export function field(label, input) {
  return h('label', {}, label, input);
}

// A bar chart per bucket: deliveries that succeeded and attempts that failed, stacked, with a
// time axis. Failed attempts, so that an outage stays red after its deliveries were recovered.
export function activityChart(buckets, label) {
  const width = 720; const height = 160; const pad = 22;
  const max = Math.max(1, ...buckets.map((b) => b.succeeded + b.failed_attempts));
  const barW = (width - pad) / buckets.length;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('role', 'img');
  const total = buckets.reduce((n, b) => n + b.succeeded, 0);
  const failed = buckets.reduce((n, b) => n + b.failed_attempts, 0);
  svg.setAttribute('aria-label', `${label}: ${count(total)} delivered, ${count(failed)} failed attempts`);
  const scale = (n) => (n / max) * (height - pad - 8);
  buckets.forEach((b, i) => {
    const x = pad + i * barW;
    const okH = scale(b.succeeded);
    const badH = scale(b.failed_attempts);
    for (const [cls, y, hgt] of [['ok', height - pad - okH, okH], ['bad', height - pad - okH - badH, badH]]) {
      if (hgt <= 0) continue;
      const r = document.createElementNS(ns, 'rect');
      r.setAttribute('class', cls);
      r.setAttribute('x', x + 1); r.setAttribute('y', y);
      r.setAttribute('width', Math.max(1, barW - 2)); r.setAttribute('height', hgt);
      const t = document.createElementNS(ns, 'title');
      t.textContent = `${new Date(b.at).toISOString().slice(11, 16)} UTC: ${count(b.succeeded)} delivered, ${count(b.failed_attempts)} failed attempts, ${count(b.failed)} deliveries ended failed`;
      r.append(t);
      svg.append(r);
    }
  });
  for (const [text, x] of [[count(max), 0], ['0', 0]]) {
    const t = document.createElementNS(ns, 'text');
    t.setAttribute('x', x); t.setAttribute('y', text === '0' ? height - pad : 12);
    t.textContent = text;
    svg.append(t);
  }
  for (const [i, anchor] of [[0, 'start'], [Math.floor(buckets.length / 2), 'middle'], [buckets.length - 1, 'end']]) {
    const t = document.createElementNS(ns, 'text');
    t.setAttribute('x', anchor === 'end' ? width : pad + i * barW); t.setAttribute('y', height - 6);
    t.setAttribute('text-anchor', anchor);
    t.textContent = new Date(buckets[i].at).toISOString().slice(11, 16);
    svg.append(t);
  }
  return svg;
}

// A datetime-local input's value as RFC 3339 (UTC); '' stays ''.
export function toRfc3339(local) {
  return local ? new Date(local).toISOString() : '';
}

// An RFC 3339 time as a datetime-local input's value, in the browser's zone.
export function toLocalInput(iso) {
  const d = new Date(iso);
  const off = d.getTimezoneOffset() * 60000;
  return new Date(d.getTime() - off).toISOString().slice(0, 16);
}

// A secret shown once, with a copy button.
export function secretBox(secret) {
  const code = h('code', { 'data-secret': '' }, secret);
  return h('div', { class: 'notice ok', role: 'status' },
    h('p', {}, h('strong', {}, 'Signing secret — shown only now. '), 'Give it to the receiver; it verifies every webhook with it.'),
    h('div', { class: 'secret' }, code,
      h('button', { type: 'button', onclick: () => navigator.clipboard && navigator.clipboard.writeText(secret) }, 'Copy')));
}

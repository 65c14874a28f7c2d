// Policies (each schedule as a chart) and plugins (versions, files that failed to load, and
// how the last config reload went).

import { get, seg } from '../api.js';
import { ago, badge, count, errorNotice, h, notice, render, table } from '../ui.js';

export async function policiesView(main) {
  const { policies } = await get('/v1/policies');
  const sections = await Promise.all(policies.map(async (name) => {
    const [preview, svg] = await Promise.all([
      get(`/v1/policies/${seg(name)}/preview`),
      get(`/v1/policies/${seg(name)}/chart.svg`),
    ]);
    return h('section', { class: 'card' },
      h('h2', {}, name),
      h('p', { class: 'muted' }, `${count(preview.attempts.length)} attempts`,
        preview.deadline_s ? `, given up after ${Math.round(preview.deadline_s / 3600)} h` : '',
        preview.jitter ? `, ±${Math.round(preview.jitter * 100)} % jitter` : ''),
      chart(svg, name));
  }));
  render(main, h('h1', {}, 'Retry policies'), sections);
}

// The gateway's own SVG chart, parsed as SVG (never as HTML) and checked to hold no script.
function chart(text, name) {
  const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
  const svg = doc.documentElement;
  if (svg.nodeName !== 'svg' || svg.querySelector('script, foreignObject')) return h('p', { class: 'muted' }, 'No chart.');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `The schedule of ${name}`);
  return h('div', { class: 'svg-chart' }, document.importNode(svg, true));
}

export async function pluginsView(main) {
  const [plugins, status] = await Promise.all([get('/v1/plugins'), get('/v1/status')]);
  const reload = status.last_reload;
  render(main,
    h('h1', {}, 'Plugins'),
    h('p', { class: 'muted' }, `Loaded from ${plugins.dir}; files dropped there load without a restart.`),
    table(['Plugin', 'Kind', 'Version', 'Size', 'Loaded'], plugins.plugins.map((p) => [
      p.name, badge(p.world, 'tenant'), h('span', { class: 'mono', title: p.sha256 }, p.sha256.slice(0, 12)),
      `${count(Math.round(p.size_bytes / 1024))} KiB`, ago(p.loaded_at),
    ]), 'No plugins loaded.'),
    h('h2', {}, 'Files that failed to load'),
    plugins.rejected.length
      ? plugins.rejected.map((r) => notice(`${r.name} (${r.sha256.slice(0, 12)}): ${r.error}`, 'error'))
      : h('p', { class: 'muted' }, 'None.'),
    h('h2', {}, 'Config'),
    reload
      ? (reload.ok ? notice(`The last reload applied.`, 'ok') : errorNotice({ code: 'reload_refused', message: 'The last reload was refused; the running config stays.', problems: (reload.errors || []).map((e) => ({ path: '', reason: e })) }))
      : h('p', { class: 'muted' }, 'Not reloaded since the start.'),
    (status.problems || []).map((p) => notice(p, 'error')));
}

// One endpoint: settings (never secrets), its content filter (tried on its recent events as
// it is edited), health history, recent deliveries, and the recovery actions: test,
// re-enable (with replay), replay a window (count shown first), redrive, rotate the secret,
// edit and delete.

import { del, get, patch, post, query, seg } from '../api.js';
import { ago, badge, count, errorNotice, field, h, notice, render, secretBox, table, toLocalInput, toRfc3339 } from '../ui.js';

// A message for the next rendering of the page (an action that changed the endpoint renders
// it again, then says how it went).
let flash = null;

export async function endpointView(main, { args, refresh }) {
  const name = args[0];
  const path = `/v1/endpoints/${seg(name)}`;
  const [ep, recent] = await Promise.all([
    get(path),
    get(`/v1/deliveries${query({ endpoint: name, limit: 20 })}`),
  ]);
  const output = h('div', { id: 'action-output', 'aria-live': 'polite' }, flash);
  flash = null;
  const changed = async (message) => {
    flash = message;
    await refresh();
  };
  const show = (...nodes) => render(output, ...nodes);
  const failing = (fn) => async (event) => {
    if (event) event.preventDefault();
    try {
      await fn();
    } catch (error) {
      show(errorNotice(error));
    }
  };

  const test = h('button', { type: 'button', id: 'test', onclick: failing(async () => {
    show(notice('Sending a test event…'));
    const r = await post(`${path}/test`, {});
    show(notice(r.delivered
      ? (r.answer
        ? `Delivered to ${r.target} in ${count(r.duration_ms)} ms. ${r.answer}`
        : `Delivered: ${r.status_code} in ${count(r.duration_ms)} ms.`)
      : `Not delivered: ${r.error_kind || r.dropped || 'failed'}${r.status_code ? ` (${r.status_code})` : ''}${r.error ? ` — ${r.error}` : ''}`,
    r.delivered ? 'ok' : 'error'));
  }) }, 'Send test event');

  const actions = [test];
  if (ep.state === 'paused' || ep.state === 'disabled') actions.push(reenableForm(path, ep, changed, failing));
  actions.push(replayForm(path, show, failing));
  if (ep.dead_letter) {
    actions.push(h('button', { type: 'button', id: 'redrive', onclick: failing(async () => {
      const r = await post(`${path}/redrive`);
      show(notice(`${count(r.queued)} dead deliveries queued again.`, 'ok'));
    }) }, 'Redrive dead letters'));
  }
  if (ep.source === 'api') {
    actions.push(
      h('button', { type: 'button', id: 'rotate', onclick: failing(async () => {
        const r = await post(`${path}/secret/rotate`, {});
        await changed([secretBox(r.secret), notice('The old secret keeps signing for 24 hours beside the new one.')]);
      }) }, 'Rotate secret'),
      h('a', { class: 'button', href: `#/endpoints/${seg(name)}/edit`, id: 'edit' }, 'Edit'),
      h('button', { type: 'button', class: 'danger', id: 'delete', onclick: failing(async () => {
        if (!window.confirm(`Delete ${name}? Its waiting deliveries end as failed.`)) return;
        await del(path);
        location.hash = '#/endpoints';
      }) }, 'Delete'));
  }

  render(main,
    h('h1', {}, ep.name, ' ', badge(ep.state)),
    ep.ordered ? h('nav', { class: 'tabs' },
      h('a', { href: `#/endpoints/${seg(name)}`, 'aria-current': 'page' }, 'Endpoint'),
      h('a', { href: `#/endpoints/${seg(name)}/ordering`, id: 'ordering-tab' }, 'Ordering')) : null,
    ep.description ? h('p', { class: 'muted' }, ep.description) : null,
    ep.problems.map((p) => notice(p, 'error')),
    h('div', { class: 'actions' }, actions.filter((a) => a.tagName !== 'FORM')),
    output,
    actions.filter((a) => a.tagName === 'FORM'),
    h('section', { class: 'card' }, h('h2', {}, 'Settings'), settings(ep)),
    filterForm(path, ep, changed, failing),
    h('section', { class: 'card' }, h('h2', {}, 'Health history'), timeline(ep)),
    h('section', {}, h('h2', {}, 'Recent deliveries'),
      table(['Delivery', 'Event type', 'Status', 'Attempts', 'Updated'], recent.deliveries.map((d) => [
        h('a', { href: `#/deliveries/${seg(d.id)}` }, d.id), d.event_type, badge(d.status), count(d.attempt_count), ago(d.updated_at),
      ]), 'No deliveries yet.'),
      h('p', {}, h('a', { href: `#/deliveries${query({ endpoint: name })}` }, 'The whole log of this endpoint'))));
}

function settings(ep) {
  const rows = [
    ['URL', h('span', { class: 'mono' }, ep.url)],
    ['Kind', ep.target ? `${ep.kind}: ${ep.target}` : ep.kind],
    ['Source', badge(ep.source)],
    ['Tenant', ep.tenant || 'none (every tenant’s events)'],
    ['Topics', ep.topics.join(', ')],
    ['Event types', ep.types.length ? ep.types.join(', ') : 'all'],
    ['Policy', policy(ep)],
    ['Consecutive failures', count(ep.consecutive_failures)],
    ['Failing since', ago(ep.failing_since)],
    ['Last success', ago(ep.last_success_at)],
    ['Signature', `${ep.signature} (${ep.signing_secrets} signing secret${ep.signing_secrets === 1 ? '' : 's'})`],
    ['Ordered', ep.ordered ? `yes (a key whose head finally fails: ${ep.on_final_failure})` : 'no'],
    ['Dead letters', ep.dead_letter ? 'kept for redrive' : 'no'],
    ['Content filter', ep.filter ? 'yes (below)' : 'none (every event of its topics)'],
  ];
  if (ep.previous_secret_until) rows.push(['Previous secret signs until', ago(ep.previous_secret_until)]);
  if (ep.max_per_second) rows.push(['Rate', `${ep.max_per_second}/s`]);
  if (ep.auth) rows.push(['Outbound auth', ep.auth]);
  for (const role of ['transform', 'signer', 'backoff']) if (ep[role]) rows.push([role, ep[role]]);
  return h('dl', { class: 'settings' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// Its own policy, or each topic's when they differ: "orders: fast, users: standard".
function policy(ep) {
  if (ep.policy) return ep.policy;
  const each = Object.entries(ep.topic_policies || {});
  const names = new Set(each.map(([, p]) => p));
  if (names.size === 1) return `${[...names][0]} (the topic${each.length === 1 ? '’s' : 's’'})`;
  return `${each.map(([t, p]) => `${t}: ${p}`).join(', ')} (the topics’)`;
}

function timeline(ep) {
  if (!ep.history.length) return h('p', { class: 'muted' }, 'Active since it was added; no state changes yet.');
  return h('ol', { class: 'timeline' }, [...ep.history].reverse().map((entry) => h('li', {},
    badge(entry.state), ' ', ago(entry.at), h('div', { class: 'muted' }, entry.reason))));
}

function reenableForm(path, ep, changed, failing) {
  const since = h('input', { type: 'datetime-local', id: 'replay-since',
    value: ep.last_success_at ? toLocalInput(ep.last_success_at) : '' });
  return h('form', { class: 'card', id: 'reenable-form', onsubmit: failing(async () => {
    const body = since.value ? { replay_since: toRfc3339(since.value) } : {};
    const r = await post(`${path}/reenable`, body);
    await changed(notice(`Active again; ${count(r.replayed)} missed events queued.`, 'ok'));
  }) },
  h('h2', {}, 'Re-enable'),
  h('p', { class: 'muted' }, 'The endpoint receives events again. Missed events since the time below are sent again (leave it empty to send none).'),
  h('div', { class: 'row' }, field('Replay events since', since),
    h('button', { class: 'primary', type: 'submit', id: 'reenable' }, 'Re-enable')));
}

function replayForm(path, show, failing) {
  const hourAgo = new Date(Date.now() - 3600 * 1000).toISOString();
  const since = h('input', { type: 'datetime-local', id: 'window-since', value: toLocalInput(hourAgo), required: true });
  const until = h('input', { type: 'datetime-local', id: 'window-until' });
  const send = h('button', { type: 'button', class: 'primary', id: 'replay-send', disabled: true }, 'Send');
  const counted = h('span', { class: 'muted', id: 'replay-count' });
  let checked = null;
  const chosen = () => ({ since: toRfc3339(since.value), until: toRfc3339(until.value) });
  for (const input of [since, until]) input.addEventListener('change', () => { send.disabled = true; counted.textContent = ''; });
  send.addEventListener('click', failing(async () => {
    const r = await post(`${path}/replay`, checked, { 'Idempotency-Key': crypto.randomUUID() });
    send.disabled = true;
    show(notice(`${count(r.queued)} events queued again${r.continue_from ? `; more from ${r.continue_from}` : ''}.`, 'ok'));
  }));
  return h('form', { class: 'card', id: 'replay-form', onsubmit: failing(async () => {
    checked = Object.fromEntries(Object.entries(chosen()).filter(([, v]) => v));
    const r = await get(`${path}/replay/preview${query(checked)}`);
    counted.textContent = `${count(r.events)} events in this window${r.continue_from ? ' (more than one replay sends)' : ''}.`;
    send.textContent = `Send ${count(r.events)} events`;
    send.disabled = r.events === 0;
  }) },
  h('h2', {}, 'Replay a window'),
  h('div', { class: 'row' }, field('Since', since), field('Until (empty: now)', until),
    h('button', { type: 'submit', id: 'replay-count-button' }, 'Count events'), send),
  h('p', {}, counted));
}

// How long typing pauses before the filter being edited is tried.
const FILTER_PAUSE_MS = 300;

// The content filter as JSON, tried on the endpoint's last 100 events at every pause in typing
// (the count says how many it would have let through); an API endpoint's is saved from here,
// a config file's only tried.
function filterForm(path, ep, changed, failing) {
  const text = h('textarea', { id: 'filter', rows: 6, spellcheck: 'false', class: 'mono filter',
    'aria-label': 'Content filter (JSON)', placeholder: '{"payload.amount": {"$gte": 100}}' },
  ep.filter ? JSON.stringify(ep.filter, null, 2) : '');
  const counted = h('p', { id: 'filter-count', 'aria-live': 'polite' });
  const problems = h('div', { id: 'filter-problems' });
  const candidate = () => (text.value.trim() ? JSON.parse(text.value) : {});
  let asked = 0;
  const tryIt = async () => {
    const mine = ++asked;
    let filter;
    try {
      filter = candidate();
    } catch (error) {
      counted.textContent = '';
      render(problems, notice(`Not JSON yet: ${error.message}`, 'error'));
      return;
    }
    try {
      const r = await post(`${path}/filter/test`, { filter, recent: 100 });
      if (mine !== asked) return;
      render(problems);
      counted.textContent = r.recent.events
        ? `Lets through ${count(r.recent.matched)} of the endpoint’s last ${count(r.recent.events)} events.`
        : 'The endpoint has no recent events to try it on.';
    } catch (error) {
      if (mine !== asked) return;
      counted.textContent = '';
      render(problems, errorNotice(error));
    }
  };
  let timer = null;
  text.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(tryIt, FILTER_PAUSE_MS);
  });
  tryIt();
  const editable = ep.source === 'api';
  return h('form', { class: 'card', id: 'filter-form', onsubmit: failing(async () => {
    const filter = candidate();
    await patch(path, { filter: Object.keys(filter).length ? filter : null });
    await changed(notice('Content filter saved.', 'ok'));
  }) },
  h('h2', {}, 'Content filter'),
  h('p', { class: 'muted' }, 'Only the events it lets through reach the endpoint: Convoy’s and Outpost’s operators on type, tenant, payload and headers. Empty: every event.',
    editable ? '' : ' Declared in the config file: try a change here, make it in the file.'),
  text, counted, problems,
  editable ? h('button', { class: 'primary', type: 'submit', id: 'save-filter' }, 'Save filter') : null);
}

// The delivery log (filters, cursor paging) and one delivery with its body and its attempts:
// status, error, duration, the request headers sent and the response; redeliver.

import { get, post, query, seg } from '../api.js';
import { ago, badge, cell, count, errorNotice, field, h, notice, render, table, toLocalInput, toRfc3339 } from '../ui.js';

const STATUSES = ['pending', 'delivering', 'succeeded', 'failed', 'dead'];
const PAGE = 50;

export async function deliveriesView(main, { params }) {
  const filters = {
    status: params.get('status') || '',
    endpoint: params.get('endpoint') || '',
    event_type: params.get('event_type') || '',
    since: params.get('since') || '',
    until: params.get('until') || '',
  };
  const cursor = params.get('cursor') || '';
  // The endpoint filter suggests the first names; any name can be typed.
  const [page, endpoints] = await Promise.all([
    get(`/v1/deliveries${query({ ...filters, cursor, limit: PAGE })}`),
    get('/v1/endpoints?limit=100'),
  ]);
  const status = h('select', { name: 'status', id: 'filter-status' }, h('option', { value: '' }, 'any'),
    STATUSES.map((s) => h('option', { value: s, selected: s === filters.status }, s)));
  const endpoint = h('input', { name: 'endpoint', id: 'filter-endpoint', list: 'endpoint-names', value: filters.endpoint, placeholder: 'any' });
  const endpointNames = h('datalist', { id: 'endpoint-names' },
    endpoints.endpoints.map((e) => h('option', { value: e.name })));
  const eventType = h('input', { name: 'event_type', id: 'filter-type', value: filters.event_type, placeholder: 'order.created' });
  const since = h('input', { type: 'datetime-local', id: 'filter-since', value: filters.since ? toLocalInput(filters.since) : '' });
  const until = h('input', { type: 'datetime-local', id: 'filter-until', value: filters.until ? toLocalInput(filters.until) : '' });
  const form = h('form', { class: 'row', onsubmit: (event) => {
    event.preventDefault();
    location.hash = `#/deliveries${query({
      status: status.value, endpoint: endpoint.value.trim(), event_type: eventType.value.trim(),
      since: toRfc3339(since.value), until: toRfc3339(until.value),
    })}`;
  } },
  field('Status', status), field('Endpoint', endpoint), endpointNames, field('Event type', eventType),
  field('Since', since), field('Until', until),
  h('button', { type: 'submit', id: 'apply-filters' }, 'Filter'));
  const pager = h('div', { class: 'pager' },
    cursor ? h('a', { class: 'button', href: `#/deliveries${query(filters)}` }, '← Newest') : null,
    page.next_cursor ? h('a', { class: 'button', id: 'older', href: `#/deliveries${query({ ...filters, cursor: page.next_cursor })}` }, 'Older →') : null);
  render(main,
    h('h1', {}, 'Deliveries'),
    form,
    table(['Delivery', 'Endpoint', 'Event type', 'Status', { text: 'Attempts', attrs: { class: 'num' } },
      { text: 'Last error', attrs: { class: 'optional' } }, 'Updated'],
    page.deliveries.map((d) => [
      h('a', { href: `#/deliveries/${seg(d.id)}` }, d.id),
      h('a', { href: `#/endpoints/${seg(d.endpoint)}` }, d.endpoint),
      d.event_type,
      badge(d.status),
      cell(count(d.attempt_count), { class: 'num' }),
      cell(d.last_error || '', { class: 'optional' }),
      ago(d.updated_at),
    ]), 'No deliveries match.'),
    pager);
}

export async function deliveryView(main, { args, refresh }) {
  const id = args[0];
  const d = await get(`/v1/deliveries/${seg(id)}`);
  // The body is the event's payload; an event already purged (retention) has none to show.
  const event = await get(`/v1/events/${seg(d.event_id)}`).catch(() => null);
  const output = h('div', { 'aria-live': 'polite' });
  const redeliver = h('button', { type: 'button', class: 'primary', id: 'redeliver', onclick: async () => {
    try {
      const queued = await post(`/v1/deliveries/${seg(id)}/redeliver`);
      render(output, notice('Queued again; attempting now.', 'ok'));
      await attemptedIn(id, queued.round);
      refresh();
    } catch (error) {
      render(output, errorNotice(error));
    }
  } }, 'Redeliver');
  const refreshButton = h('button', { type: 'button', id: 'refresh', onclick: () => refresh() }, 'Refresh');
  render(main,
    h('h1', {}, d.id, ' ', badge(d.status)),
    h('dl', { class: 'settings card' },
      h('dt', {}, 'Endpoint'), h('dd', {}, h('a', { href: `#/endpoints/${seg(d.endpoint)}` }, d.endpoint)),
      h('dt', {}, 'Event'), h('dd', {}, h('span', { class: 'mono' }, d.event_id), ` (${d.event_type}, topic ${d.topic})`),
      h('dt', {}, 'Round'), h('dd', {}, count(d.round)),
      h('dt', {}, 'Next attempt'), h('dd', {}, ago(d.next_attempt_at)),
      h('dt', {}, 'Created'), h('dd', {}, ago(d.created_at))),
    h('div', { class: 'actions' }, redeliver, refreshButton),
    output,
    h('h2', {}, `Attempts (${count(d.attempts.length)})`),
    d.attempts.length ? [...d.attempts].reverse().map(attempt) : h('p', { class: 'muted' }, 'No attempt yet.'),
    h('h2', {}, 'Body'),
    body(event));
}

// Waits until round `round` of the delivery has an attempt on record (or half a minute has
// passed): an outcome is stored a moment after the attempt ends, so one read soon after the
// redeliver could show the old round and never the attempt the page announced.
async function attemptedIn(id, round) {
  for (let tries = 0; tries < 60; tries += 1) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const d = await get(`/v1/deliveries/${seg(id)}`);
    if (d.attempts.some((a) => a.round >= round)) return;
  }
}

// The body the gateway sends: the event's payload, with its content type. A transform plugin
// may change it on its way (an attempt's "Plugins" line names the plugins that ran).
function body(event) {
  if (!event) return h('p', { class: 'muted' }, 'The event is no longer stored (retention), nor its body.');
  const text = event.payload_base64 !== null && event.payload_base64 !== undefined
    ? event.payload_base64
    : (typeof event.payload === 'string' ? event.payload : JSON.stringify(event.payload, null, 2));
  return h('section', { class: 'card', id: 'body-sent' },
    h('p', { class: 'muted' }, h('span', { class: 'mono' }, event.content_type),
      event.payload_base64 ? ' (binary, shown in base64)' : '',
      ' — as sent, unless a transform plugin changed it on the way.'),
    h('pre', {}, text));
}

function attempt(a) {
  // A broker has no status code: a delivered attempt is one without an error that recorded
  // the broker's answer (a transform's drop records neither).
  const broker = !a.status_code && !a.error_kind && Boolean(a.response_body);
  const good = broker || (a.status_code && a.status_code >= 200 && a.status_code < 300);
  const headers = (list) => table(['Header', 'Value'], (list || []).map((x) => [h('span', { class: 'mono' }, x.name), h('span', { class: 'mono' }, x.value)]), 'none');
  let verdict = badge(a.error_kind || 'failed', 'failed');
  if (a.status_code) verdict = badge(String(a.status_code), good ? 'succeeded' : 'failed');
  else if (broker) verdict = badge('accepted', 'succeeded');
  return h('article', { class: `attempt card ${good ? 'good' : 'bad'}` },
    h('h3', {}, `Round ${a.round}, attempt ${a.n}: `, verdict,
      ' ', h('span', { class: 'muted' }, `${count(a.duration_ms)} ms, `), ago(a.started_at)),
    broker ? h('p', { class: 'broker-answer' }, a.response_body) : null,
    a.error ? h('p', { class: 'attempt-error' }, h('strong', {}, a.error_kind ? `${a.error_kind}: ` : ''), a.error) : null,
    a.plugins ? h('p', { class: 'muted' }, `Plugins: ${a.plugins}`) : null,
    h('details', {}, h('summary', {}, broker ? 'Headers sent to the broker' : 'Request headers sent'), headers(a.request_headers)),
    h('details', { open: !good }, h('summary', {}, broker ? 'The broker’s answer' : 'Response'),
      headers(a.response_headers),
      a.response_body ? h('pre', {}, a.response_body) : h('p', { class: 'muted' }, 'No body.')));
}

// The event type catalog: each type's description, flags and the JSON Schema its payloads must
// match (the latest version); admins add, archive and restore types here.

import { del, get, patch, post, query, seg } from '../api.js';
import { ago, badge, errorNotice, field, h, render, table } from '../ui.js';

export async function eventTypesView(main, { params, me, refresh }) {
  const archived = params.get('archived') === '1';
  const cursor = params.get('cursor') || '';
  const list = await get(`/v1/event-types${query({ include_archived: archived ? 'true' : '', cursor, limit: 50 })}`);
  const status = h('div', {});
  const act = async (call) => {
    try {
      await call();
      await refresh();
    } catch (error) {
      render(status, errorNotice(error));
    }
  };
  const rows = list.event_types.map((t) => [
    h('span', { class: 'mono', 'data-event-type': t.name }, t.name),
    t.description || h('span', { class: 'muted' }, '—'),
    [t.archived ? badge('archived', 'disabled') : null, t.deprecated ? badge('deprecated', 'degraded') : null,
      t.group_name ? badge(t.group_name, 'tenant') : null],
    schemaCell(t.schemas),
    ago(t.updated_at),
    me.admin
      ? h('button', {
        type: 'button',
        'data-archive': t.name,
        onclick: () => act(() => (t.archived
          ? patch(`/v1/event-types/${seg(t.name)}`, { archived: false })
          : del(`/v1/event-types/${seg(t.name)}`))),
      }, t.archived ? 'Restore' : 'Archive')
      : null,
  ]);
  const here = (next) => `#/event-types${query({ archived: archived ? '1' : '', ...next })}`;
  render(main,
    h('h1', {}, 'Event types'),
    h('p', { class: 'muted' },
      'Payloads of a type with a schema must match its latest version, or the event is refused (400 payload_schema_mismatch). ',
      h('a', { href: here({ archived: archived ? '' : '1' }), id: 'toggle-archived' }, archived ? 'Hide archived' : 'Show archived')),
    status,
    table(['Name', 'Description', 'Flags', 'Schema', 'Changed', ''], rows, 'No event types yet.'),
    list.next_cursor ? h('p', {}, h('a', { href: here({ cursor: list.next_cursor }), id: 'next-page' }, 'Next page')) : null,
    me.admin ? newTypeForm(status, refresh) : null);
}

// The latest schema version, folded away.
function schemaCell(schemas) {
  const versions = Object.keys(schemas || {});
  if (!versions.length) return h('span', { class: 'muted' }, 'any payload');
  const latest = versions.sort((a, b) => Number(a) - Number(b) || a.localeCompare(b)).at(-1);
  return h('details', {},
    h('summary', {}, `version ${latest}`),
    h('pre', {}, JSON.stringify(schemas[latest], null, 2)));
}

function newTypeForm(status, refresh) {
  const name = h('input', { id: 'et-name', required: true, placeholder: 'user.signup', pattern: '[A-Za-z0-9._\\-]{1,256}' });
  const description = h('input', { id: 'et-description', size: 40 });
  const schema = h('textarea', { id: 'et-schema', rows: 6, cols: 60, placeholder: '{"type": "object", "required": ["email"]} (empty: any payload)' });
  return h('form', {
    class: 'card',
    onsubmit: async (event) => {
      event.preventDefault();
      const body = { name: name.value.trim(), description: description.value.trim() };
      if (schema.value.trim()) {
        try {
          body.schemas = { 1: JSON.parse(schema.value) };
        } catch (error) {
          render(status, errorNotice({ code: 'invalid_schema', message: `The schema is not JSON: ${error.message}` }));
          return;
        }
      }
      try {
        await post('/v1/event-types', body);
        await refresh();
      } catch (error) {
        render(status, errorNotice(error));
      }
    },
  },
  h('h2', {}, 'New event type'),
  field('Name', name),
  field('Description', description),
  field('JSON Schema of the payload', schema),
  h('div', { class: 'actions' }, h('button', { class: 'primary', type: 'submit', id: 'create-event-type' }, 'Add event type')));
}

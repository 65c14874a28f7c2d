// Endpoints: the list, a page at a time, with state and tenant filters; the form that creates
// or edits an endpoint created through the API.

import { get, patch, post, query, seg } from '../api.js';
import { ago, badge, cell, count, errorNotice, field, h, render, secretBox, table } from '../ui.js';

const STATES = ['active', 'degraded', 'paused', 'disabled'];
const PAGE = 100;

export async function endpointsView(main, { params, me }) {
  const state = params.get('state') || '';
  const tenant = params.get('tenant') || '';
  const cursor = params.get('cursor') || '';
  const list = await get(`/v1/endpoints${query({ state, tenant: me.admin ? tenant : '', cursor, limit: PAGE })}`);
  const shown = list.endpoints;
  const apply = (next) => {
    const q = query({ state, tenant, ...next });
    location.hash = `#/endpoints${q}`;
  };
  const paged = Boolean(cursor || list.next_cursor);
  const pager = h('div', { class: 'pager' },
    cursor ? h('a', { class: 'button', href: `#/endpoints${query({ state, tenant })}` }, '← First') : null,
    list.next_cursor ? h('a', { class: 'button', id: 'next-endpoints', href: `#/endpoints${query({ state, tenant, cursor: list.next_cursor })}` }, 'Next →') : null);
  const stateSelect = h('select', { id: 'state-filter', onchange: (e) => apply({ state: e.target.value }) },
    h('option', { value: '' }, 'any state'),
    STATES.map((s) => h('option', { value: s, selected: s === state }, s)));
  const tenantInput = me.admin
    ? h('input', { id: 'tenant-filter', value: tenant, placeholder: 'any tenant', onchange: (e) => apply({ tenant: e.target.value }) })
    : null;
  render(main,
    h('h1', {}, 'Endpoints'),
    h('div', { class: 'row' },
      field('State', stateSelect),
      tenantInput ? field('Tenant', tenantInput) : null,
      h('a', { class: 'button', href: '#/endpoints/new', id: 'new-endpoint' }, 'New endpoint')),
    h('p', { class: 'muted' }, `${count(shown.length)} endpoint${shown.length === 1 ? '' : 's'}${paged ? ' on this page' : ''}`),
    table(
      ['Name', 'Kind', 'State', { text: 'Failures', attrs: { class: 'num' } }, 'Last success',
        { text: 'Tenant', attrs: { class: 'optional' } }, { text: 'Source', attrs: { class: 'optional' } }],
      shown.map((e) => [
        h('a', { href: `#/endpoints/${seg(e.name)}` }, e.name),
        e.kind,
        badge(e.state),
        cell(count(e.consecutive_failures), { class: 'num' }),
        ago(e.last_success_at),
        cell(e.tenant || '—', { class: 'optional' }),
        cell(badge(e.source), { class: 'optional' }),
      ]),
      'No endpoints match.'),
    pager);
}

// Create (#/endpoints/new) or edit (#/endpoints/NAME/edit) an endpoint created through the API.
export async function endpointFormView(main, { args, me }) {
  const editing = args[0];
  const [topics, policies, current] = await Promise.all([
    get('/v1/topics'),
    get('/v1/policies'),
    editing ? get(`/v1/endpoints/${seg(editing)}`) : null,
  ]);
  const status = h('div', {});
  const input = (name, value, attrs = {}) => h('input', { name, id: `f-${name}`, value: value || '', ...attrs });
  const nameInput = editing ? null : input('name', '', { placeholder: 'generated when empty', pattern: '[A-Za-z0-9][A-Za-z0-9._\\-]{0,63}' });
  const urlInput = input('url', current && current.url, { type: 'url', required: true, placeholder: 'https://example.com/webhooks or nats://host:4222/subject', size: 40 });
  const typesInput = input('types', current && current.types.join(', '), { placeholder: 'order.*, invoice.paid (empty: all)' });
  const descInput = input('description', current && current.description);
  const tenantInput = !editing && me.admin ? input('tenant', '', { placeholder: 'none: every tenant’s events' }) : null;
  const policySelect = h('select', { name: 'policy', id: 'f-policy' },
    h('option', { value: '' }, 'the topic’s (default)'),
    policies.policies.map((p) => h('option', { value: p, selected: current && current.policy === p }, p)));
  const topicBoxes = topics.topics.map((t) => h('label', { class: 'check' },
    h('input', { type: 'checkbox', name: 'topic', value: t.name, checked: current ? current.topics.includes(t.name) : topics.topics.length === 1 }),
    t.name));
  const form = h('form', {
    class: 'card',
    onsubmit: async (event) => {
      event.preventDefault();
      const body = {
        url: urlInput.value.trim(),
        topics: topicBoxes.map((l) => l.querySelector('input')).filter((i) => i.checked).map((i) => i.value),
        types: typesInput.value.split(',').map((s) => s.trim()).filter(Boolean),
        policy: policySelect.value || null,
        description: descInput.value.trim() || null,
      };
      try {
        if (editing) {
          await patch(`/v1/endpoints/${seg(editing)}`, body);
          location.hash = `#/endpoints/${seg(editing)}`;
          return;
        }
        if (nameInput.value.trim()) body.name = nameInput.value.trim();
        if (tenantInput && tenantInput.value.trim()) body.tenant = tenantInput.value.trim();
        for (const key of ['policy', 'description']) if (body[key] === null) delete body[key];
        const created = await post('/v1/endpoints', body);
        render(main,
          h('h1', {}, `Created ${created.name}`),
          secretBox(created.secret),
          h('div', { class: 'actions' }, h('a', { class: 'button', href: `#/endpoints/${seg(created.name)}`, id: 'to-endpoint' }, 'Open the endpoint')));
      } catch (error) {
        render(status, errorNotice(error));
      }
    },
  },
  nameInput ? field('Name', nameInput) : null,
  field('URL', urlInput),
  h('fieldset', {}, h('legend', {}, 'Topics'), h('div', { class: 'row' }, topicBoxes)),
  field('Event types', typesInput),
  field('Retry policy', policySelect),
  tenantInput ? field('Tenant', tenantInput) : null,
  field('Description', descInput),
  h('div', { class: 'actions' },
    h('button', { class: 'primary', type: 'submit', id: 'save-endpoint' }, editing ? 'Save' : 'Create endpoint'),
    h('a', { class: 'button', href: editing ? `#/endpoints/${seg(editing)}` : '#/endpoints' }, 'Cancel')));
  render(main, h('h1', {}, editing ? `Edit ${editing}` : 'New endpoint'), status, form);
  urlInput.focus();
}

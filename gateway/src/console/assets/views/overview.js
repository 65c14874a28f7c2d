// Overview: deliveries and failures over the last hour and day, endpoints by state, backlog.

import { get } from '../api.js';
import { activityChart, badge, h, render } from '../ui.js';

const STATES = ['active', 'degraded', 'paused', 'disabled'];

export async function overviewView(main) {
  const [hour, day] = await Promise.all([get('/v1/stats?period=hour'), get('/v1/stats?period=day')]);
  const sum = (stats, key) => stats.buckets.reduce((n, b) => n + b[key], 0);
  const stat = (value, label, href) => h('div', { class: 'stat' },
    h('div', { class: 'value' }, href ? h('a', { href }, String(value)) : String(value)),
    h('div', { class: 'label' }, label));
  render(main,
    h('h1', {}, 'Overview'),
    h('div', { class: 'cards' },
      stat(sum(hour, 'succeeded'), 'delivered in the last hour'),
      stat(sum(hour, 'failed'), 'failed in the last hour', '#/deliveries?status=failed'),
      stat(hour.pending, 'waiting now', '#/deliveries?status=pending'),
      stat(hour.dead, 'dead letters', '#/deliveries?status=dead')),
    h('section', { class: 'card', 'aria-labelledby': 'hour-h' },
      h('h2', { id: 'hour-h' }, 'Last hour'),
      legend(), activityChart(hour.buckets, 'Deliveries per minute, last hour')),
    h('section', { class: 'card', 'aria-labelledby': 'day-h' },
      h('h2', { id: 'day-h' }, 'Last day'),
      h('p', { class: 'muted' }, `${sum(day, 'succeeded')} delivered, ${sum(day, 'failed')} failed.`),
      legend(), activityChart(day.buckets, 'Deliveries per hour, last day')),
    h('section', { class: 'card', 'aria-labelledby': 'states-h' },
      h('h2', { id: 'states-h' }, 'Endpoints by state'),
      h('div', { class: 'row' }, STATES.map((s) => h('a', { href: `#/endpoints?state=${s}`, class: 'button' },
        badge(s), ' ', String(hour.endpoints[s] || 0))))));
}

function legend() {
  return h('div', { class: 'legend' }, h('span', { class: 'ok' }, 'delivered'), h('span', { class: 'bad' }, 'failed'));
}

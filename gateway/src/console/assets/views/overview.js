// Overview: deliveries and failed attempts over the last hour and day, endpoints by state,
// backlog; for admins, whether the config file on disk is what runs. Failed attempts, not only
// deliveries that ended failed: an outage stays visible after its deliveries were recovered.

import { get } from '../api.js';
import { activityChart, ago, badge, count, h, render } from '../ui.js';

const STATES = ['active', 'degraded', 'paused', 'disabled'];

export async function overviewView(main, { me }) {
  const [hour, day, status] = await Promise.all([
    get('/v1/stats?period=hour'),
    get('/v1/stats?period=day'),
    me && me.admin ? get('/v1/status') : null,
  ]);
  const sum = (stats, key) => stats.buckets.reduce((n, b) => n + b[key], 0);
  const stat = (value, label, href) => h('div', { class: 'stat' },
    h('div', { class: 'value' }, href ? h('a', { href }, count(value)) : count(value)),
    h('div', { class: 'label' }, label));
  render(main,
    h('h1', {}, 'Overview'),
    status ? configNotice(status) : null,
    h('div', { class: 'cards' },
      stat(sum(hour, 'succeeded'), 'delivered in the last hour'),
      stat(sum(hour, 'failed_attempts'), 'failed attempts in the last hour'),
      stat(sum(hour, 'failed'), 'deliveries ended failed in the last hour', '#/deliveries?status=failed'),
      stat(hour.pending, 'waiting now', '#/deliveries?status=pending'),
      stat(hour.dead, 'dead letters', '#/deliveries?status=dead'),
      stat(hour.blocked_keys, 'ordering keys blocked', '#/endpoints')),
    h('section', { class: 'card', 'aria-labelledby': 'hour-h' },
      h('h2', { id: 'hour-h' }, 'Last hour'),
      legend(), activityChart(hour.buckets, 'Deliveries and failed attempts per minute, last hour')),
    h('section', { class: 'card', 'aria-labelledby': 'day-h' },
      h('h2', { id: 'day-h' }, 'Last day'),
      h('p', { class: 'muted' }, `${count(sum(day, 'succeeded'))} delivered, ${count(sum(day, 'failed_attempts'))} failed attempts, ${count(sum(day, 'failed'))} deliveries ended failed.`),
      legend(), activityChart(day.buckets, 'Deliveries and failed attempts per hour, last day')),
    h('section', { class: 'card', 'aria-labelledby': 'states-h' },
      h('h2', { id: 'states-h' }, 'Endpoints by state'),
      h('div', { class: 'row' }, STATES.map((s) => h('a', { href: `#/endpoints?state=${s}`, class: 'button' },
        badge(s), ' ', count(hour.endpoints[s] || 0))))));
}

// Says so when the file on disk is not what runs: a refused reload (with why) or settings that
// wait for a restart.
function configNotice(status) {
  const reload = status.last_reload;
  if (!status.config_differs_from_file || !reload) return null;
  const file = h('span', { class: 'mono' }, status.config_file || 'the config file');
  if (!reload.ok) {
    return h('div', { class: 'notice error', role: 'alert', id: 'config-differs' },
      h('strong', {}, 'The config file on disk is not what runs. '),
      'Its reload ', ago(reload.at), ' was refused; the gateway keeps the config it had. Fix ', file, ' and save it again:',
      h('ul', {}, reload.errors.map((e) => h('li', { class: 'mono' }, e))));
  }
  return h('div', { class: 'notice', role: 'status', id: 'config-differs' },
    h('strong', {}, 'Waiting for a restart: '), file, ' changes ',
    reload.needs_restart.join(', '), ', read only at start; the running values stay until the gateway restarts.');
}

function legend() {
  return h('div', { class: 'legend' }, h('span', { class: 'ok' }, 'delivered'), h('span', { class: 'bad' }, 'failed attempts'));
}

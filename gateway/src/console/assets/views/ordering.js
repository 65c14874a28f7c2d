// An ordered endpoint's "Ordering" tab: its blocked and held keys first, each with its head's
// error and last response and the buttons that move it on (skip, retry now, release), then
// every key with something waiting.

import { get, post, seg } from '../api.js';
import { ago, badge, count, errorNotice, h, notice, render, table } from '../ui.js';

let flash = null;

export async function orderingView(main, { args, refresh }) {
  const name = args[0];
  const path = `/v1/endpoints/${seg(name)}`;
  const [ep, stuck, all] = await Promise.all([
    get(path),
    get(`${path}/ordering-keys?state=blocked`),
    get(`${path}/ordering-keys?state=waiting`),
  ]);
  // The head's last attempt, for its status code and the start of the receiver's answer.
  const heads = await Promise.all(stuck.keys.map((k) => (k.head ? get(`/v1/deliveries/${seg(k.head.delivery_id)}`) : null)));
  const output = h('div', { id: 'ordering-output', 'aria-live': 'polite' }, flash);
  flash = null;
  const act = (key, action, head) => async () => {
    try {
      const r = await post(`${path}/ordering-keys/${seg(key)}/${action}`, head ? { delivery_id: head } : {});
      flash = notice(r.applied
        ? `${action} done on ${r.head} (key ${key}).`
        : `Nothing to do for key ${key}: ${r.reason === 'not_head' ? `its head is now ${r.head}` : (r.reason || '').replace('_', ' ')}.`,
      r.applied ? 'ok' : '');
      await refresh();
    } catch (error) {
      render(output, errorNotice(error));
    }
  };
  const buttons = (k) => {
    const id = k.head && k.head.delivery_id;
    const button = (action, label) => h('button', { type: 'button', 'data-action': action, 'data-key': k.key,
      onclick: act(k.key, action, id) }, label);
    return k.state === 'held'
      ? [button('retry', 'Retry head'), button('release', 'Release')]
      : [button('retry', 'Retry now'), button('skip', 'Skip head')];
  };
  const lastAttempt = (d) => (d && d.attempts && d.attempts.length ? d.attempts[d.attempts.length - 1] : null);
  const response = (d) => {
    const a = lastAttempt(d);
    if (!a) return h('span', { class: 'muted' }, '—');
    const said = a.status_code ? `${a.status_code}` : (a.error_kind || '');
    const body = a.response_body ? a.response_body.slice(0, 120) : '';
    return h('span', {}, said, body ? h('div', { class: 'mono muted' }, body) : null);
  };

  render(main,
    h('h1', {}, ep.name, ' ', badge(ep.state)),
    h('nav', { class: 'tabs' },
      h('a', { href: `#/endpoints/${seg(name)}` }, 'Endpoint'),
      h('a', { href: `#/endpoints/${seg(name)}/ordering`, 'aria-current': 'page' }, 'Ordering')),
    h('p', { class: 'muted' }, `Events with the same ordering key go one after another. When a key's head finally fails, the key `,
      ep.on_final_failure === 'hold' ? 'is held until you release it.' : 'moves on (the head ends as a dead letter or failed).'),
    output,
    h('section', { class: 'card', 'aria-labelledby': 'stuck-h' },
      h('h2', { id: 'stuck-h' }, `Blocked and held keys (${count(stuck.keys.length)})`),
      table(['Key', 'State', 'Head', 'Attempts', 'Next attempt', 'Last error', 'Last response', 'Waiting', 'Oldest waiting', ''],
        stuck.keys.map((k, i) => [
          h('span', { class: 'mono' }, k.key), badge(k.state),
          k.head ? h('a', { href: `#/deliveries/${seg(k.head.delivery_id)}` }, k.head.delivery_id) : '—',
          k.head ? count(k.head.attempt_count) : '—',
          k.head ? ago(k.head.next_attempt_at) : '—',
          (k.head && k.head.last_error) || '—',
          response(heads[i]),
          count(k.waiting), ago(k.oldest_waiting_at),
          h('div', { class: 'row' }, buttons(k)),
        ]), 'No key is blocked: every key flows.')),
    h('section', { class: 'card', 'aria-labelledby': 'waiting-h' },
      h('h2', { id: 'waiting-h' }, 'Keys with events waiting'),
      table(['Key', 'State', 'Head', 'Waiting', 'Oldest waiting'], all.keys.map((k) => [
        h('span', { class: 'mono' }, k.key), badge(k.state),
        k.head ? h('a', { href: `#/deliveries/${seg(k.head.delivery_id)}` }, k.head.delivery_id) : '—',
        count(k.waiting), ago(k.oldest_waiting_at),
      ]), 'Nothing waits behind any key.')));
}

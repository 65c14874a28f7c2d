// Sign-in: an admin or tenant API key; a console link signs in by itself. On a gateway without
// API keys there is no key to give: the page says so and leads to the overview, and takes only
// a console token (which opens one tenant's view).

import { errorNotice, h, notice, render } from '../ui.js';

export function signinView(main, { error, open, onSignIn }) {
  const input = h('input', { type: 'password', id: 'credential', name: 'credential', autocomplete: 'off', required: true, size: 40 });
  const status = h('div', {});
  const form = h('form', {
    class: 'card',
    onsubmit: async (event) => {
      event.preventDefault();
      try {
        await onSignIn(input.value.trim());
      } catch (e) {
        render(status, errorNotice(e));
      }
    },
  },
  h('label', {}, open ? 'Console token' : 'API key or console token', input),
  h('div', { class: 'actions' }, h('button', { class: 'primary', type: 'submit' }, 'Sign in')));
  const expired = error && error.code === 'token_expired';
  render(main,
    h('h1', {}, 'Sign in'),
    open
      ? h('p', { id: 'open-gateway' }, 'This gateway has no API keys, so the console needs no sign-in: it listens on loopback only, and whoever reaches it is an admin. ',
        h('a', { href: '#/overview', id: 'to-overview' }, 'Continue to the overview'), '. A console token opens one tenant’s view instead.')
      : h('p', { class: 'muted' }, 'Use an API key of the gateway (an admin key, or a tenant’s key), or open the console link your provider gave you.'),
    expired ? notice('This console link has expired. Ask for a new one.', 'error') : (error ? errorNotice(error) : null),
    form, status);
  input.focus();
}

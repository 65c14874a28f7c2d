// Sign-in: an admin or tenant API key; a console link signs in by itself.

import { errorNotice, h, notice, render } from '../ui.js';

export function signinView(main, { error, onSignIn }) {
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
  h('label', {}, 'API key or console token', input),
  h('div', { class: 'actions' }, h('button', { class: 'primary', type: 'submit' }, 'Sign in')));
  const expired = error && error.code === 'token_expired';
  render(main,
    h('h1', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'Use an API key of the gateway (an admin key, or a tenant’s key), or open the console link your provider gave you.'),
    expired ? notice('This console link has expired. Ask for a new one.', 'error') : (error ? errorNotice(error) : null),
    form, status);
  input.focus();
}

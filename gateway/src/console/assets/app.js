// The console's shell: sign-in state, navigation, and a hash router (#/endpoints/billing).

import { ApiError, credential, get, signIn, signOut } from './api.js';
import { errorNotice, h, render } from './ui.js';
import { signinView } from './views/signin.js';
import { overviewView } from './views/overview.js';
import { endpointsView, endpointFormView } from './views/endpoints.js';
import { endpointView } from './views/endpoint.js';
import { orderingView } from './views/ordering.js';
import { deliveriesView, deliveryView } from './views/deliveries.js';
import { policiesView, pluginsView } from './views/catalog.js';
import { eventTypesView } from './views/event_types.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');

// Who is signed in: { admin, tenant, open }, from GET /v1/me (`open`: the gateway has no API
// keys, so there is nothing to sign in or out of, only a console link's token to use).
export let me = null;

const SECTIONS = [
  ['overview', 'Overview'],
  ['endpoints', 'Endpoints'],
  ['deliveries', 'Deliveries'],
  ['event-types', 'Event types'],
  ['policies', 'Policies'],
  ['plugins', 'Plugins', true],
];

const ROUTES = [
  [/^overview$/, () => overviewView],
  [/^endpoints$/, () => endpointsView],
  [/^endpoints\/new$/, () => endpointFormView],
  [/^endpoints\/([^/]+)\/edit$/, () => endpointFormView],
  [/^endpoints\/([^/]+)\/ordering$/, () => orderingView],
  [/^endpoints\/([^/]+)$/, () => endpointView],
  [/^deliveries$/, () => deliveriesView],
  [/^deliveries\/([^/]+)$/, () => deliveryView],
  [/^event-types$/, () => eventTypesView],
  [/^policies$/, () => policiesView],
  [/^plugins$/, () => pluginsView],
];

// The route of the current hash: its path, captured parts and query.
function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [path, search = ''] = hash.split('?');
  return { path: path || 'overview', params: new URLSearchParams(search) };
}

export function go(path) {
  location.hash = `#/${path}`;
}

function drawNav(current) {
  const section = current.split('/')[0];
  render(nav, SECTIONS
    .filter(([, , adminOnly]) => !adminOnly || (me && me.admin))
    .map(([id, label]) => h('a', { href: `#/${id}`, 'aria-current': id === section ? 'page' : null }, label)));
  render(who, me
    ? [h('span', { 'data-who': '' }, me.admin ? 'Admin' : `Tenant ${me.tenant}`),
      credential()
        ? h('button', { type: 'button', id: 'sign-out', onclick: signOutNow }, 'Sign out')
        : h('span', { class: 'muted', id: 'no-keys', title: 'This gateway has no API keys: it listens on loopback only, and everyone who reaches it is an admin.' }, 'no API keys')]
    : []);
}

// Drops the key or token. A gateway without API keys needs none: back to its overview, as an
// admin, rather than to a sign-in page that has nothing to ask for.
function signOutNow() {
  const open = me && me.open;
  signOut();
  me = null;
  open ? goOrShow('overview') : go('signin');
}

// Goes to `path`, or shows it again when it is the page already open (no hashchange then).
function goOrShow(path) {
  if (route().path === path) show(); else go(path);
}

async function show() {
  const { path, params } = route();
  if (!me) {
    // With the stored key or token; a gateway without API keys answers without one.
    try {
      me = await get('/v1/me');
    } catch (error) {
      const hadCredential = Boolean(credential());
      signOut();
      return showSignin(hadCredential ? error : null);
    }
  }
  if (path === 'signin') return showSignin();
  drawNav(path);
  const match = ROUTES.find(([re]) => re.test(path));
  if (!match) {
    render(main, h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/overview' }, 'To the overview')));
    return;
  }
  const args = path.match(match[0]).slice(1).map(decodeURIComponent);
  render(main, h('p', { class: 'muted' }, 'Loading…'));
  try {
    await match[1]()(main, { args, params, me, refresh: show });
  } catch (error) {
    if (error instanceof ApiError && (error.status === 401 || error.status === 403) && error.code !== 'admin_only') {
      signOut();
      me = null;
      return showSignin(error);
    }
    render(main, h('h1', {}, 'Something went wrong'), errorNotice(error));
  }
  main.focus({ preventScroll: true });
}

function showSignin(error) {
  drawNav('');
  render(nav);
  signinView(main, {
    error,
    open: Boolean(me && me.open),
    onSignIn: async (value) => {
      signIn(value);
      me = await get('/v1/me');
      go('overview');
    },
  });
}

// A console link carries its token in the fragment (never sent to a server): take it, then
// drop it from the address bar and history.
function takeTokenFromLink() {
  const m = location.hash.match(/^#token=(hgc_[A-Za-z0-9_\-.]+)/);
  if (!m) return;
  signIn(m[1]);
  me = null;
  history.replaceState(null, '', `${location.pathname}#/overview`);
}

window.addEventListener('hashchange', show);
takeTokenFromLink();
show();

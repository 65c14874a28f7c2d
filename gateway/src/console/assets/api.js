// The gateway's HTTP API, called with the signed-in user's API key or console token.

const CREDENTIAL = 'hookgate.credential';

export function credential() {
  return sessionStorage.getItem(CREDENTIAL);
}

export function signIn(value) {
  sessionStorage.setItem(CREDENTIAL, value);
}

export function signOut() {
  sessionStorage.removeItem(CREDENTIAL);
}

export class ApiError extends Error {
  constructor(status, code, message, problems) {
    super(message);
    this.status = status;
    this.code = code;
    this.problems = problems || [];
  }
}

// Calls the API; answers the parsed JSON (or text), throws an ApiError for anything not 2xx.
export async function api(method, path, body, headers = {}) {
  const sent = { ...headers };
  const key = credential();
  if (key) sent.Authorization = `Bearer ${key}`;
  if (body !== undefined) sent['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers: sent,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = text;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: an SVG chart, say.
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || 'error', error.message || response.statusText, error.problems);
  }
  return data;
}

export const get = (path) => api('GET', path);
export const post = (path, body, headers) => api('POST', path, body, headers);
export const patch = (path, body) => api('PATCH', path, body);
export const del = (path) => api('DELETE', path);

// A query string from an object, leaving out empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') q.set(key, value);
  }
  const text = q.toString();
  return text ? `?${text}` : '';
}

export const seg = encodeURIComponent;

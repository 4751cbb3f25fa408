// The store's /v1/agl API, relative to this page (so a reverse proxy may serve both under a sub-path).
// The bearer token lives in this tab's sessionStorage only: never in a URL, never logged.

const TOKEN_KEY = "agl.dashboard.token";

export class ApiError extends Error {
  constructor(status, detail, errorType) {
    super(`${status} ${errorType ?? ""}: ${detail ?? ""}`.trim());
    this.status = status;
    this.detail = detail;
    this.errorType = errorType;
  }
}

const listeners = new Set();
/** Called with true when the server refuses our token (or asks for one), false once one works. */
export function onAuthChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}
const announce = (needed) => {
  for (const fn of listeners) fn(needed);
};

export const getToken = () => sessionStorage.getItem(TOKEN_KEY);
export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** GET (or POST with `body`) `v1/agl/<path>`; `query` values that are lists repeat the key. */
export async function api(path, { query, body, signal } = {}) {
  const url = new URL(`v1/agl/${path}`, document.baseURI);
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v === undefined || v === null || v === "") continue;
    for (const one of Array.isArray(v) ? v : [v]) url.searchParams.append(k, String(one));
  }
  const headers = { accept: "application/json" };
  const token = getToken();
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(url, {
    method: body === undefined ? "GET" : "POST",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    credentials: "omit",
  });
  if (res.status === 401) {
    announce(true);
    throw new ApiError(401, token ? "The server refused this token" : "This server needs a token", "Unauthorized");
  }
  const payload = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, payload?.detail ?? res.statusText, payload?.error_type);
  return payload;
}

/** Every item of a list route from `start`, page after page (`pageSize` per request), up to `max`. */
export async function apiAll(path, query = {}, { pageSize = 1000, max = 50_000, start = 0, signal } = {}) {
  const items = [];
  let total = 0;
  for (let offset = start; ; ) {
    const page = await api(path, { query: { ...query, limit: pageSize, offset }, signal });
    items.push(...page.items);
    total = page.total;
    offset += page.items.length;
    if (page.items.length === 0 || offset >= total || items.length >= max) break;
  }
  return { items, total };
}

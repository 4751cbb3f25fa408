// Shared pieces: the `html` tag, polling, and small components. Store data is only ever rendered as
// text children or attribute values through preact (never as HTML).
import htm from "htm";
import { h } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { pretty } from "./format.js";

export const html = htm.bind(h);

/** How often live pages refresh, in ms (localStorage `agl.dashboard.refreshMs`, default 3000). */
export function refreshMs() {
  const v = Number(localStorage.getItem("agl.dashboard.refreshMs"));
  return Number.isFinite(v) && v >= 100 ? v : 3000;
}

/**
 * Runs `load` now, whenever `deps` change, and every refreshMs() while the tab is visible (when `live`).
 * Returns { data, error, loading, reload }; a slow answer to an older request never overwrites a newer one.
 */
export function useLoad(load, deps, { live = false } = {}) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const generation = useRef(0);
  const reload = async () => {
    const mine = ++generation.current;
    try {
      const data = await load();
      if (mine === generation.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (mine === generation.current) setState((s) => ({ ...s, error, loading: false }));
    }
  };
  useEffect(() => {
    setState((s) => ({ ...s, loading: true }));
    reload();
    if (!live) return undefined;
    const timer = setInterval(() => {
      if (document.visibilityState === "visible") reload();
    }, refreshMs());
    return () => clearInterval(timer);
  }, [...deps, live]);
  return { ...state, reload };
}

export const Status = ({ value }) => html`<span class=${`badge s-${String(value)}`}>${String(value ?? "–")}</span>`;

export function ErrorBox({ error }) {
  if (!error) return null;
  return html`<div class="error" role="alert">${error.message ?? String(error)}</div>`;
}

export const Json = ({ value }) => html`<pre class="json">${pretty(value)}</pre>`;

export function KeyValues({ rows }) {
  return html`<table class="kv"><tbody>
    ${rows.map(([k, v]) => html`<tr key=${k}><th>${k}</th><td>${v}</td></tr>`)}
  </tbody></table>`;
}

export function Tabs({ tabs, value, onChange }) {
  return html`<div class="tabs" role="tablist">
    ${tabs.map(
      ([id, label]) =>
        html`<button key=${id} role="tab" aria-selected=${value === id} class=${value === id ? "tab active" : "tab"} onClick=${() => onChange(id)}>${label}</button>`,
    )}
  </div>`;
}

/**
 * A list that renders only the rows in view (plus a margin), so thousands of rows stay cheap.
 * `rowHeight` in px is fixed; `renderRow(item, index)` returns one row.
 */
export function VirtualList({ items, rowHeight, height, renderRow, className = "", testId }) {
  const [top, setTop] = useState(0);
  const ref = useRef(null);
  const overscan = 10;
  const first = Math.max(0, Math.floor(top / rowHeight) - overscan);
  const last = Math.min(items.length, Math.ceil((top + height) / rowHeight) + overscan);
  const rows = [];
  for (let i = first; i < last; i++) rows.push(renderRow(items[i], i));
  return html`<div ref=${ref} class=${`vlist ${className}`} data-testid=${testId} data-rows=${items.length} style=${{ height: `${height}px` }}
    onScroll=${(e) => setTop(e.currentTarget.scrollTop)}>
    <div style=${{ height: `${items.length * rowHeight}px`, position: "relative" }}>
      <div style=${{ position: "absolute", top: `${first * rowHeight}px`, left: 0, right: 0 }}>${rows}</div>
    </div>
  </div>`;
}

export function Pager({ offset, limit, total, onChange }) {
  const from = total === 0 ? 0 : offset + 1;
  const to = Math.min(offset + limit, total);
  return html`<div class="pager">
    <button disabled=${offset === 0} onClick=${() => onChange(Math.max(0, offset - limit))}>‹ Previous</button>
    <span class="muted" data-testid="pager-range">${from.toLocaleString("en-US")}–${to.toLocaleString("en-US")} of ${total.toLocaleString("en-US")}</span>
    <button disabled=${offset + limit >= total} onClick=${() => onChange(offset + limit)}>Next ›</button>
  </div>`;
}

/** `#/a/b?x=1` as { parts: ["a", "b"], params: URLSearchParams }. */
export function parseHash(hash) {
  const raw = hash.replace(/^#\/?/, "");
  const q = raw.indexOf("?");
  const path = q < 0 ? raw : raw.slice(0, q);
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(q < 0 ? "" : raw.slice(q + 1)) };
}

export const rolloutHref = (id) => `#/rollouts/${encodeURIComponent(id)}`;

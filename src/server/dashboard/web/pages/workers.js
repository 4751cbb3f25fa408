// Workers: status, current rollout, heartbeat age and stats; a worker silent for longer than the
// threshold shows as offline.
import { useState } from "preact/hooks";
import { apiAll } from "../api.js";
import { fmtAge, fmtInt, fmtNumber, fmtTime, preview } from "../format.js";
import { ErrorBox, Status, html, rolloutHref, useLoad } from "../ui.js";

const OFFLINE_KEY = "agl.dashboard.offlineSeconds";

function statText(v) {
  return typeof v === "number" ? fmtNumber(v) : preview(v, 40);
}

/** What the runner's system snapshot says about the machine rather than its load: folded away. */
const MACHINE_KEYS = new Set(["timestamp", "host", "os", "cpu_name", "cpu_cores", "cpu_threads", "mem_total_gb", "disk_total_gb"]);

function Stats({ stats }) {
  const entries = Object.entries(stats);
  const stat = ([k, v]) => html`<span key=${k} class="stat"><span class="muted">${k}</span> ${statText(v)}</span>`;
  const machine = entries.filter(([k]) => MACHINE_KEYS.has(k));
  return html`${entries.filter(([k]) => !MACHINE_KEYS.has(k)).map(stat)}
    ${machine.length > 0 && html`<details class="machine"><summary class="muted">machine</summary>${machine.map(stat)}</details>`}`;
}

export function WorkersPage() {
  const [offlineAfter, setOfflineAfter] = useState(() => Number(localStorage.getItem(OFFLINE_KEY)) || 60);
  const res = useLoad(() => apiAll("workers", { sort_by: "worker_id", sort_order: "asc" }, { pageSize: 1000, max: 10_000 }), [], {
    live: true,
  });
  const now = Date.now() / 1000;
  const workers = res.data?.items ?? [];
  const offline = (w) => w.last_heartbeat_time === null || now - w.last_heartbeat_time > offlineAfter;
  const online = workers.filter((w) => !offline(w)).length;
  return html`<section>
    <div class="page-head">
      <h1>Workers</h1>
      <span class="muted" data-testid="workers-summary">${fmtInt(workers.length)} workers, ${fmtInt(online)} online</span>
      <label class="right">Offline after <input type="number" min="1" aria-label="Offline after seconds" value=${offlineAfter}
        onInput=${(e) => {
          const v = Number(e.currentTarget.value);
          if (!Number.isFinite(v) || v < 1) return; // mid-edit (empty): keep the last good value
          localStorage.setItem(OFFLINE_KEY, String(v));
          setOfflineAfter(v);
        }} /> s without a heartbeat</label>
    </div>
    <${ErrorBox} error=${res.error} />
    <table class="grid" data-testid="workers-table">
      <thead><tr><th>Worker</th><th>Status</th><th>Current rollout</th><th>Last heartbeat</th><th>Last dequeue</th><th>Heartbeat stats</th></tr></thead>
      <tbody>${workers.map(
        (w) => html`<tr key=${w.worker_id} data-worker=${w.worker_id}>
          <td class="mono">${w.worker_id}</td>
          <td><${Status} value=${w.status} /> ${offline(w) && html`<span class="badge s-offline">offline</span>`}</td>
          <td>${w.current_rollout_id ? html`<a class="mono" href=${rolloutHref(w.current_rollout_id)}>${w.current_rollout_id}</a>` : "–"}</td>
          <td title=${fmtTime(w.last_heartbeat_time)}>${fmtAge(w.last_heartbeat_time, now)}</td>
          <td>${fmtAge(w.last_dequeue_time, now)}</td>
          <td class="stats"><${Stats} stats=${w.heartbeat_stats ?? {}} /></td>
        </tr>`,
      )}
      ${res.data && workers.length === 0 && html`<tr><td colspan="6" class="muted empty">No workers have reported yet.</td></tr>`}
      </tbody>
    </table>
  </section>`;
}

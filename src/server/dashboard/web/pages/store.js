// The store's statistics and the server's own health.
import { api } from "../api.js";
import { fmtDuration, fmtInt, fmtStat, fmtTime, preview } from "../format.js";
import { ErrorBox, KeyValues, html, useLoad } from "../ui.js";

const label = (k) => k.replace(/_/g, " ");

const statValue = (k, v) => (k === "uptime" && typeof v === "number" ? fmtDuration(v) : fmtStat(k, v));

export function StorePage() {
  const stats = useLoad(() => api("statistics"), [], { live: true });
  const server = useLoad(() => api("server"), [], { live: true });
  const s = server.data;
  return html`<section>
    <div class="page-head"><h1>Store</h1></div>
    <${ErrorBox} error=${stats.error || server.error} />
    <div class="cols">
      <div class="card" data-testid="store-statistics">
        <h3>Statistics</h3>
        ${stats.data && html`<${KeyValues} rows=${Object.entries(stats.data).map(([k, v]) => [label(k), statValue(k, v)])} />`}
      </div>
      <div class="card" data-testid="server-health">
        <h3>Server <span class=${`badge s-${s?.status === "ok" ? "succeeded" : "failed"}`}>${s?.status ?? "…"}</span></h3>
        ${
          s &&
          html`<${KeyValues} rows=${[
            ["runtime", s.runtime],
            ["started", fmtTime(s.started_at)],
            ["uptime", fmtDuration(s.uptime_seconds)],
            ["store query latency", fmtDuration(s.store_latency_ms / 1000)],
            ...(s.requests
              ? [
                  [
                    "requests answered",
                    `${fmtInt(s.requests.total)} (${fmtInt(s.requests.client_errors)} 4xx, ${fmtInt(s.requests.server_errors)} 5xx)`,
                  ],
                ]
              : []),
            ...Object.entries(s.system ?? {}).map(([k, v]) => [label(k), typeof v === "number" ? fmtStat(k, v) : preview(v, 80)]),
          ]} />`
        }
      </div>
    </div>
  </section>`;
}

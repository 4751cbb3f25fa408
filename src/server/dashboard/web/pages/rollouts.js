// Rollouts: counts per status, filters (status, mode, id), sortable columns, paging, live refresh.
import { useEffect, useState } from "preact/hooks";
import { api } from "../api.js";
import { fmtDuration, fmtInt, fmtTime } from "../format.js";
import { ErrorBox, Pager, Status, html, rolloutHref, useLoad } from "../ui.js";

export const ROLLOUT_STATUSES = ["queuing", "preparing", "running", "requeuing", "succeeded", "failed", "cancelled"];
const MODES = ["train", "val", "test"];
const PAGE = 50;

const COLUMNS = [
  ["rollout_id", "Rollout"],
  ["status", "Status"],
  ["mode", "Mode"],
  [null, "Attempt"],
  [null, "Worker"],
  ["start_time", "Started"],
  [null, "Duration"],
  ["resources_id", "Resources"],
];

/** The filters in the address (`#/rollouts?status=failed&mode=val&q=…&sort=…&order=…&offset=…`), so Back returns to them. */
function useFiltersInHash(status, mode, search, sort, offset) {
  useEffect(() => {
    const p = new URLSearchParams();
    if (status.length > 0) p.set("status", status.join(","));
    if (mode) p.set("mode", mode);
    if (search) p.set("q", search);
    if (sort.by !== "start_time" || sort.order !== "desc") p.set("sort", `${sort.by}:${sort.order}`);
    if (offset > 0) p.set("offset", String(offset));
    const hash = `#/rollouts${p.size > 0 ? `?${p}` : ""}`;
    // replaceState: no hashchange, no new history entry per keystroke.
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }, [status.join(), mode, search, sort.by, sort.order, offset]);
}

export function RolloutsPage({ params = new URLSearchParams() }) {
  const [status, setStatus] = useState(() => (params.get("status") ?? "").split(",").filter((s) => ROLLOUT_STATUSES.includes(s)));
  const [mode, setMode] = useState(() => (MODES.includes(params.get("mode")) ? params.get("mode") : ""));
  const [search, setSearch] = useState(() => params.get("q") ?? "");
  const [sort, setSort] = useState(() => {
    const [by, order] = (params.get("sort") ?? "").split(":");
    return COLUMNS.some(([key]) => key && key === by) && (order === "asc" || order === "desc")
      ? { by, order }
      : { by: "start_time", order: "desc" };
  });
  const [offset, setOffset] = useState(() => Math.max(0, Number(params.get("offset")) || 0));
  useFiltersInHash(status, mode, search, sort, offset);
  const filters = { mode_in: mode || undefined, rollout_id_contains: search.trim() || undefined };
  const counts = useLoad(() => api("statistics/rollouts", { query: filters }), [mode, search], { live: true });
  const rows = useLoad(
    () =>
      api("rollouts", {
        query: { ...filters, status_in: status, sort_by: sort.by, sort_order: sort.order, limit: PAGE, offset },
      }),
    [status.join(), mode, search, sort.by, sort.order, offset],
    { live: true },
  );
  const toggleStatus = (s) => {
    setOffset(0);
    setStatus(status.includes(s) ? status.filter((x) => x !== s) : [...status, s]);
  };
  const sortBy = (by) => {
    setOffset(0);
    setSort(sort.by === by ? { by, order: sort.order === "asc" ? "desc" : "asc" } : { by, order: by === "start_time" ? "desc" : "asc" });
  };
  const byStatus = counts.data?.by_status ?? {};
  const page = rows.data;
  return html`<section>
    <div class="page-head">
      <h1>Rollouts</h1>
      <span class="muted" data-testid="rollouts-total">${fmtInt(counts.data?.total)} in all</span>
    </div>
    <div class="chips" data-testid="status-counts">
      ${ROLLOUT_STATUSES.map(
        (s) => html`<button key=${s} class=${`chip s-${s} ${status.includes(s) ? "on" : ""}`} aria-pressed=${status.includes(s)}
          data-status=${s} onClick=${() => toggleStatus(s)}>${s} <b>${fmtInt(byStatus[s] ?? 0)}</b></button>`,
      )}
    </div>
    <div class="toolbar">
      <input type="search" placeholder="Search rollout id" aria-label="Search rollout id" value=${search}
        onInput=${(e) => (setOffset(0), setSearch(e.currentTarget.value))} />
      <label>Mode <select aria-label="Mode" value=${mode} onChange=${(e) => (setOffset(0), setMode(e.currentTarget.value))}>
        <option value="">all</option>${MODES.map((m) => html`<option key=${m} value=${m}>${m}</option>`)}
      </select></label>
      ${page && html`<${Pager} offset=${offset} limit=${PAGE} total=${page.total} onChange=${setOffset} />`}
    </div>
    <${ErrorBox} error=${rows.error || counts.error} />
    <table class="grid" data-testid="rollouts-table">
      <thead><tr>${COLUMNS.map(
        ([key, label]) =>
          html`<th key=${label} class=${key ? "sortable" : ""} onClick=${key ? () => sortBy(key) : undefined}
            aria-sort=${sort.by === key ? (sort.order === "asc" ? "ascending" : "descending") : undefined}>
            ${label}${sort.by === key ? (sort.order === "asc" ? " ▲" : " ▼") : ""}</th>`,
      )}</tr></thead>
      <tbody>
        ${(page?.items ?? []).map((r) => {
          const a = r.attempt;
          const end = r.end_time ?? (["succeeded", "failed", "cancelled"].includes(r.status) ? null : Date.now() / 1000);
          return html`<tr key=${r.rollout_id} data-rollout=${r.rollout_id}>
            <td><a href=${rolloutHref(r.rollout_id)} class="mono">${r.rollout_id}</a></td>
            <td><${Status} value=${r.status} /></td>
            <td>${r.mode ?? "–"}</td>
            <td>${a ? html`#${a.sequence_id} <${Status} value=${a.status} />` : "–"}</td>
            <td class="mono">${a?.worker_id ?? "–"}</td>
            <td>${fmtTime(r.start_time)}</td>
            <td>${end === null ? "–" : fmtDuration(end - r.start_time)}</td>
            <td class="mono">${r.resources_id ?? "–"}</td>
          </tr>`;
        })}
        ${page && page.items.length === 0 && html`<tr><td colspan="8" class="muted empty">No rollouts match.</td></tr>`}
      </tbody>
    </table>
  </section>`;
}

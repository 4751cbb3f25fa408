// Rollouts: counts per status, filters (status, mode, id), sortable columns, paging, live refresh.
import { useEffect, useState } from "preact/hooks";
import { api } from "../api.js";
import { fmtDuration, fmtInt, fmtNumber, fmtTime } from "../format.js";
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
  [null, "Reward"],
  ["resources_id", "Resources"],
];

const DEFAULT_SORT = { by: "start_time", order: "desc" };

/** A row's reward: a number, "none" when its attempt has none, "…" until it is known. */
function rewardText(rewards, id) {
  if (!rewards || !Object.hasOwn(rewards, id)) return "…";
  return rewards[id] === null ? "none" : fmtNumber(rewards[id]);
}

/** The filters as written in the address: `#/rollouts?status=failed,running&mode=val&q=…&sort=rollout_id:asc&offset=50`. */
function filtersFromParams(params) {
  const [by, order] = (params.get("sort") ?? "").split(":");
  const sortable = COLUMNS.some(([key]) => key && key === by) && (order === "asc" || order === "desc");
  return {
    status: (params.get("status") ?? "").split(",").filter((s) => ROLLOUT_STATUSES.includes(s)),
    mode: MODES.includes(params.get("mode")) ? params.get("mode") : "",
    search: params.get("q") ?? "",
    sort: sortable ? { by, order } : DEFAULT_SORT,
    offset: Math.max(0, Math.floor(Number(params.get("offset"))) || 0),
  };
}

function hashOf(f) {
  const p = new URLSearchParams();
  if (f.status.length > 0) p.set("status", f.status.join(","));
  if (f.mode) p.set("mode", f.mode);
  if (f.search) p.set("q", f.search);
  if (f.sort.by !== DEFAULT_SORT.by || f.sort.order !== DEFAULT_SORT.order) p.set("sort", `${f.sort.by}:${f.sort.order}`);
  if (f.offset > 0) p.set("offset", String(f.offset));
  return `#/rollouts${p.size > 0 ? `?${p}` : ""}`;
}

/**
 * The filters live in the address, so Back (or a shared link) returns to them: each change replaces the
 * address (no history entry per keystroke), and an address the user navigates to replaces the filters.
 */
function useFiltersInAddress(params) {
  const [f, setF] = useState(() => filtersFromParams(params));
  const asked = params.toString();
  useEffect(() => {
    const next = filtersFromParams(params);
    if (hashOf(next) !== hashOf(f)) setF(next);
  }, [asked]);
  useEffect(() => {
    const hash = hashOf(f);
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }, [hashOf(f)]);
  // Any change but paging starts again at the first page.
  const update = (patch) => setF({ ...f, offset: 0, ...patch });
  return [f, update];
}

export function RolloutsPage({ params = new URLSearchParams() }) {
  const [{ status, mode, search, sort, offset }, update] = useFiltersInAddress(params);
  const setOffset = (o) => update({ offset: o });
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
  // The final reward of each row's latest attempt, read for the rows shown (GET statistics/rewards).
  const ids = (rows.data?.items ?? []).map((r) => r.rollout_id);
  const rewards = useLoad(() => (ids.length > 0 ? api("statistics/rewards", { query: { rollout_id_in: ids } }) : null), [ids.join()], {
    live: true,
  });
  const toggleStatus = (s) => update({ status: status.includes(s) ? status.filter((x) => x !== s) : [...status, s] });
  const sortBy = (by) =>
    update({
      sort: sort.by === by ? { by, order: sort.order === "asc" ? "desc" : "asc" } : { by, order: by === "start_time" ? "desc" : "asc" },
    });
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
        onInput=${(e) => update({ search: e.currentTarget.value })} />
      <label>Mode <select aria-label="Mode" value=${mode} onChange=${(e) => update({ mode: e.currentTarget.value })}>
        <option value="">all</option>${MODES.map((m) => html`<option key=${m} value=${m}>${m}</option>`)}
      </select></label>
      ${page && html`<${Pager} offset=${offset} limit=${PAGE} total=${page.total} onChange=${setOffset} />`}
    </div>
    <${ErrorBox} error=${rows.error || counts.error || rewards.error} />
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
            <td data-reward>${rewardText(rewards.data?.rewards, r.rollout_id)}</td>
            <td class="mono">${r.resources_id ?? "–"}</td>
          </tr>`;
        })}
        ${page && page.items.length === 0 && html`<tr><td colspan=${COLUMNS.length} class="muted empty">No rollouts match.</td></tr>`}
      </tbody>
    </table>
  </section>`;
}

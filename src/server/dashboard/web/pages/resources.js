// Resources: every resources id (newest first; `version` counts the updates of one id) with its prompt templates and LLM endpoints, and a diff between two versions.
import { useState } from "preact/hooks";
import { api } from "../api.js";
import { diffLines } from "../diff.js";
import { fmtTime, pretty } from "../format.js";
import { ErrorBox, Json, Pager, html, useLoad } from "../ui.js";

const PAGE = 20;

function Resource({ name, r }) {
  const type = r?.resource_type ?? "?";
  let body;
  if (type === "prompt_template")
    body = html`<pre class="template">${String(r.template ?? "")}</pre><div class="muted">engine: ${String(r.engine ?? "–")}</div>`;
  else if (type === "llm" || type === "proxy_llm")
    body = html`<div class="kv-inline"><span>endpoint</span><b class="mono">${String(r.endpoint ?? "–")}</b><span>model</span><b class="mono">${String(r.model ?? "–")}</b></div>
      ${r.sampling_parameters && html`<${Json} value=${r.sampling_parameters} />`}`;
  else body = html`<${Json} value=${r} />`;
  return html`<div class="resource"><div class="resource-head"><b>${name}</b> <span class="tag">${String(type)}</span></div>${body}</div>`;
}

function Diff({ from, to }) {
  const lines = diffLines(pretty(from.resources), pretty(to.resources));
  const changed = lines.filter((l) => l.op !== " ").length;
  return html`<div class="card" data-testid="resources-diff">
    <h3><span class="mono">${from.resources_id}</span> v${from.version} → <span class="mono">${to.resources_id}</span> v${to.version} <span class="muted">${changed === 0 ? "no differences" : `${changed} lines changed`}</span></h3>
    <pre class="diff">${lines.map((l, i) => html`<div key=${i} class=${l.op === "+" ? "add" : l.op === "-" ? "del" : ""}>${l.op} ${l.line}</div>`)}</pre>
  </div>`;
}

export function ResourcesPage() {
  const [offset, setOffset] = useState(0);
  const [pair, setPair] = useState(null);
  const res = useLoad(() => api("resources", { query: { sort_by: "update_time", sort_order: "desc", limit: PAGE, offset } }), [offset], {
    live: true,
  });
  const items = res.data?.items ?? [];
  const byId = new Map(items.map((v) => [v.resources_id, v]));
  const chosen = pair ?? (items.length >= 2 ? [items[1].resources_id, items[0].resources_id] : null);
  const from = chosen && byId.get(chosen[0]);
  const to = chosen && byId.get(chosen[1]);
  const pick = (i, id) => setPair(chosen ? chosen.map((x, k) => (k === i ? id : x)) : [id, id]);
  return html`<section>
    <div class="page-head"><h1>Resources</h1>${res.data && html`<${Pager} offset=${offset} limit=${PAGE} total=${res.data.total} onChange=${setOffset} />`}</div>
    <${ErrorBox} error=${res.error} />
    ${res.data && items.length === 0 && html`<p class="muted">No resources yet: an algorithm publishes them with addResources.</p>`}
    ${
      items.length >= 2 &&
      html`<div class="toolbar">
      <span>Compare</span>
      <select aria-label="Diff from" value=${chosen[0]} onChange=${(e) => pick(0, e.currentTarget.value)}>${items.map((v) => html`<option key=${v.resources_id} value=${v.resources_id}>${v.resources_id} (v${v.version})</option>`)}</select>
      <span>with</span>
      <select aria-label="Diff to" value=${chosen[1]} onChange=${(e) => pick(1, e.currentTarget.value)}>${items.map((v) => html`<option key=${v.resources_id} value=${v.resources_id}>${v.resources_id} (v${v.version})</option>`)}</select>
    </div>`
    }
    ${from && to && html`<${Diff} from=${from} to=${to} />`}
    <div data-testid="resources-list">${items.map(
      (v) => html`<div class="card version" key=${v.resources_id} data-resources=${v.resources_id}>
        <div class="version-head"><b class="mono">${v.resources_id}</b> <span class="tag">version ${v.version}</span> <span class="muted">created ${fmtTime(v.create_time)}, updated ${fmtTime(v.update_time)}</span></div>
        <div class="resources">${Object.entries(v.resources ?? {}).map(([name, r]) => html`<${Resource} key=${name} name=${name} r=${r} />`)}</div>
      </div>`,
    )}</div>
  </section>`;
}

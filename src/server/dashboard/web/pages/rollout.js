// One rollout: its attempts, the span waterfall with a span's attributes, LLM calls, rewards and
// annotations, the triplets an adapter makes from it, and the rollout's own input and metadata.
import { useMemo, useState } from "preact/hooks";
import { api } from "../api.js";
import { useSpans } from "../live-spans.js";
import { fmtDuration, fmtInt, fmtNumber, fmtTime, pretty, preview } from "../format.js";
import { isAnnotation, isError, isLlmCall, isReward, llmCall, rewardValues, timeRange, toolCalls, treeRows } from "../spans.js";
import { ErrorBox, Json, KeyValues, Status, Tabs, VirtualList, html, useLoad } from "../ui.js";

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const plural = (n, what) => `${fmtInt(n)} ${what}${n === 1 ? "" : "s"}`;
const ROW = 24;

export function RolloutPage({ rolloutId }) {
  const rollout = useLoad(() => api(`rollouts/${encodeURIComponent(rolloutId)}`), [rolloutId], { live: true });
  const live = rollout.data !== null && !TERMINAL.has(rollout.data?.status);
  const attempts = useLoad(() => api(`rollouts/${encodeURIComponent(rolloutId)}/attempts`, { query: { limit: 1000 } }), [rolloutId, live], {
    live,
  });
  const [attemptId, setAttemptId] = useState("latest");
  const spans = useSpans(rolloutId, attemptId, { live });
  const [tab, setTab] = useState("trace");
  const r = rollout.data;
  if (rollout.error) return html`<${ErrorBox} error=${rollout.error} />`;
  if (rollout.loading && !r) return html`<p class="muted">Loading…</p>`;
  if (r === null)
    return html`<section><h1>Rollout not found</h1><p class="mono">${rolloutId}</p><a href="#/rollouts">All rollouts</a></section>`;
  const list = spans.data?.items ?? [];
  // in call order (sequence ids are given as the calls arrive), so the position is the turn
  const calls = list.filter(isLlmCall).sort((a, b) => a.sequence_id - b.sequence_id || a.start_time - b.start_time);
  const toolCallCount = calls.reduce((n, s) => n + llmCall(s).completion.reduce((k, m) => k + toolCalls(m).length, 0), 0);
  const rewards = list.filter(isReward);
  // What annotation spans say besides a reward (emitReward also writes annotation spans; those show above).
  const annotations = list.filter(isAnnotation).flatMap((s) =>
    Object.entries(s.attributes ?? {})
      .filter(([k]) => !k.startsWith("agentlightning.reward."))
      .map(([k, v]) => [s.span_id + k, k, v]),
  );
  return html`<section>
    <div class="page-head">
      <h1><a href="#/rollouts" class="muted">Rollouts</a> / <span class="mono" data-testid="rollout-id">${r.rollout_id}</span></h1>
      <${Status} value=${r.status} />
    </div>
    <div class="summary">
      <${KeyValues} rows=${[
        ["mode", r.mode ?? "–"],
        ["started", fmtTime(r.start_time)],
        ["ended", fmtTime(r.end_time)],
        ["duration", r.end_time ? fmtDuration(r.end_time - r.start_time) : "–"],
        ["resources", r.resources_id ? html`<a class="mono" href="#/resources">${r.resources_id}</a>` : "–"],
        ["attempts", `${attempts.data?.total ?? "–"} of at most ${r.config?.max_attempts ?? 1}`],
        ["spans", spans.data ? fmtInt(spans.data.total) : "…"],
        ["turns", spans.data ? `${plural(calls.length, "LLM call")} · ${plural(toolCallCount, "tool call")}` : "…"],
      ]} />
      <div class="rewards" data-testid="rewards">
        <h3>Rewards</h3>
        ${rewards.length === 0 && html`<p class="muted">No reward spans.</p>`}
        ${rewards.flatMap((s) => rewardValues(s).map((d) => html`<div class="reward-pill" key=${s.span_id + d.name}>${d.name}: <b>${fmtNumber(d.value)}</b></div>`))}
        <h3>Annotations</h3>
        <div data-testid="annotations">
          ${annotations.length === 0 && html`<p class="muted">No annotations.</p>`}
          ${annotations.map(([key, k, v]) => html`<div class="annotation-pill" key=${key}>${k}: <b>${preview(v, 60)}</b></div>`)}
        </div>
      </div>
    </div>
    <${AttemptsTable} attempts=${attempts.data?.items ?? []} selected=${attemptId} onSelect=${setAttemptId} />
    <${Tabs} tabs=${[
      ["trace", `Trace (${fmtInt(list.length)})`],
      ["llm", `LLM calls (${calls.length})`],
      ["triplets", "Triplets"],
      ["rollout", "Input & metadata"],
    ]} value=${tab} onChange=${setTab} />
    <${ErrorBox} error=${spans.error || attempts.error} />
    ${tab === "trace" && html`<${Trace} spans=${list} />`}
    ${tab === "llm" && html`<${LlmCalls} spans=${calls} />`}
    ${tab === "triplets" && html`<${Triplets} rolloutId=${rolloutId} attemptId=${attemptId} />`}
    ${
      tab === "rollout" &&
      html`<div class="cols"><div><h3>Input</h3><${Json} value=${r.input} /></div><div><h3>Metadata</h3><${Json} value=${r.metadata} /><h3>Config</h3><${Json} value=${r.config} /></div></div>`
    }
  </section>`;
}

function AttemptsTable({ attempts, selected, onSelect }) {
  if (attempts.length === 0) return null;
  const latest = attempts.reduce((a, b) => (b.sequence_id > a.sequence_id ? b : a), attempts[0]);
  return html`<table class="grid compact" data-testid="attempts-table">
    <thead><tr><th>Attempt</th><th>Status</th><th>Worker</th><th>Started</th><th>Ended</th><th>Duration</th><th>Last heartbeat</th><th></th></tr></thead>
    <tbody>${attempts.map((a) => {
      const isSelected = selected === a.attempt_id || (selected === "latest" && a === latest);
      return html`<tr key=${a.attempt_id} class=${isSelected ? "selected" : ""}>
        <td class="mono">#${a.sequence_id} ${a.attempt_id}${a.sequence_id > 1 ? html` <span class="tag">retry ${a.sequence_id - 1}</span>` : ""}</td>
        <td><${Status} value=${a.status} /></td>
        <td class="mono">${a.worker_id ?? "–"}</td>
        <td>${fmtTime(a.start_time)}</td>
        <td>${fmtTime(a.end_time)}</td>
        <td>${a.end_time ? fmtDuration(a.end_time - a.start_time) : "–"}</td>
        <td>${fmtTime(a.last_heartbeat_time)}</td>
        <td>${isSelected ? html`<span class="muted">shown</span>` : html`<button class="link" onClick=${() => onSelect(a === latest ? "latest" : a.attempt_id)}>show spans</button>`}</td>
      </tr>`;
    })}</tbody>
  </table>`;
}

function Trace({ spans }) {
  const [collapsed, setCollapsed] = useState(() => new Set());
  const [selectedId, setSelectedId] = useState(null);
  const [filter, setFilter] = useState("");
  const rows = useMemo(() => {
    const all = treeRows(spans, collapsed);
    const f = filter.trim().toLowerCase();
    return f ? all.filter((r) => r.span.name.toLowerCase().includes(f)) : all;
  }, [spans, collapsed, filter]);
  const range = useMemo(() => timeRange(spans), [spans]);
  const total = Math.max(range.end - range.start, 1e-9);
  const selected = spans.find((s) => s.span_id === selectedId) ?? null;
  const toggle = (id) => {
    const next = new Set(collapsed);
    next.has(id) ? next.delete(id) : next.add(id);
    setCollapsed(next);
  };
  if (spans.length === 0) return html`<p class="muted">No spans for this attempt.</p>`;
  const renderRow = ({ span, depth, children }) => {
    const left = ((span.start_time - range.start) / total) * 100;
    const dur = (span.end_time ?? span.start_time) - span.start_time;
    const width = Math.max((dur / total) * 100, 0.3);
    const kind = isError(span) ? "err" : isReward(span) ? "reward" : isAnnotation(span) ? "annotation" : isLlmCall(span) ? "llm" : "";
    return html`<div key=${span.span_id} class=${`wf-row ${kind} ${span.span_id === selectedId ? "selected" : ""}`} style=${{ height: `${ROW}px` }}
      data-span=${span.span_id} data-depth=${depth} onClick=${() => setSelectedId(span.span_id)}>
      <div class="wf-name" style=${{ paddingLeft: `${6 + depth * 14}px` }} title=${span.name}>
        ${
          children > 0
            ? html`<button class="twisty" aria-label=${collapsed.has(span.span_id) ? "expand" : "collapse"} onClick=${(e) => (e.stopPropagation(), toggle(span.span_id))}>${collapsed.has(span.span_id) ? "▸" : "▾"}</button>`
            : html`<span class="twisty"></span>`
        }
        <span class="wf-label">${span.name}</span>
        <span class="wf-dur">${fmtDuration(dur)}</span>
      </div>
      <div class="wf-track"><div class="wf-bar" style=${{ left: `${left}%`, width: `${width}%` }}></div></div>
    </div>`;
  };
  return html`<div class="trace">
    <div class="trace-main">
      <div class="toolbar">
        <input type="search" placeholder="Filter span names" aria-label="Filter span names" value=${filter} onInput=${(e) => setFilter(e.currentTarget.value)} />
        <span class="muted">${fmtInt(rows.length)} rows · ${fmtDuration(range.end - range.start)}</span>
        <span class="legend"><i class="llm"></i>LLM call <i class="reward"></i>reward <i class="annotation"></i>annotation <i class="err"></i>error</span>
      </div>
      <div class="wf-axis" aria-hidden="true"><div class="muted">span</div><div class="wf-ticks">${[0, 0.25, 0.5, 0.75, 1].map(
        (f) => html`<span key=${f} style=${{ left: `${f * 100}%` }}>${fmtDuration(f * (range.end - range.start))}</span>`,
      )}</div></div>
      <${VirtualList} items=${rows} rowHeight=${ROW} height=${Math.min(560, Math.max(rows.length * ROW, ROW * 4))} renderRow=${renderRow} className="waterfall" testId="waterfall" />
    </div>
    <aside class="span-detail" data-testid="span-detail">${selected ? html`<${SpanDetail} span=${selected} />` : html`<p class="muted">Select a span to see its attributes.</p>`}</aside>
  </div>`;
}

function attributeText(v) {
  return typeof v === "string" ? v : pretty(v);
}

function SpanDetail({ span }) {
  const attrs = Object.entries(span.attributes ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return html`<div>
    <h3 class="wrap">${span.name}</h3>
    <${KeyValues} rows=${[
      ["span", span.span_id],
      ["parent", span.parent_id ?? "–"],
      ["sequence", String(span.sequence_id)],
      ["start", fmtTime(span.start_time)],
      ["duration", fmtDuration((span.end_time ?? span.start_time) - span.start_time)],
      ["status", html`<${Status} value=${span.status?.status_code} />${span.status?.description ? ` ${span.status.description}` : ""}`],
    ]} />
    ${isLlmCall(span) && html`<h4>LLM call</h4><${LlmCall} span=${span} />`}
    <h4>Attributes (${attrs.length})</h4>
    <table class="kv attrs" data-testid="span-attributes"><tbody>
      ${attrs.map(([k, v]) => html`<tr key=${k}><th class="mono">${k}</th><td><pre>${attributeText(v)}</pre></td></tr>`)}
    </tbody></table>
    ${(span.events ?? []).length > 0 && html`<h4>Events</h4>${span.events.map((e, i) => html`<div key=${i} class="event"><b>${e.name}</b> ${fmtTime(e.timestamp)}<${Json} value=${e.attributes} /></div>`)}`}
  </div>`;
}

// A message: its role (a tool result names the call it answers), its text, and the tools it called.
function Message({ m }) {
  const content = m.content ?? m.value ?? "";
  const calls = toolCalls(m);
  return html`<div class=${`msg role-${String(m.role ?? "unknown")}`}>
    <div class="role">${String(m.role ?? "?")}${m.tool_call_id !== undefined && html` <span class="mono">result of ${String(m.tool_call_id)}</span>`}</div>
    ${(content !== "" || calls.length === 0) && html`<pre>${attributeText(content)}</pre>`}
    ${calls.map(
      (c, i) =>
        html`<div class="tool-call" key=${i} data-testid="tool-call"><span class="tag">tool call</span> <b class="mono">${String(c.name ?? "?")}</b> <span class="muted mono">${String(c.id ?? "")}</span><pre>${attributeText(c.arguments ?? "")}</pre></div>`,
    )}
  </div>`;
}

/** One line for a call: the tools the reply called, else its text. */
function replyPreview(call) {
  const reply = call.completion[0] ?? {};
  const used = toolCalls(reply);
  return used.length > 0 ? used.map((c) => `${c.name ?? "?"}(${c.arguments ?? ""})`).join(", ") : String(reply.content ?? "");
}

function LlmCall({ span }) {
  const c = llmCall(span);
  return html`<div class="llm-call" data-testid="llm-call">
    <div class="muted">${c.model ?? "model ?"} · prompt ${c.promptTokens ?? "?"} tokens · completion ${c.completionTokens ?? "?"} tokens</div>
    ${c.prompt.map((m, i) => html`<${Message} key=${`p${i}`} m=${m} />`)}
    ${c.completion.map((m, i) => html`<${Message} key=${`c${i}`} m=${{ role: m.role ?? "assistant", ...m }} />`)}
  </div>`;
}

const LLM_PAGE = 100;

function LlmCalls({ spans }) {
  const [shown, setShown] = useState(LLM_PAGE);
  if (spans.length === 0) return html`<p class="muted">No LLM-call spans (gen_ai.* attributes) in this attempt.</p>`;
  const more = spans.length - shown;
  return html`<div class="llm-list">${spans
    .slice(0, shown)
    .map(
      (s, i) =>
        html`<details key=${s.span_id} class="card"><summary><b>Turn ${i + 1}</b> <span class="muted">${s.name} · ${fmtTime(s.start_time)} · ${fmtDuration((s.end_time ?? s.start_time) - s.start_time)} · ${preview(replyPreview(llmCall(s)), 60)}</span></summary><${LlmCall} span=${s} /></details>`,
    )}
  ${more > 0 && html`<button onClick=${() => setShown(shown + LLM_PAGE)}>Show ${Math.min(more, LLM_PAGE)} more of ${more}</button>`}
  </div>`;
}

function Triplets({ rolloutId, attemptId }) {
  const [adapter, setAdapter] = useState("tracer");
  const res = useLoad(
    () => api(`rollouts/${encodeURIComponent(rolloutId)}/triplets`, { query: { adapter, attempt_id: attemptId } }),
    [rolloutId, attemptId, adapter],
  );
  const d = res.data;
  return html`<div data-testid="triplets">
    <div class="toolbar">
      <label>Adapter <select aria-label="Adapter" value=${adapter} onChange=${(e) => setAdapter(e.currentTarget.value)}>
        <option value="tracer">TracerTraceToTriplet (agent's LLM spans)</option>
        <option value="proxy">LlmProxyTraceToTriplet (policy server's spans)</option>
      </select></label>
      ${d && html`<span class="muted">${d.triplets.length} triplets from ${d.spans} spans</span>`}
    </div>
    <${ErrorBox} error=${res.error} />
    ${d?.error && html`<div class="error">The adapter could not read this trace: ${d.error}</div>`}
    ${d?.triplets.map(
      (t, i) => html`<div class="card triplet" key=${i}>
        <div class="triplet-head"><b>Triplet ${i + 1}</b> <span class="reward-pill">reward: <b>${t.reward === null ? "none" : fmtNumber(t.reward)}</b></span></div>
        <div class="cols"><div><h4>Prompt</h4><${Json} value=${t.prompt} /></div><div><h4>Response</h4><${Json} value=${t.response} /></div></div>
        ${Object.keys(t.metadata ?? {}).length > 0 && html`<details><summary>metadata</summary><${Json} value=${t.metadata} /></details>`}
      </div>`,
    )}
  </div>`;
}

// Training curves: the numeric attributes of the spans algorithms write under their bookkeeping
// rollouts (GRPO's `grpo.step` / `grpo.validation`, PPO's `ppo.*`, APO's `apo.*`, TrainingMetrics' `metrics`, ...),
// one uPlot chart per attribute.
// Which span names are charted is a list of patterns (`*` matches anything), kept in localStorage.
import { useEffect, useRef, useState } from "preact/hooks";
import { api } from "../api.js";
import { useSpans } from "../live-spans.js";
import { fmtNumber, fmtTime } from "../format.js";
import { ErrorBox, Status, html, useLoad } from "../ui.js";

const PATTERNS_KEY = "agl.dashboard.trainingSpans";
export const DEFAULT_PATTERNS = "grpo.step, grpo.validation, ppo.step, ppo.validation, apo.*, sft.*, metrics";
/** Charts of these come first, in this order. */
const FIRST = [/reward/, /accuracy/, /score/, /(^|\.)kl/, /clip/, /tokens?_per_s|tokens_s|throughput/, /loss/];
const WHOLE_STEPS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000];

const globToRegExp = (glob) => new RegExp(`^${glob.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
export const patternsOf = (text) =>
  text
    .split(/[,\s]+/)
    .map((p) => p.trim())
    .filter(Boolean)
    .map(globToRegExp);

/** For each matching span name: its points' x (the `*.step` attribute, or the span's rank) and numeric attributes. */
export function seriesOf(spans, patterns) {
  const groups = new Map();
  for (const s of spans) {
    if (!patterns.some((p) => p.test(s.name))) continue;
    if (!groups.has(s.name)) groups.set(s.name, []);
    groups.get(s.name).push(s);
  }
  const out = [];
  for (const [name, list] of groups) {
    list.sort((a, b) => a.sequence_id - b.sequence_id);
    // The x axis: a step (or round) attribute that increases from span to span; else the span's rank.
    const increasing = (k) =>
      list.every((s, i) => typeof s.attributes?.[k] === "number" && (i === 0 || s.attributes[k] > list[i - 1].attributes[k]));
    const stepKey = Object.keys(list[0].attributes ?? {})
      .filter((k) => k === "step" || k.endsWith(".step") || k.endsWith(".round"))
      .sort((a, b) => Number(a.endsWith(".round")) - Number(b.endsWith(".round")))
      .find(increasing);
    const xs = list.map((s, i) => (stepKey && typeof s.attributes[stepKey] === "number" ? s.attributes[stepKey] : i + 1));
    const keys = new Set();
    for (const s of list) for (const [k, v] of Object.entries(s.attributes ?? {})) if (typeof v === "number" && k !== stepKey) keys.add(k);
    const rank = (k) => {
      const i = FIRST.findIndex((re) => re.test(k));
      return i < 0 ? FIRST.length : i;
    };
    const metrics = [...keys]
      .sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1))
      .map((k) => ({ key: k, ys: list.map((s) => (typeof s.attributes?.[k] === "number" ? s.attributes[k] : null)) }));
    out.push({ name, xAxis: stepKey ?? "index", xs, metrics });
  }
  return out;
}

function Chart({ title, xs, ys, xLabel }) {
  const box = useRef(null);
  useEffect(() => {
    let plot = null;
    let cancelled = false;
    import("uplot").then(({ default: uPlot }) => {
      if (cancelled || !box.current) return;
      const css = getComputedStyle(document.documentElement);
      const fg = css.getPropertyValue("--muted").trim() || "#888";
      const grid = css.getPropertyValue("--line").trim() || "#ddd";
      const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
      plot = new uPlot(
        {
          width: Math.max(240, box.current.clientWidth),
          height: 180,
          legend: { show: false },
          cursor: { drag: { x: false, y: false } },
          scales: { x: { time: false } },
          axes: [
            // Steps and rounds are whole numbers: no ticks between them.
            { ...axis, label: xLabel, ...(xs.every(Number.isInteger) ? { incrs: WHOLE_STEPS } : {}) },
            { ...axis, size: 60 },
          ],
          series: [{}, { label: title, stroke: css.getPropertyValue("--accent").trim() || "#3b82f6", width: 2, points: { size: 5 } }],
        },
        [xs, ys],
        box.current,
      );
    });
    return () => {
      cancelled = true;
      plot?.destroy();
    };
  }, [title, xLabel, JSON.stringify(xs), JSON.stringify(ys)]);
  const last = [...ys].reverse().find((v) => v !== null);
  return html`<div class="card chart" data-testid="chart" data-title=${title} data-points=${xs.length} data-x=${xLabel}>
    <div class="chart-head"><b>${title}</b> <span class="muted">last ${last === undefined ? "–" : fmtNumber(last)} · ${xs.length} points</span></div>
    <div ref=${box} class="chart-box"></div>
  </div>`;
}

export function TrainingPage() {
  const [text, setText] = useState(() => localStorage.getItem(PATTERNS_KEY) || DEFAULT_PATTERNS);
  // What is typed (kept across live refreshes) is applied on Enter or when the field loses focus.
  const [draft, setDraft] = useState(text);
  const [runId, setRunId] = useState(null);
  const runs = useLoad(() => api("training/runs"), [], { live: true });
  const items = runs.data?.items ?? [];
  const run = items.find((r) => r.rollout_id === runId) ?? items[0] ?? null;
  const spans = useSpans(run?.rollout_id ?? null, null, { live: true });
  const groups = spans.data ? seriesOf(spans.data.items, patternsOf(text)) : [];
  return html`<section>
    <div class="page-head"><h1>Training</h1></div>
    <div class="toolbar">
      <label>Run <select aria-label="Run" value=${run?.rollout_id ?? ""} onChange=${(e) => setRunId(e.currentTarget.value)}>
        ${items.map((r) => html`<option key=${r.rollout_id} value=${r.rollout_id}>${r.kind} · ${fmtTime(r.start_time)} · ${r.rollout_id}</option>`)}
      </select></label>
      ${run && html`<${Status} value=${run.status} />`}
      <label class="grow">Span names <input aria-label="Span names" value=${draft} onInput=${(e) => setDraft(e.currentTarget.value)}
        onChange=${(e) => {
          localStorage.setItem(PATTERNS_KEY, e.currentTarget.value);
          setText(e.currentTarget.value);
        }} /></label>
    </div>
    <${ErrorBox} error=${runs.error || spans.error} />
    ${
      runs.data &&
      items.length === 0 &&
      html`<p class="muted">No training runs yet. Algorithms write their metrics as spans under a rollout whose <code>metadata.kind</code> ends in <code>-metrics</code> or <code>-history</code> (GRPO: <code>grpo-metrics</code>, APO: <code>apo-history</code>).</p>`
    }
    ${spans.data && groups.length === 0 && html`<p class="muted">No spans of this run match the span names above.</p>`}
    ${groups.map(
      (g) => html`<div key=${g.name} class="chart-group" data-span-name=${g.name}>
        <h2>${g.name} <span class="muted">${g.xs.length} spans</span></h2>
        <div class="charts">${g.metrics.map((m) => html`<${Chart} key=${m.key} title=${m.key} xs=${g.xs} ys=${m.ys} xLabel=${g.xAxis} />`)}</div>
      </div>`,
    )}
  </section>`;
}

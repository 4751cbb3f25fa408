/**
 * The page: settings, Start and Stop, the live reward curve (uPlot) and held-out accuracy, a few recent
 * rollouts with their model calls, and downloads of the trained weights and of the store. All the work is
 * in the training worker (worker.ts); this thread only draws, so the page never freezes. `window.tab`
 * holds what the page shows, for tests (test/browser/tab.test.ts).
 */
import uPlot from "uplot";
import type { GrpoReport } from "../../src/browser.ts";
import type { RolloutView } from "./loop.ts";
import {
  AGENT_DEFAULTS,
  type FromWorker,
  TAB_AGENTS,
  type TabAgentName,
  type TabSettings,
  type TabState,
  type ToWorker,
} from "./messages.ts";

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

const state: TabState = {
  running: false,
  done: false,
  error: null,
  backend: null,
  steps: [],
  validations: [],
  checkpointStep: null,
  stepsAtStop: null,
  longTasksMs: [],
  longestTaskMs: 0,
  messageMs: [],
  probe: null,
  rollouts: [],
  chart: [[], [], []],
};
(window as unknown as { tab: TabState }).tab = state;

// The settings: the agent's defaults, replaced by the URL's (?agent=calc-x&steps=…&batch=…&autostart=1).
const FIELDS = ["steps", "batch", "n", "lr", "valTasks", "valEvery", "runners", "seed", "loraRank"] as const;
const query = new URLSearchParams(location.search);
const agentName = query.get("agent") ?? "calc";
if (!(TAB_AGENTS as readonly string[]).includes(agentName)) throw new Error(`?agent=${agentName}: the agents are ${TAB_AGENTS.join(", ")}`);
/** The form filled with `agent`'s defaults, each replaced by the URL's value where it gives one. */
function fillForm(agent: TabAgentName, fromUrl: boolean): void {
  const defaults = AGENT_DEFAULTS[agent];
  $<HTMLSelectElement>("agent").value = agent;
  for (const f of FIELDS) $<HTMLInputElement>(f).value = (fromUrl ? query.get(f) : null) ?? String(defaults[f]);
  $<HTMLSelectElement>("backend").value = (fromUrl ? query.get("backend") : null) ?? defaults.backend;
}
fillForm(agentName as TabAgentName, true);
$<HTMLSelectElement>("agent").addEventListener("change", (e) => fillForm((e.target as HTMLSelectElement).value as TabAgentName, false));

const settings = (): TabSettings =>
  ({
    ...Object.fromEntries(FIELDS.map((f) => [f, Number($<HTMLInputElement>(f).value)])),
    backend: $<HTMLSelectElement>("backend").value as TabSettings["backend"],
    agent: $<HTMLSelectElement>("agent").value as TabAgentName,
  }) as TabSettings;

const status = (text: string, error = false) => {
  const el = $("status");
  el.textContent = text;
  el.className = error ? "error" : "";
};

// The chart: mean training reward per step, held-out accuracy at each validation.
const chart = new uPlot(
  {
    width: 720,
    height: 260,
    scales: { x: { time: false }, y: { range: [0, 1] } },
    axes: [{ label: "GRPO step" }, { label: "reward / accuracy" }],
    series: [
      { label: "step" },
      { label: "training reward", stroke: "#1f77b4", width: 2 },
      { label: "held-out accuracy", stroke: "#d62728", width: 2, spanGaps: true, points: { show: true, size: 7 } },
    ],
  },
  [[], [], []],
  $("chart"),
);

function redraw(): void {
  const steps = new Map<number, [number | null, number | null]>();
  for (const s of state.steps) steps.set(s.step, [s.reward, steps.get(s.step)?.[1] ?? null]);
  for (const v of state.validations) steps.set(v.step, [steps.get(v.step)?.[0] ?? null, v.accuracy]);
  const xs = [...steps.keys()].sort((a, b) => a - b);
  state.chart = [xs, xs.map((x) => steps.get(x)![0]), xs.map((x) => steps.get(x)![1])];
  chart.setData(state.chart);
  const [first, last] = [state.validations[0], state.validations.at(-1)];
  const pct = (a: number) => `${(a * 100).toFixed(1)} %`;
  $("accuracy").textContent =
    first === undefined
      ? "held-out accuracy: measured before the first step"
      : first === last
        ? `held-out accuracy: ${pct(first.accuracy)} at step ${first.step}`
        : `held-out accuracy: ${pct(first.accuracy)} at step ${first.step} → ${pct(last!.accuracy)} at step ${last!.step} (${((last!.accuracy - first.accuracy) * 100).toFixed(1)} points)`;
}

function showRollouts(rollouts: RolloutView[]): void {
  state.rollouts = rollouts;
  const rows = rollouts.flatMap((r) =>
    r.calls.map((c) => {
      const tr = document.createElement("tr");
      for (const text of [c.prompt, c.reply, String(r.reward ?? "–"), `v${c.version}`, `${c.promptTokens} + ${c.replyTokens}`]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }),
  );
  $("rollouts").replaceChildren(...rows);
}

function download(name: string, data: BlobPart, type: string): void {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([data], { type }));
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

// Main-thread tasks over 50 ms while training (there should be none: the work is in the worker).
/** The training's span on this thread's clock: from the first task after Start to the end of the run. */
let trainingSince = Number.POSITIVE_INFINITY;
let trainingUntil = Number.POSITIVE_INFINITY;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    if (e.startTime < trainingSince || e.startTime > trainingUntil) continue;
    state.longTasksMs.push(e.duration);
    state.longestTaskMs = Math.max(state.longestTaskMs, e.duration);
  }
}).observe({ type: "longtask", buffered: false });

let worker: Worker | null = null;
/** The last step's policy: our checkpoint, or a LoRA adapter's PEFT files (adapter_config.json has a button of its own). */
let files: Record<string, ArrayBuffer> | null = null;
const WEIGHTS_FILES = ["model.safetensors", "adapter_model.safetensors"];
const send = (m: ToWorker) => worker?.postMessage(m);

function onMessage(m: FromWorker): void {
  switch (m.type) {
    case "log":
      status(m.line);
      if (m.line.startsWith("training on ")) state.backend = m.line.slice("training on ".length).split(";")[0]!;
      break;
    case "report": {
      const r: GrpoReport = m.report;
      if (r.kind === "step") {
        state.steps.push({ step: r.step, reward: r.reward, seconds: r.seconds, rows: r.rows, trainedRows: r.trained_rows });
        status(`step ${r.step}: reward ${r.reward.toFixed(3)}, ${r.trained_rows}/${r.rows} rows trained, ${r.seconds.toFixed(1)} s`);
      } else state.validations.push({ step: r.step, accuracy: r.accuracy });
      redraw();
      break;
    }
    case "rollouts":
      showRollouts(m.rollouts);
      break;
    case "checkpoint":
      files = m.files;
      state.checkpointStep = m.step;
      $<HTMLButtonElement>("download").disabled = false;
      $("download").textContent = `Download ${"model.safetensors" in files ? "weights" : "LoRA adapter"} (step ${m.step})`;
      $("download-config").hidden = !("adapter_config.json" in files);
      break;
    case "store":
      download("store.json", m.json, "application/json");
      break;
    case "done":
      trainingUntil = performance.now();
      state.running = false;
      state.done = true;
      state.probe = m.probe;
      state.backend = m.backend;
      status(`Done: ${m.steps} steps in ${m.seconds.toFixed(0)} s on ${m.backend}. The policy of the last step can be downloaded.`);
      $<HTMLButtonElement>("stop").disabled = true;
      break;
    case "error":
      if (state.running) {
        trainingUntil = performance.now();
        state.running = false;
        state.error = m.message;
        $<HTMLButtonElement>("stop").disabled = true;
      }
      status(`${m.message}${files ? ` The weights of step ${state.checkpointStep} can still be downloaded.` : ""}`, true);
      break;
  }
}

$<HTMLFormElement>("form").addEventListener("submit", (event) => {
  event.preventDefault();
  if (worker) return;
  worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = (e: MessageEvent<FromWorker>) => {
    const t0 = performance.now();
    onMessage(e.data);
    state.messageMs.push(performance.now() - t0);
  };
  worker.onerror = (e) => onMessage({ type: "error", message: `the training worker failed: ${e.message}` });
  state.running = true;
  $<HTMLButtonElement>("start").disabled = true;
  $<HTMLButtonElement>("stop").disabled = false;
  $<HTMLButtonElement>("export").disabled = false;
  status("Loading the model…");
  const run = settings();
  // the calc checkpoint is one file; the Calc-X model is a Hugging Face folder (config, weights, tokenizer)
  const modelUrl = new URL(run.agent === "calc-x" ? "./calc-x/" : "./model.safetensors", location.href).href;
  send({ type: "start", settings: run, modelUrl });
  setTimeout(() => (trainingSince = performance.now()));
});
$("stop").addEventListener("click", () => {
  send({ type: "stop" });
  state.stepsAtStop = state.steps.length;
  $<HTMLButtonElement>("stop").disabled = true;
  status("Stopping after this step (and its held-out validation)…");
});
$("download").addEventListener("click", () => {
  const name = WEIGHTS_FILES.find((f) => files !== null && f in files);
  if (name) download(name, files![name]!, "application/octet-stream");
});
$("download-config").addEventListener("click", () => {
  if (files?.["adapter_config.json"]) download("adapter_config.json", files["adapter_config.json"], "application/json");
});
$("export").addEventListener("click", () => send({ type: "export-store" }));

redraw();
if (query.get("autostart") === "1") setTimeout(() => $<HTMLFormElement>("form").requestSubmit());

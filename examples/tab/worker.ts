/**
 * The training worker: the whole loop (loop.ts) off the page's main thread, so the page stays responsive
 * however long a step's work is. It reports each step, validation and checkpoint to the page, and answers
 * Stop and a store export at any time.
 */
import type { InMemoryLightningStore } from "../../src/browser.ts";
import { calcTabAgent, calcXTabAgent, type TabAgent } from "./agents.ts";
import { exportStore, runTab, type TabRun } from "./loop.ts";
import type { FromWorker, TabSettings, ToWorker } from "./messages.ts";

const post = (m: FromWorker, transfer: Transferable[] = []) => (self as unknown as Worker).postMessage(m, transfer);
const stop = new AbortController();
let store: InMemoryLightningStore | null = null;
let started = false;

/** The agent and its model, fetched: the calc checkpoint file, or the Calc-X model folder's files. */
async function loadAgent(name: TabSettings["agent"], modelUrl: string): Promise<TabAgent> {
  if (name === "calc-x") return calcXTabAgent(modelUrl);
  const res = await fetch(modelUrl);
  if (!res.ok) throw new Error(`could not load the checkpoint ${modelUrl}: HTTP ${res.status}`);
  return calcTabAgent(new Uint8Array(await res.arrayBuffer()));
}

async function start(m: Extract<ToWorker, { type: "start" }>): Promise<void> {
  const { agent: name, ...settings } = m.settings;
  const result = await runTab({
    ...settings,
    agent: await loadAgent(name, m.modelUrl),
    signal: stop.signal,
    log: (line) => post({ type: "log", line }),
    onStart: (run) => {
      store = run.store;
      // for the worker's devtools console (and tests): the store, the trainer and the policy of the run
      (self as unknown as { tabRun: TabRun }).tabRun = run;
    },
    onReport: (report) => post({ type: "report", report }),
    onRollouts: (rollouts) => post({ type: "rollouts", rollouts }),
    onCheckpoint: (files, step) => {
      const copies = Object.fromEntries(Object.entries(files).map(([name, bytes]) => [name, bytes.slice().buffer]));
      post({ type: "checkpoint", step, files: copies }, Object.values(copies));
    },
  });
  post({
    type: "done",
    backend: result.backend,
    seconds: result.seconds,
    steps: result.reports.filter((r) => r.kind === "step").length,
    probe: { ids: result.probe.ids, logits: Array.from(result.probe.logits), trainerLogProbs: Array.from(result.probe.trainerLogProbs) },
  });
}

self.onmessage = (event: MessageEvent<ToWorker>) => {
  const m = event.data;
  if (m.type === "stop") stop.abort();
  else if (m.type === "export-store") {
    if (store === null) post({ type: "error", message: "nothing to export yet: the store is created when the run starts" });
    else
      void exportStore(store).then(
        (data) => post({ type: "store", json: JSON.stringify(data) }),
        (e: unknown) => post({ type: "error", message: `store export failed: ${e instanceof Error ? e.message : String(e)}` }),
      );
  } else if (m.type === "start" && !started) {
    started = true;
    start(m).catch((e: unknown) => post({ type: "error", message: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }));
  }
};

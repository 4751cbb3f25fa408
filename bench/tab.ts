/**
 * The whole loop of examples/tab in a Chromium tab and the same run in Node: held-out accuracy (greedy,
 * the first `valTasks` held-out problems) before, along and after, and the wall time of the run (from
 * loading the model to the last validation). The tab's WebGPU here is SwiftShader (a CPU implementation);
 * Node runs the same `runTab` on its WebGPU adapter (Dawn: lavapipe here) and on the CPU Wasm engine.
 * docs/perf.md has a table per agent.
 *
 *   npx tsx bench/tab.ts [steps] [batch] [n] [valTasks]      # the agent's page defaults where not given
 *     --agent calc | calc-x        which agent the page trains [calc]
 *     --where tab-webgpu,tab-cpu,node-webgpu,node-cpu
 *                                  where to run it [tab-webgpu,node-webgpu,node-cpu]
 *     --seed N                     the run's seed [the page's: 0]
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { CALC_X_FILES, calcTabAgent, calcXTabAgent, type TabAgent } from "../examples/tab/agents.ts";
import { CALC_X_MODEL, CHECKPOINT } from "../examples/tab/build.ts";
import { runTab } from "../examples/tab/loop.ts";
import { AGENT_DEFAULTS, TAB_AGENTS, type TabAgentName, type TabRunSettings } from "../examples/tab/messages.ts";
import { probeGpu } from "../src/gpu/device.ts";
import { launchChromium, noChromium } from "../test/browser/chromium.ts";
import { driveTab, quantile, serveStaticTab } from "../test/browser/tab-driver.ts";

const PLACES = ["tab-webgpu", "tab-cpu", "node-webgpu", "node-cpu"] as const;
type Place = (typeof PLACES)[number];

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    agent: { type: "string", default: "calc" },
    where: { type: "string", default: "tab-webgpu,node-webgpu,node-cpu" },
    seed: { type: "string" },
  },
});
const agentName = values.agent as TabAgentName;
if (!TAB_AGENTS.includes(agentName)) throw new Error(`--agent must be one of ${TAB_AGENTS.join(", ")}, got ${values.agent}`);
const places = values.where.split(",") as Place[];
for (const p of places) if (!PLACES.includes(p)) throw new Error(`--where takes ${PLACES.join(", ")}, got ${p}`);
const defaults = AGENT_DEFAULTS[agentName];
const [steps, batch, n, valTasks] = [defaults.steps, defaults.batch, defaults.n, defaults.valTasks].map((d, i) =>
  Number(positionals[i] ?? d),
);
const settings: TabRunSettings = { ...defaults, steps, batch, n, valTasks, ...(values.seed ? { seed: Number(values.seed) } : {}) };

interface Row {
  where: string;
  accuracy: { step: number; accuracy: number }[];
  seconds: number;
}

const pct = (a: number) => (a * 100).toFixed(0);
const line = (r: Row) => {
  const first = r.accuracy[0]!.accuracy;
  const last = r.accuracy.at(-1)!.accuracy;
  return `| ${r.where} | ${r.accuracy.map((v) => pct(v.accuracy)).join(" / ")} % | ${((last - first) * 100).toFixed(0)} points | ${r.seconds.toFixed(0)} s |`;
};

async function nodeAgent(): Promise<TabAgent<unknown>> {
  if (agentName === "calc") return calcTabAgent(new Uint8Array(readFileSync(CHECKPOINT))) as TabAgent<unknown>;
  const files = Object.fromEntries(CALC_X_FILES.map((f) => [f, new Uint8Array(readFileSync(join(CALC_X_MODEL, f)))]));
  return (await calcXTabAgent(files)) as TabAgent<unknown>;
}

async function inNode(backend: "webgpu" | "cpu"): Promise<Row> {
  const r = await runTab({ ...settings, backend, agent: await nodeAgent() });
  return {
    where: `Node ${process.versions.node}, ${r.backend}`,
    accuracy: r.reports.filter((x) => x.kind === "validation").map((v) => ({ step: v.step, accuracy: v.accuracy })),
    seconds: r.seconds,
  };
}

async function inTab(backend: "webgpu" | "cpu"): Promise<Row> {
  const [browser, tab] = await Promise.all([launchChromium(), serveStaticTab()]);
  try {
    const run = await driveTab(browser, tab, { settings: { ...settings, agent: agentName, backend }, timeoutMs: 3_600_000 });
    if (run.state.error) throw new Error(run.state.error);
    const done = await run.page.evaluate(() => document.getElementById("status")!.textContent!);
    const long = run.state.longTasksMs;
    console.log(
      `tab (${backend}): longest main-thread task ${run.state.longestTaskMs.toFixed(0)} ms (${long.length} over 50 ms, ${long.filter((ms) => ms > 100).length} over 100 ms); on the thread's CPU clock the longest ${run.mainThread.longestCpuMs.toFixed(0)} ms; the page's work per message: median ${quantile(run.state.messageMs, 0.5).toFixed(1)} ms`,
    );
    return {
      where: `Chromium ${browser.version()}, ${run.state.backend}, in the tab`,
      accuracy: run.state.validations,
      // the run's own time (loading the model to the end), as the worker reported it
      seconds: Number(/in (\d+) s/.exec(done)?.[1] ?? run.seconds),
    };
  } finally {
    await browser.close();
    await tab.close();
  }
}

const rows: Row[] = [];
for (const place of places) {
  const [at, backend] = place.split("-") as ["tab" | "node", "webgpu" | "cpu"];
  if (at === "tab") {
    if (noChromium) console.log(`${place} skipped: ${noChromium}`);
    else rows.push(await inTab(backend));
    continue;
  }
  const gpu = backend === "webgpu" ? await probeGpu() : null;
  if (gpu && !gpu.ok) console.log(`${place} skipped: ${gpu.reason}`);
  else rows.push(await inNode(backend));
}

console.log(
  `${agentName} GRPO, ${steps} steps x ${batch} problems x ${n} rollouts, lr ${settings.lr}${settings.loraRank ? `, LoRA r ${settings.loraRank}` : ""}, seed ${settings.seed}, held-out ${valTasks} problems (greedy)`,
);
if (rows.length > 0) {
  console.log(`| where | held-out accuracy, steps ${rows[0]!.accuracy.map((v) => v.step).join(" / ")} | gain | wall time |`);
  console.log("|---|---|---:|---:|");
  for (const r of rows) console.log(line(r));
}
process.exit(0);

/**
 * The whole loop of examples/tab in a Chromium tab and the same run in Node: held-out accuracy (greedy,
 * the first `valTasks` held-out problems) before, along and after, and the wall time of the run (from
 * loading the checkpoint to the last validation). The tab's WebGPU here is SwiftShader (a CPU
 * implementation); Node runs the same `runTab` on its WebGPU adapter (Dawn: lavapipe here) and on the CPU
 * Wasm engine. docs/perf.md has a table.
 *
 *   npx tsx bench/tab.ts [steps 20] [batch 16] [n 8] [valTasks 100]     # the page's defaults
 */
import { readFileSync } from "node:fs";
import { CHECKPOINT } from "../examples/tab/build.ts";
import { runTab } from "../examples/tab/loop.ts";
import { calcTabAgent } from "../examples/tab/agents.ts";
import { TAB_DEFAULTS, type TabRunSettings } from "../examples/tab/messages.ts";
import { probeGpu } from "../src/gpu/device.ts";
import { launchChromium, noChromium } from "../test/browser/chromium.ts";
import { driveTab, quantile, serveStaticTab } from "../test/browser/tab-driver.ts";

const [steps, batch, n, valTasks] = [TAB_DEFAULTS.steps, TAB_DEFAULTS.batch, TAB_DEFAULTS.n, TAB_DEFAULTS.valTasks].map((d, i) =>
  Number(process.argv[2 + i] ?? d),
);
const settings: TabRunSettings = { ...TAB_DEFAULTS, steps, batch, n, valTasks };

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

async function inNode(backend: "webgpu" | "cpu"): Promise<Row> {
  const r = await runTab({ ...settings, backend, agent: calcTabAgent(new Uint8Array(readFileSync(CHECKPOINT))) });
  return {
    where: `Node ${process.versions.node}, ${r.backend}`,
    accuracy: r.reports.filter((x) => x.kind === "validation").map((v) => ({ step: v.step, accuracy: v.accuracy })),
    seconds: r.seconds,
  };
}

const rows: Row[] = [];
if (noChromium) console.log(`tab skipped: ${noChromium}`);
else {
  const [browser, tab] = await Promise.all([launchChromium(), serveStaticTab()]);
  try {
    const run = await driveTab(browser, tab, { settings: { ...settings, backend: "webgpu" }, timeoutMs: 3_600_000 });
    if (run.state.error) throw new Error(run.state.error);
    const done = await run.page.evaluate(() => document.getElementById("status")!.textContent!);
    rows.push({
      where: `Chromium ${browser.version()}, ${run.state.backend}`,
      accuracy: run.state.validations,
      // the run's own time (loading the checkpoint to the end), as the worker reported it
      seconds: Number(/in (\d+) s/.exec(done)?.[1] ?? run.seconds),
    });
    const long = run.state.longTasksMs;
    console.log(
      `tab: longest main-thread task ${run.state.longestTaskMs.toFixed(0)} ms (${long.length} over 50 ms, ${long.filter((ms) => ms > 100).length} over 100 ms); on the thread's CPU clock the longest ${run.mainThread.longestCpuMs.toFixed(0)} ms; the page's work per message: median ${quantile(run.state.messageMs, 0.5).toFixed(1)} ms`,
    );
  } finally {
    await browser.close();
    await tab.close();
  }
}
const gpu = await probeGpu();
if (gpu.ok) rows.push(await inNode("webgpu"));
else console.log(`Node WebGPU skipped: ${gpu.reason}`);
rows.push(await inNode("cpu"));

console.log(`calc GRPO, ${steps} steps x ${batch} problems x ${n} rollouts, lr ${settings.lr}, held-out ${valTasks} problems (greedy)`);
console.log(`| where | held-out accuracy, steps ${rows[0]!.accuracy.map((v) => v.step).join(" / ")} | gain | wall time |`);
console.log("|---|---|---:|---:|");
for (const r of rows) console.log(line(r));
process.exit(0);

/**
 * Policy-step throughput in a Chromium tab against Node, the same step (bench/_browser-step.ts) on each.
 * Chromium's WebGPU here is SwiftShader (Google's software Vulkan). Node's Dawn (the `webgpu` package) runs
 * twice, in child processes: on Chromium's own SwiftShader (VK_ICD_FILENAMES pointing at Chromium's ICD: the
 * same adapter, so the ratio is the runtimes' difference) and on Mesa's lavapipe (the default here). All
 * three are CPU implementations, not a GPU. The ratios are the figures; absolute numbers move with the
 * machine. `npx tsx bench/browser.ts [rows] [steps]`; docs/perf.md has a table.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { build } from "esbuild";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { launchChromium, noChromium, servePages } from "../test/browser/chromium.ts";
import { type StepTiming, timeSteps } from "./_browser-step.ts";

const here = dirname(fileURLToPath(import.meta.url));
const rows = Number(process.argv[2] ?? 8);
const steps = Number(process.argv[3] ?? 3);
const SWIFTSHADER_ICD = "/usr/lib/chromium/vk_swiftshader_icd.json";

if (process.env.AGL_BENCH_CHILD) {
  // A child: Node's measurement on the Vulkan driver its environment selects.
  console.log(JSON.stringify(await timeSteps(rows, steps)));
  process.exit(0);
}

/** Node's measurement in a child process, with `env` added (the Vulkan ICD is chosen at startup). */
function nodeTiming(env: Record<string, string>): StepTiming {
  const out = execFileSync(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), String(rows), String(steps)], {
    env: { ...process.env, ...env, AGL_BENCH_CHILD: "1" },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"],
  });
  return JSON.parse(out.trim().split("\n").at(-1)!) as StepTiming;
}

if (noChromium) {
  console.log(`skipped: ${noChromium}`);
  process.exit(0);
}

const bundle = (
  await build({
    stdin: { contents: `import * as s from "./_browser-step.ts"; globalThis.bench = s;`, resolveDir: here, loader: "ts" },
    bundle: true,
    platform: "browser",
    format: "esm",
    write: false,
    logLevel: "silent",
  })
).outputFiles[0]!.text;
const pages = await servePages({
  "/": `<!doctype html><script type="module">import "/bench.js"; window.ready = true;</script>`,
  "/bench.js": bundle,
});
const browser = await launchChromium();
try {
  const page = await browser.newPage();
  await page.goto(`${pages.url}/`);
  await page.waitForFunction(() => (window as { ready?: boolean }).ready === true);
  const inPage: StepTiming = await page.evaluate(
    ([r, s]) => (globalThis as unknown as { bench: typeof import("./_browser-step.ts") }).bench.timeSteps(r, s),
    [rows, steps] as const,
  );
  await page.close();
  const fmt = (t: StepTiming) => `${t.tokensPerSecond.toFixed(0)} tokens/s (steps ${t.seconds.map((s) => s.toFixed(2)).join(", ")} s)`;
  console.log(`policy step, ${rows} rows x 32 response tokens, d_model 128, 4 layers`);
  console.log(`chromium:            ${fmt(inPage)} on ${inPage.adapter}`);
  if (existsSync(SWIFTSHADER_ICD)) {
    const same = nodeTiming({ VK_ICD_FILENAMES: SWIFTSHADER_ICD });
    console.log(`node (same driver):  ${fmt(same)} on ${same.adapter}`);
    console.log(`ratio chromium / node, both SwiftShader: ${(inPage.tokensPerSecond / same.tokensPerSecond).toFixed(2)}`);
  }
  const native = nodeTiming({});
  console.log(`node (default):      ${fmt(native)} on ${native.adapter}`);
  console.log(`ratio chromium / node on its default adapter: ${(inPage.tokensPerSecond / native.tokensPerSecond).toFixed(2)}`);
} finally {
  await browser.close();
  await pages.close();
}

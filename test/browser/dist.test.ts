/**
 * The built package in a browser without a bundler: dist/ (built here by `tsc -p tsconfig.build.json`
 * into a temporary folder, once for the file) served as native ES modules, its bare imports mapped by an
 * import map onto files served from node_modules (zod, the Hugging Face packages, hono), the three
 * OpenTelemetry packages onto one ES module each, bundled here once (their own ES builds import
 * extensionless paths, which a browser cannot load). The dist import graph has no Node built-in; in the
 * page the platform is the browser's, the Wasm core gives Node's numbers, a Hugging Face folder and a
 * checkpoint load over fetch, and a runner traces a rollout into the in-memory store.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { build } from "esbuild";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeModel } from "../../src/model/checkpoint.ts";
import { loadPretrained } from "../../src/model/hf/loader.ts";
import { initParams } from "../../src/model/init.ts";
import { launchChromium, noChromium, openPage, type PageServer, servePages } from "./chromium.ts";
import { importGraph } from "./import-graph.ts";
import { TINY, wasmNumbers } from "./scenarios.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** The import map a page needs for dist/ without a bundler (docs/browser.md shows the same). */
export const IMPORT_MAP = {
  imports: {
    zod: "/node_modules/zod/index.js",
    "@huggingface/jinja": "/node_modules/@huggingface/jinja/dist/index.js",
    "@huggingface/tokenizers": "/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs",
    hono: "/node_modules/hono/dist/index.js",
    "hono/bearer-auth": "/node_modules/hono/dist/middleware/bearer-auth/index.js",
    "hono/body-limit": "/node_modules/hono/dist/middleware/body-limit/index.js",
    "hono/http-exception": "/node_modules/hono/dist/http-exception.js",
    "@opentelemetry/api": "/otel/api.js",
    "@opentelemetry/resources": "/otel/resources.js",
    "@opentelemetry/sdk-trace-base": "/otel/sdk-trace-base.js",
  },
};

/** The OpenTelemetry packages as one ES module each, the API left to the import map (one instance for all). */
async function bundleOpenTelemetry(): Promise<Record<string, string>> {
  const one = async (pkg: string, external: string[]) =>
    (
      await build({
        stdin: { contents: `export * from "${pkg}";`, resolveDir: root },
        bundle: true,
        platform: "browser",
        format: "esm",
        external,
        write: false,
        logLevel: "silent",
      })
    ).outputFiles[0]!.text;
  return {
    "/otel/api.js": await one("@opentelemetry/api", []),
    "/otel/resources.js": await one("@opentelemetry/resources", ["@opentelemetry/api"]),
    "/otel/sdk-trace-base.js": await one("@opentelemetry/sdk-trace-base", ["@opentelemetry/api", "@opentelemetry/resources"]),
  };
}

const PAGE = `<!doctype html><meta charset="utf-8"><title>lightning-ts from dist/</title>
<script type="importmap">${JSON.stringify(IMPORT_MAP)}</script>
<script type="module">
  import * as L from "/dist/src/browser.js";
  window.L = L;
  window.ready = true;
</script>`;

const HF = "test/fixtures/hf/llama-tied-llama3";

const sum = (a: ArrayLike<number>): number => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i];
  return s;
};

describe.skipIf(noChromium)("dist/ in Chromium without a bundler", { timeout: 180_000 }, () => {
  let out: string;
  let browser: Browser;
  let pages: PageServer;
  let page: Page;
  const checkpoint = encodeModel(TINY, initParams(TINY, 4), 7);

  beforeAll(async () => {
    out = mkdtempSync(join(tmpdir(), "agl-dist-"));
    const tsc = join(root, "node_modules/typescript/bin/tsc");
    const [b, otel] = await Promise.all([
      launchChromium(),
      bundleOpenTelemetry(),
      promisify(execFile)(process.execPath, [tsc, "-p", "tsconfig.build.json", "--outDir", out], { cwd: root }),
    ]);
    browser = b;
    pages = await servePages(
      { "/": PAGE, "/ckpt/model.safetensors": checkpoint, ...otel },
      { "/dist/": out, "/node_modules/": join(root, "node_modules"), "/hf/": join(root, HF) },
    );
    page = await openPage(browser, `${pages.url}/`);
    await page.waitForFunction(() => (window as { ready?: boolean }).ready === true, null, { timeout: 30_000 });
  }, 150_000);
  afterAll(async () => {
    await browser?.close();
    await pages?.close();
    if (out) rmSync(out, { recursive: true, force: true });
  });

  it("reaches no node:* module or Node built-in from dist/src/browser.js", () => {
    const graph = importGraph(join(out, "src/browser.js"), out);
    expect(graph.violations).toEqual([]);
    expect(graph.packages).toEqual(Object.keys(IMPORT_MAP.imports).sort());
    expect(graph.files.length).toBeGreaterThan(50);
  });

  it("loads as native modules: the browser platform, and the Wasm core with Node's numbers", async () => {
    const got = await page.evaluate(async () => {
      const L = (window as unknown as { L: typeof import("../../src/browser.ts") }).L;
      const k = L.libraryKernels();
      const B = 6;
      const T = 5;
      const rewards = new Float32Array(B * T);
      const mask = new Float32Array(B * T);
      const rng = new L.Rng(5);
      for (let i = 0; i < B; i++) {
        const len = 2 + (i % 4);
        for (let t = 0; t < len; t++) mask[i * T + t] = 1;
        rewards[i * T + len - 1] = rng.uniform();
      }
      const groups = Int32Array.from([0, 0, 0, 1, 1, 1]);
      return { grpo: [...k.grpo({ rewards, mask, B, T, groups }, true).advantages], runtime: (await L.probeGpu()).ok };
    });
    expect(got.grpo).toEqual(wasmNumbers().grpo);
    expect(got.runtime).toBe(true);
  });

  it("loads a Hugging Face folder from URLs and a checkpoint from fetched bytes, as Node loads them from files", async () => {
    const got = await page.evaluate(async () => {
      const L = (window as unknown as { L: typeof import("../../src/browser.ts") }).L;
      const url = (f: string) => new URL(`/hf/${f}`, location.href).href;
      const model = await L.loadPretrained({
        "config.json": url("config.json"),
        "generation_config.json": url("generation_config.json"),
        "model.safetensors": url("model.safetensors"),
      });
      const sums = Object.fromEntries(Object.entries(model.weights).map(([k, v]) => [k, v.reduce((a, b) => a + b, 0)]));
      const ckpt = L.decodeModel(new Uint8Array(await (await fetch("/ckpt/model.safetensors")).arrayBuffer()));
      return { config: model.config, sums, ckpt: { step: ckpt.step, n: ckpt.params.length, sum: ckpt.params.reduce((a, b) => a + b, 0) } };
    });
    const want = await loadPretrained(join(root, HF));
    expect(got.config).toEqual(want.config);
    for (const [name, w] of Object.entries(want.weights)) expect(got.sums[name], name).toBeCloseTo(sum(w), 4);
    const params = initParams(TINY, 4);
    expect(got.ckpt.step).toBe(7);
    expect(got.ckpt.n).toBe(params.length);
    expect(got.ckpt.sum).toBeCloseTo(sum(params), 3);
    expect(readFileSync(join(out, "src/platform/index.js"), "utf8")).not.toMatch(/import\("\.\/node\.js"\)/);
  });

  it("runs a traced rollout: a runner, the OpenTelemetry tracer and the in-memory store, as native modules", async () => {
    const got = await page.evaluate(async () => {
      const L = (window as unknown as { L: typeof import("../../src/browser.ts") }).L;
      const store = new L.InMemoryLightningStore();
      class Agent extends L.LitAgent<number> {
        override async rollout(task: number) {
          await new Promise((r) => setTimeout(r, 1));
          this.tracer.inTrace(() => L.emitReward(task / 2));
        }
      }
      await store.addResources({ p: { resource_type: "prompt_template", template: "x", engine: "f-string" } });
      const rollout = await store.enqueueRollout(1);
      const runner = new L.LitAgentRunner<number>({ maxRollouts: 1, pollInterval: 0.01, heartbeatInterval: 0 });
      await runner.withRunContext({ agent: new Agent(), store, workerId: 0 }, (r) => r.iter());
      const spans = (await store.querySpans(rollout.rollout_id)).items;
      return {
        status: (await store.getRolloutById(rollout.rollout_id))!.status,
        spans: spans.map((s) => [s.name, s.attributes["agentlightning.reward.0.value"]]),
      };
    });
    expect(got).toEqual({ status: "succeeded", spans: [["agentlightning.annotation", 0.5]] });
  });
});

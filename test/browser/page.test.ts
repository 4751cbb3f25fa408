/**
 * The browser entry in a real Chromium page, bundled with esbuild (platform "browser"): the Wasm kernels
 * and a WebGPU GRPO update give the numbers Node gives, and the store client runs a conformance subset
 * against a store server on another origin (CORS, a bearer token). One browser and one page for the file.
 */
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { maxRelError, noGpu } from "../gpu/gpu-env.ts";
import { startInProcess } from "../server/in-process.ts";
import { bundleForPage, launchChromium, noChromium, openPage, type PageServer, servePages } from "./chromium.ts";
import { clientRun, type GpuStepResult, gpuStep, wasmNumbers } from "./scenarios.ts";

/** What the page's bundle sets (page.evaluate sends the function's text, so each call names it inline). */
type InPage = { scenarios: typeof import("./scenarios.ts") };

const here = dirname(fileURLToPath(import.meta.url));

/** The scenarios bundled for the page, exposed as `globalThis.scenarios`. */
const bundleScenarios = () => bundleForPage(`import * as s from "./scenarios.ts"; globalThis.scenarios = s;`, here);

const PAGE = `<!doctype html><meta charset="utf-8"><title>lightning-ts browser test</title>
<script type="module">import "/scenarios.js"; window.ready = true;</script>`;

describe.skipIf(noChromium)("the browser entry in Chromium (bundled)", { timeout: 120_000 }, () => {
  let browser: Browser;
  let pages: PageServer;
  let page: Page;

  beforeAll(async () => {
    const [bundle, b] = await Promise.all([bundleScenarios(), launchChromium()]);
    browser = b;
    pages = await servePages({ "/": PAGE, "/scenarios.js": bundle });
    page = await openPage(browser, `${pages.url}/`);
    await page.waitForFunction(() => (window as { ready?: boolean }).ready === true);
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await pages?.close();
  });

  it("runs the Wasm kernels with the numbers Node gets, bit for bit", async () => {
    const inPage = await page.evaluate(() => (globalThis as unknown as InPage).scenarios.wasmNumbers());
    expect(inPage).toEqual(wasmNumbers());
    expect(inPage.grpo.some((x: number) => x !== 0)).toBe(true);
  });

  it("takes a GRPO update on the tab's WebGPU device with the numbers Node's Dawn gets", async () => {
    const inPage: GpuStepResult = await page.evaluate(() => (globalThis as unknown as InPage).scenarios.gpuStep());
    console.log(`[browser] page adapter: ${inPage.adapter} (software: ${inPage.software}); ${inPage.tokensPerSecond.toFixed(0)} tokens/s`);
    expect(inPage.trainedRows).toBeGreaterThan(0);
    expect(Number.isFinite(inPage.loss)).toBe(true);
    if (noGpu) return; // Node has no adapter here: the page's own step is what can be checked
    const inNode = await gpuStep();
    console.log(`[browser] node adapter: ${inNode.adapter}; ${inNode.tokensPerSecond.toFixed(0)} tokens/s`);
    // Different adapters (SwiftShader in the page, lavapipe or hardware in Node) sum in different orders.
    expect(inPage.trainedRows).toBe(inNode.trainedRows);
    expect(inPage.tokens).toBe(inNode.tokens);
    expect(Math.abs(inPage.loss - inNode.loss)).toBeLessThan(1e-4 * Math.max(1, Math.abs(inNode.loss)));
    expect(Math.abs(inPage.gradNorm - inNode.gradNorm)).toBeLessThan(1e-3 * Math.max(1, inNode.gradNorm));
    expect(maxRelError(inPage.sample, inNode.sample)).toBeLessThan(1e-4);
  });

  it("survives losing the tab's GPU device: each later call throws GpuDeviceLostError", async () => {
    const got = await page.evaluate(() => (globalThis as unknown as InPage).scenarios.deviceLoss());
    expect(got).toEqual({ stepBefore: true, errors: Array(3).fill("GpuDeviceLostError destroyed") });
  });

  describe("the store client against a server on another origin", () => {
    const token = "page-token-123";
    /** A fresh store behind a server that allows the test page's origin. */
    async function withServer<T>(run: (url: string) => Promise<T>, corsOrigins = [pages.url]): Promise<T> {
      const store = new InMemoryLightningStore();
      const server = await startInProcess(store, { token, corsOrigins });
      try {
        return await run(server.url);
      } finally {
        await server.close();
        await store.close();
      }
    }

    it("runs a conformance subset from the page as it does from Node (CORS preflights, token, typed errors)", async () => {
      const inPage = await withServer((url) =>
        page.evaluate(([u, t]) => (globalThis as unknown as InPage).scenarios.clientRun(u, t), [url, token] as const),
      );
      const inNode = await withServer((url) => clientRun(url, token));
      expect(inPage).toEqual(inNode);
      expect(inPage.refused).toEqual([true, 401]);
      expect(inPage.waited).toEqual(["succeeded"]);
      expect(inPage.spans).toEqual([["agentlightning.reward", 1, 1]]);
    });

    it("is refused by the browser when the server does not allow the page's origin", async () => {
      const error = await withServer(
        (url) =>
          page.evaluate(async (u) => {
            try {
              await (globalThis as unknown as InPage).scenarios.clientRun(u, "x");
              return "no error";
            } catch (e) {
              return `${(e as Error).name}: ${(e as Error).message}`;
            }
          }, url),
        [],
      );
      expect(error).toMatch(/StoreConnectionError|fetch/i);
    });
  });
});

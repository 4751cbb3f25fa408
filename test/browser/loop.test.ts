/**
 * The whole loop through the browser entry, in a Chromium page and in Node, with the same results where
 * the runtimes agree: the store conformance suite on the in-memory store (the suite vitest runs on Node,
 * run in the page by a small harness), concurrent runners tracing their rollouts (the context follows `await` on Node
 * only; explicit context gives the same spans in the page), the policy server's app answered in-process
 * for the official `openai` client, and two GRPO steps of examples/tab's loop on the CPU engine.
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type Plugin } from "esbuild";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHECKPOINT } from "../../examples/tab/build.ts";
import { launchChromium, noChromium, openPage, type PageServer, servePages } from "./chromium.ts";
import { expectTracedRollouts } from "../tracer/traced-runners.ts";
import { cpuLoop, inProcessCall, tracedRunners } from "./loop-scenarios.ts";
import type { SuiteResult } from "./vitest-in-page.ts";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "../..");

type InPage = {
  scenarios: typeof import("./loop-scenarios.ts");
  storeConformance: () => Promise<SuiteResult>;
  checkpoint: () => Promise<Uint8Array>;
};

/**
 * The store conformance suite against the browser entry's in-memory store, with `vitest` mapped to the
 * page harness and the store package's index (which holds the libSQL store) to the one module the suite
 * takes a value from.
 */
const CONFORMANCE_ENTRY = `
import { InMemoryLightningStore } from "../../src/browser.ts";
import { runStoreConformance } from "../store/conformance.ts";
import { runCollected } from "./vitest-in-page.ts";
runStoreConformance("InMemoryLightningStore", ({ clock }) => new InMemoryLightningStore({ clock, scanDebounceSeconds: 0 }));
globalThis.storeConformance = runCollected;
`;
const harness: Plugin = {
  name: "vitest-in-page",
  setup(b) {
    b.onResolve({ filter: /^vitest$/ }, () => ({ path: join(here, "vitest-in-page.ts") }));
    b.onResolve({ filter: /\/src\/store\/index\.ts$/ }, () => ({ path: join(root, "src/store/decisions.ts") }));
  },
};
const bundle = async (contents: string) =>
  (
    await build({
      stdin: { contents, resolveDir: here, loader: "ts" },
      bundle: true,
      platform: "browser",
      format: "esm",
      target: "es2022",
      keepNames: true,
      write: false,
      logLevel: "silent",
      plugins: [harness],
    })
  ).outputFiles[0]!.text;

const PAGE = `<!doctype html><meta charset="utf-8"><title>lightning-ts loop test</title>
<script type="module">import "/scenarios.js"; import "/conformance.js"; window.ready = true;</script>`;

describe.skipIf(noChromium)("the whole loop through the browser entry: Chromium and Node agree", { timeout: 300_000 }, () => {
  let browser: Browser;
  let pages: PageServer;
  let page: Page;
  const checkpoint = new Uint8Array(readFileSync(CHECKPOINT));

  beforeAll(async () => {
    const [scenarios, conformance, b] = await Promise.all([
      bundle(
        `import * as s from "./loop-scenarios.ts"; globalThis.scenarios = s;
         globalThis.checkpoint = async () => new Uint8Array(await (await fetch("/model.safetensors")).arrayBuffer());`,
      ),
      bundle(CONFORMANCE_ENTRY),
      launchChromium(),
    ]);
    browser = b;
    pages = await servePages({ "/": PAGE, "/scenarios.js": scenarios, "/conformance.js": conformance, "/model.safetensors": checkpoint });
    page = await openPage(browser, `${pages.url}/`);
    await page.waitForFunction(() => (window as { ready?: boolean }).ready === true, null, { timeout: 60_000 });
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await pages?.close();
  });

  it("the in-memory store passes the store conformance suite in the page, every test of it", async () => {
    const inPage = await page.evaluate(() => (globalThis as unknown as InPage).storeConformance());
    expect(inPage.failed).toEqual([]);
    expect(inPage.passed.length).toBe(inPage.collected);
    expect(inPage.passed.length).toBeGreaterThan(250);
    expect(inPage.passed).toContain(
      "LightningStore conformance: InMemoryLightningStore > waitForRollouts > timeout 0 checks once and returns at once, only the finished rollouts",
    );
  });

  it("concurrent runners' spans land in their own rollouts, in start order; after an await the page needs the explicit context", async () => {
    const inPage = await page.evaluate(() => (globalThis as unknown as InPage).scenarios.tracedRunners());
    const inNode = await tracedRunners();
    expect(inPage.rollouts).toEqual(inNode.rollouts);
    expectTracedRollouts(expect, inPage.rollouts);
    // AsyncLocalStorage carries the rollout across await on Node; the page's context follows synchronous calls only
    expect(inNode.implicitAfterAwait).toEqual(Array(6).fill("kept"));
    expect(inPage.implicitAfterAwait).toEqual(Array(6).fill("lost"));
  });

  it("the policy server's app answers the official openai client in-process and records the call with its token ids", async () => {
    const inPage = await page.evaluate(async () => {
      const g = globalThis as unknown as InPage;
      return g.scenarios.inProcessCall(await g.checkpoint());
    });
    const inNode = await inProcessCall(checkpoint);
    expect(inPage).toEqual(inNode);
    expect(inPage.tokenIds.length).toBeGreaterThan(0);
    expect(inPage.spans).toEqual([{ name: "litellm_request", promptIds: inPage.promptTokenIds, responseIds: inPage.tokenIds, version: 0 }]);
    expect(inPage.wrongModel).toBe("404 model_not_found");
  });

  it("examples/tab's loop takes the same two GRPO steps on the CPU engine in the page as in Node", async () => {
    const inPage = await page.evaluate(async () => {
      const g = globalThis as unknown as InPage;
      return g.scenarios.cpuLoop(await g.checkpoint());
    });
    const inNode = await cpuLoop(checkpoint);
    expect(inPage.backend).toBe("cpu");
    expect(inPage.reports.map((r) => `${r.kind} ${r.step}`)).toEqual(["validation 0", "step 1", "validation 1", "step 2", "validation 2"]);
    expect(inPage).toEqual(inNode);
  });
});

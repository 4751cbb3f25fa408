/**
 * The CPU engine's worker pool in a real Chromium page: served cross-origin isolated (COOP same-origin, COEP
 * require-corp, CORP on every response) a dedicated worker of the page starts a pool of 2 threads over one
 * shared Wasm memory (module workers from blob URLs) and gets the bits Node gets on one thread; served
 * without those headers the same engine falls back to one thread, without an error, with the same bits.
 * The pool lives in a worker because a window's main thread may not block in Atomics.wait.
 */
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleForPage, launchChromium, noChromium, openPage, type PageServer, servePages } from "./chromium.ts";
import { type PoolRun, poolRun } from "./cpu-pool-scenario.ts";

const here = dirname(fileURLToPath(import.meta.url));

const ISOLATED = {
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-embedder-policy": "require-corp",
  "cross-origin-resource-policy": "same-origin",
};

/** The page: `runPool(threads, via)` runs the scenario in a fresh module worker and resolves with its result. */
const PAGE = `<!doctype html><meta charset="utf-8"><title>lightning-ts CPU pool</title>
<script type="module">
window.runPool = (threads, via) => new Promise((resolve, reject) => {
  const w = new Worker("/pool-worker.js", { type: "module" });
  w.onmessage = (e) => { w.terminate(); e.data.error ? reject(new Error(e.data.error)) : resolve(e.data.result); };
  w.onerror = (e) => { w.terminate(); reject(new Error("worker failed: " + (e.message ?? e))); };
  w.postMessage([threads, via]);
});
window.ready = true;
</script>`;

const WORKER_ENTRY = `import { poolRun } from "./cpu-pool-scenario.ts";
self.onmessage = async (e) => {
  try { self.postMessage({ result: await poolRun(...e.data) }); }
  catch (err) { self.postMessage({ error: String(err?.stack ?? err) }); }
};`;

describe.skipIf(noChromium)("the CPU engine's worker pool in Chromium", { timeout: 60_000 }, () => {
  let browser: Browser;
  let worker: string;
  const servers: PageServer[] = [];

  /** Serves the page (with `headers`), opens it and runs the scenario on `threads` threads in its worker. */
  async function inPage(
    headers: Record<string, string>,
    threads: number,
    via: "engine" | "pool" = "engine",
  ): Promise<PoolRun & { pageIsolated: boolean }> {
    const server = await servePages({ "/": PAGE, "/pool-worker.js": worker }, {}, headers);
    servers.push(server);
    const page = await openPage(browser, `${server.url}/`);
    try {
      await page.waitForFunction(() => (window as { ready?: boolean }).ready === true);
      type Run = { runPool(t: number, v: string): Promise<PoolRun> };
      const run = await page.evaluate(([t, v]) => (window as unknown as Run).runPool(t, v), [threads, via] as const);
      return { ...run, pageIsolated: await page.evaluate(() => crossOriginIsolated) };
    } finally {
      await page.close();
    }
  }

  beforeAll(async () => {
    [worker, browser] = await Promise.all([bundleForPage(WORKER_ENTRY, here), launchChromium()]);
  }, 30_000);
  afterAll(async () => {
    await browser?.close();
    for (const s of servers) await s.close();
  });

  it("cross-origin isolated: 2 threads share the work and give Node's one-thread bits", async () => {
    const [got, node] = await Promise.all([inPage(ISOLATED, 2), poolRun(1)]);
    expect(node.threads).toBe(1);
    expect(got.pageIsolated).toBe(true);
    expect(got.isolated).toBe(true);
    expect(got.threads).toBe(2);
    expect(got.widestCall).toBe(2);
    expect(got.digest).toBe(node.digest);
  });

  it("not isolated: the same engine falls back to one thread, without an error, with the same bits", async () => {
    const [got, node] = await Promise.all([inPage({}, 2), poolRun(1)]);
    expect(got.pageIsolated).toBe(false);
    expect(got.isolated).toBe(false);
    expect(got.threads).toBe(1);
    expect(got.widestCall).toBe(1);
    expect(got.digest).toBe(node.digest);
  });

  it("not isolated: a CpuPool asked for 2 threads runs on one, with no SharedArrayBuffer in the context", async () => {
    const [got, node] = await Promise.all([inPage({}, 2, "pool"), poolRun(1)]);
    expect(got.isolated).toBe(false);
    expect(got.threads).toBe(1);
    expect(got.digest).toBe(node.digest);
  });
});

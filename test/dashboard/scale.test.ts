/**
 * The dashboard on a large store (Chromium, Node server, libSQL file): 100,000 rollouts page and count
 * through the API without loading them all, and a 5,000-span rollout renders only the waterfall rows in
 * view. Latencies are printed for docs/dashboard.md, not asserted.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { spanFromAttributes, type Span } from "../../src/types/span.ts";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { launchBrowser, openPage, poll, screenshot } from "./browser.ts";

const ROLLOUTS = 100_000;
const SPANS = 5_000;
let dir: string;
let server: ServerProcess;
let browser: Browser;
let big = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agl-dashboard-scale-"));
  server = await startServerProcess("node", ["--port", "0", "--db", `file:${join(dir, "store.db")}`, "--log-level", "warning"]);
  const store = new LightningStoreClient(server.url, { retryDelays: [] });
  const t0 = performance.now();
  for (let i = 0; i < ROLLOUTS; i += 10_000)
    await store.enqueueManyRollouts(
      Array.from({ length: 10_000 }, (_, j) => ({
        input: { task: i + j },
        mode: (i + j) % 10 === 0 ? ("val" as const) : ("train" as const),
      })),
    );
  const r = await store.startRollout({ task: "deep trace" }, { mode: "train" });
  big = r.rollout_id;
  // A tree of 5,000 spans: 50 steps of 99 children each.
  const spans: Span[] = [];
  const base = r.start_time;
  for (let i = 0; i < SPANS; i++) {
    const step = Math.floor(i / 100);
    const isStep = i % 100 === 0;
    spans.push(
      spanFromAttributes({
        rollout_id: big,
        attempt_id: r.attempt.attempt_id,
        sequence_id: i + 1,
        trace_id: "c".repeat(32),
        span_id: `s${i}`,
        parent_id: isStep ? null : `s${step * 100}`,
        name: isStep ? `step ${step}` : `tool ${i}`,
        start_time: base + i * 0.01,
        end_time: base + (isStep ? i * 0.01 + 1 : i * 0.01 + 0.005),
        attributes: { index: i },
      }),
    );
  }
  for (let i = 0; i < SPANS; i += 1000) await store.addManySpans(spans.slice(i, i + 1000));
  await store.close();
  console.log(`[dashboard scale] seeded ${ROLLOUTS} rollouts and ${SPANS} spans in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  browser = await launchBrowser();
}, 300_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Median time of `n` GETs of a dashboard API call, in ms. */
async function latency(path: string, n = 5): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await fetch(`${server.url}/v1/agl/${path}`);
    await res.arrayBuffer();
    expect(res.status, path).toBe(200);
    times.push(performance.now() - t0);
  }
  return times.sort((a, b) => a - b)[Math.floor(n / 2)]!;
}

describe(`dashboard on ${ROLLOUTS.toLocaleString("en-US")} rollouts and a ${SPANS.toLocaleString("en-US")}-span rollout`, () => {
  it("reads pages and counts, never the whole table (latencies printed)", async () => {
    const calls = {
      "rollouts page 1 (newest first)": "rollouts?limit=50&offset=0&sort_by=start_time&sort_order=desc",
      "rollouts page 1000": "rollouts?limit=50&offset=49950&sort_by=start_time&sort_order=desc",
      "rollouts, mode val, by id": "rollouts?limit=50&mode_in=val&sort_by=rollout_id&sort_order=asc",
      "rollouts, id search": "rollouts?limit=50&rollout_id_contains=ffff",
      "counts per status": "statistics/rollouts",
      "store statistics": "statistics",
      "server health": "server",
      "training runs (after the first scan)": "training/runs",
      "spans of the 5,000-span rollout (2,000 a page)": `spans?rollout_id=${big}&limit=2000`,
    };
    // The first call reads every rollout once (in pages of 2,000); later ones only the new rollouts.
    const lines = [`training runs, first scan of every rollout: ${(await latency("training/runs", 1)).toFixed(1)} ms`];
    for (const [label, path] of Object.entries(calls)) lines.push(`${label}: ${(await latency(path)).toFixed(1)} ms`);
    console.log(`[dashboard scale] median API latency (Node, libSQL file):\n  ${lines.join("\n  ")}`);
    const counts = await (await fetch(`${server.url}/v1/agl/statistics/rollouts`)).json();
    expect(counts.total).toBe(ROLLOUTS + 1);
    expect(counts.by_status.queuing).toBe(ROLLOUTS);
  }, 120_000);

  it("pages through the rollouts in the browser", async () => {
    const { page, errors } = await openPage(browser, { refreshMs: 5_000 });
    await page.goto(`${server.url}/`);
    const total = (ROLLOUTS + 1).toLocaleString("en-US");
    await poll(() => page.getByTestId("pager-range").innerText()).toBe(`1–50 of ${total}`);
    expect(await page.locator("[data-testid=rollouts-table] tbody tr[data-rollout]").count()).toBe(50);
    await page.getByRole("button", { name: "Next ›" }).click();
    await poll(() => page.getByTestId("pager-range").innerText()).toBe(`51–100 of ${total}`);
    await screenshot(page, "scale-rollouts");
    expect(errors).toEqual([]);
    await page.context().close();
  }, 60_000);

  it("renders only the waterfall rows in view for 5,000 spans, and scrolls to the last", async () => {
    const { page, errors } = await openPage(browser, { refreshMs: 5_000 });
    await page.goto(`${server.url}/#/rollouts/${big}`);
    const list = page.getByTestId("waterfall");
    await poll(() => list.getAttribute("data-rows")).toBe(String(SPANS));
    const rendered = await list.locator(".wf-row").count();
    expect(rendered).toBeGreaterThan(10);
    expect(rendered).toBeLessThan(100);
    await list.evaluate((el) => (el.scrollTop = el.scrollHeight));
    await list.locator(".wf-row", { hasText: "tool 4999" }).waitFor();
    expect(await list.locator(".wf-row").count()).toBeLessThan(100);
    await screenshot(page, "scale-waterfall");
    expect(errors).toEqual([]);
    await page.context().close();
  }, 60_000);
});

/**
 * The background watchdog must not stall the event loop however many rollouts are unfinished: a store
 * holding 50,000 preparing rollouts (a few with a timeout or an unresponsive limit) runs its watchdog
 * timer every 200 ms while a probe timer ticks every 2 ms. Across several watchdog periods no gap
 * between two probe ticks that overlaps a watchdog scan may exceed 50 ms (a scan that loaded every
 * unfinished rollout, as the watchdog once did, held the loop 0.5-0.9 s on libSQL), and the rollouts
 * whose deadline passed are still timed out or marked unresponsive, the others left alone.
 * Only gaps during a scan count: a busy machine may pause the process at any time, but a pause that
 * keeps landing inside scans of a few microseconds is the scan's.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { LightningStoreCore } from "../../src/store/core.ts";
import { InMemoryLightningStore, LibsqlLightningStore } from "../../src/store/index.ts";
import { spanFromAttributes } from "../../src/types/index.ts";

const UNFINISHED = 50_000;
const PERIOD_S = 0.2;
const PERIODS = 8;
const MAX_GAP_MS = 50;

const dir = mkdtempSync(join(tmpdir(), "watchdog-stall-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Records each scan's start and end (the timer calls `runWatchdog` on the instance). */
function recordScans(store: LightningStoreCore): [number, number][] {
  const scans: [number, number][] = [];
  const run = store.runWatchdog.bind(store);
  store.runWatchdog = async () => {
    const start = performance.now();
    try {
      return await run();
    } finally {
      scans.push([start, performance.now()]);
    }
  };
  return scans;
}

/** Ticks every `everyMs` until `stop()`; returns the gaps between ticks as [from, to]. */
function probe(everyMs: number): { stop(): Promise<[number, number][]> } {
  const gaps: [number, number][] = [];
  let last = performance.now();
  let running = true;
  const done = (async () => {
    while (running) {
      await sleep(everyMs);
      const now = performance.now();
      gaps.push([last, now]);
      last = now;
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      return gaps;
    },
  };
}

const stores: [string, () => Promise<LightningStoreCore>][] = [
  ["libSQL file", () => LibsqlLightningStore.open(`file:${join(dir, "stall.db")}`, { watchdogIntervalSeconds: PERIOD_S, scanDebounceSeconds: 1e9 })],
  ["in-memory", async () => new InMemoryLightningStore({ watchdogIntervalSeconds: PERIOD_S, scanDebounceSeconds: 1e9 })],
];

describe("the background watchdog with 50,000 unfinished rollouts", () => {
  it.each(stores)("%s: no event-loop stall over 50 ms in any scan, and the due rollouts are still handled", async (_name, open) => {
    const store = await open();
    // Seeded through the batch paths: one enqueue, then dequeues of many at a time.
    const seeded = await store.enqueueManyRollouts(Array.from({ length: UNFINISHED }, (_, i) => ({ input: { i } })));
    for (let claimed = 0; claimed < UNFINISHED; ) claimed += (await store.dequeueManyRollouts({ limit: 10_000, worker_id: "w" })).length;
    const timedOut = await Promise.all([0, 1, 2].map((i) => store.startRollout({ t: i }, { config: { timeout_seconds: 0.3 }, worker_id: `t${i}` })));
    const silent = await Promise.all([0, 1].map((i) => store.startRollout({ u: i }, { config: { unresponsive_seconds: 0.3 } })));
    const later = await store.startRollout({ later: true }, { config: { timeout_seconds: 3600, unresponsive_seconds: 3600 } });
    // One silent rollout keeps sending spans, so it stays responsive.
    const alive = await store.startRollout({ alive: true }, { config: { unresponsive_seconds: 0.3 } });

    const scans = recordScans(store);
    const ticks = probe(2);
    const until = performance.now() + PERIODS * PERIOD_S * 1000;
    for (let seq = 1; performance.now() < until; seq++) {
      await store.addSpan(spanFromAttributes({ rollout_id: alive.rollout_id, attempt_id: alive.attempt.attempt_id, sequence_id: seq, name: "beat" }));
      await sleep(50);
    }
    const gaps = await ticks.stop();
    // The watchdog ran in several periods of the measurement.
    expect(scans.length).toBeGreaterThanOrEqual(PERIODS / 2);
    const duringScans = gaps.filter(([from, to]) => scans.some(([start, end]) => from < end && to > start)).map(([from, to]) => to - from);
    expect(Math.max(0, ...duringScans), `longest gap during a scan of ${scans.length}`).toBeLessThan(MAX_GAP_MS);

    for (const r of timedOut) expect([(await store.getRolloutById(r.rollout_id))!.status, (await store.getLatestAttempt(r.rollout_id))!.status]).toEqual(["failed", "timeout"]);
    for (const r of silent) expect((await store.getLatestAttempt(r.rollout_id))!.status).toBe("unresponsive");
    for (const r of [later, alive]) expect((await store.getLatestAttempt(r.rollout_id))!.status).toMatch(/^(preparing|running)$/);
    for (const r of [seeded[0]!, seeded[UNFINISHED - 1]!]) expect((await store.getRolloutById(r.rollout_id))!.status).toBe("preparing");
    await store.close();
  }, 120_000);
});

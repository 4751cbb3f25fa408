/**
 * The background watchdog must not stall the event loop however many rollouts are unfinished: a store
 * holding 50,000 preparing rollouts (a few with a timeout or an unresponsive limit) runs its watchdog
 * timer every 200 ms while a probe timer ticks every 2 ms. Across several watchdog periods the event
 * loop may never be kept from the probe by more than 50 ms of work during a scan (a scan that loaded
 * every unfinished rollout, as the watchdog once did, held it 0.5-0.9 s), and the rollouts whose
 * deadline passed are still timed out or marked unresponsive, the others left alone.
 * What is measured between two ticks is the CPU time the process used, not the wall-clock gap: on a
 * loaded machine the process may wait for a core at any moment, which is no stall of ours, while work
 * that keeps the loop from the probe burns CPU all along. Only gaps that overlap a scan count.
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

/** A gap between two probe ticks: when, and the CPU milliseconds the process used meanwhile. */
interface Gap {
  from: number;
  to: number;
  cpuMs: number;
}

const cpuMs = (): number => {
  const c = process.cpuUsage();
  return (c.user + c.system) / 1000;
};

/** Ticks every `everyMs` until `stop()`; returns the gaps between ticks. */
function probe(everyMs: number): { stop(): Promise<Gap[]> } {
  const gaps: Gap[] = [];
  let last = performance.now();
  let lastCpu = cpuMs();
  let running = true;
  const done = (async () => {
    while (running) {
      await sleep(everyMs);
      const now = performance.now();
      const cpu = cpuMs();
      gaps.push({ from: last, to: now, cpuMs: cpu - lastCpu });
      last = now;
      lastCpu = cpu;
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
  [
    "libSQL file",
    () => LibsqlLightningStore.open(`file:${join(dir, "stall.db")}`, { watchdogIntervalSeconds: PERIOD_S, scanDebounceSeconds: 1e9 }),
  ],
  ["in-memory", async () => new InMemoryLightningStore({ watchdogIntervalSeconds: PERIOD_S, scanDebounceSeconds: 1e9 })],
];

describe("the background watchdog with 50,000 unfinished rollouts", () => {
  it.each(stores)(
    "%s: no event-loop stall over 50 ms in any scan, and the due rollouts are still handled",
    async (_name, open) => {
      const store = await open();
      // Seeded through the batch paths: one enqueue, then dequeues of many at a time.
      const seeded = await store.enqueueManyRollouts(Array.from({ length: UNFINISHED }, (_, i) => ({ input: { i } })));
      for (let claimed = 0; claimed < UNFINISHED; ) claimed += (await store.dequeueManyRollouts({ limit: 10_000, worker_id: "w" })).length;
      const timedOut = await Promise.all(
        [0, 1, 2].map((i) => store.startRollout({ t: i }, { config: { timeout_seconds: 0.3 }, worker_id: `t${i}` })),
      );
      const silent = await Promise.all([0, 1].map((i) => store.startRollout({ u: i }, { config: { unresponsive_seconds: 0.3 } })));
      const later = await store.startRollout({ later: true }, { config: { timeout_seconds: 3600, unresponsive_seconds: 3600 } });
      // One rollout keeps sending spans, so it stays responsive (silent, it would be marked within the 1.6 s measured).
      const alive = await store.startRollout({ alive: true }, { config: { unresponsive_seconds: 1 } });

      const scans = recordScans(store);
      const ticks = probe(2);
      const until = performance.now() + PERIODS * PERIOD_S * 1000;
      for (let seq = 1; performance.now() < until; seq++) {
        await store.addSpan(
          spanFromAttributes({ rollout_id: alive.rollout_id, attempt_id: alive.attempt.attempt_id, sequence_id: seq, name: "beat" }),
        );
        await sleep(50);
      }
      const gaps = await ticks.stop();
      // The watchdog ran in several periods of the measurement.
      expect(scans.length).toBeGreaterThanOrEqual(PERIODS / 2);
      const duringScans = gaps.filter((g) => scans.some(([start, end]) => g.from < end && g.to > start));
      // Busy: the gap's wall-clock length, unless the process used less CPU meanwhile (it waited for a core).
      const busy = (g: Gap) => Math.min(g.to - g.from, g.cpuMs);
      const worst = duringScans.reduce((a, g) => (busy(g) > busy(a) ? g : a), { from: 0, to: 0, cpuMs: 0 });
      expect(
        busy(worst),
        `busiest gap during ${scans.length} scans: ${worst.cpuMs.toFixed(1)} ms of CPU in ${(worst.to - worst.from).toFixed(1)} ms`,
      ).toBeLessThan(MAX_GAP_MS);

      for (const r of timedOut)
        expect([(await store.getRolloutById(r.rollout_id))!.status, (await store.getLatestAttempt(r.rollout_id))!.status]).toEqual([
          "failed",
          "timeout",
        ]);
      for (const r of silent) expect((await store.getLatestAttempt(r.rollout_id))!.status).toBe("unresponsive");
      for (const r of [later, alive]) expect((await store.getLatestAttempt(r.rollout_id))!.status).toMatch(/^(preparing|running)$/);
      for (const r of [seeded[0]!, seeded[UNFINISHED - 1]!]) expect((await store.getRolloutById(r.rollout_id))!.status).toBe("preparing");
      await store.close();
    },
    120_000,
  );
});

/**
 * What only the in-memory store has: span eviction (docs/store.md#the-in-memory-store-span-eviction) and its
 * thresholds, the background watchdog timer (docs/departures.md#11), frozen rows (docs/departures.md#9), and
 * its statistics fields. The behaviour every
 * store shares is in conformance.ts.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  InMemoryLightningStore,
  resolveMemoryThresholds,
  jsonSpanSize,
  type InMemoryLightningStoreOptions,
} from "../../src/store/memory.ts";
import { EvictedError, ManualClock, ValidationError, spanFromAttributes, type AttemptedRollout, type Span } from "../../src/types/index.ts";

const stores: InMemoryLightningStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});

function makeStore(options: InMemoryLightningStoreOptions = {}): InMemoryLightningStore {
  const store = new InMemoryLightningStore({ scanDebounceSeconds: 0, ...options });
  stores.push(store);
  return store;
}

const spanFor = (ar: AttemptedRollout, seq: number, extra: Partial<Span> = {}): Span => ({
  ...spanFromAttributes({ rollout_id: ar.rollout_id, attempt_id: ar.attempt.attempt_id, sequence_id: seq, name: `s${seq}` }),
  ...extra,
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("span eviction", () => {
  it("capacity 100, eviction 0.5, safe 0.05, 20 B per span, 4 rollouts: the first three are evicted", async () => {
    const store = makeStore({
      memoryCapacityBytes: 100,
      evictionMemoryThreshold: { ratio: 0.5 },
      safeMemoryThreshold: { ratio: 0.05 },
      spanSizeEstimator: () => 20,
    });
    const rollouts: AttemptedRollout[] = [];
    for (let i = 0; i < 4; i++) {
      const ar = await store.startRollout({ index: i });
      rollouts.push(ar);
      expect(await store.addSpan(spanFor(ar, 1))).not.toBeNull();
    }
    for (const ar of rollouts.slice(0, 3)) {
      await expect(store.querySpans(ar.rollout_id)).rejects.toThrow(EvictedError);
      await expect(store.querySpans(ar.rollout_id)).rejects.toThrow(`Spans for rollout ${ar.rollout_id} have been evicted`);
    }
    const left = await store.querySpans(rollouts[3]!.rollout_id);
    expect(left.items.map((s) => s.rollout_id)).toEqual([rollouts[3]!.rollout_id]);
    const stats = await store.statistics();
    // Exact counts after eviction (docs/departures.md#10).
    expect(stats.total_spans).toBe(1);
    expect(stats.total_span_bytes).toBe(20);
  });

  it("evicts by rollout start_time, oldest first, not by insertion order, and stops at the safe threshold", async () => {
    const clock = new ManualClock(500);
    const store = makeStore({
      clock,
      memoryCapacityBytes: 10_000,
      evictionMemoryThreshold: { bytes: 100 },
      safeMemoryThreshold: { bytes: 50 },
      spanSizeEstimator: () => 30,
    });
    // Created in this order, but with start times 300, 100, 200.
    const byStart: Record<number, AttemptedRollout> = {};
    for (const t of [300, 100, 200]) {
      clock.set(t);
      byStart[t] = await store.startRollout({ t });
    }
    clock.set(400);
    const newest = await store.startRollout({ t: 400 });
    for (const ar of [byStart[300]!, byStart[100]!, byStart[200]!]) await store.addSpan(spanFor(ar, 1));
    // 90 bytes: below the threshold, nothing evicted yet.
    expect((await store.statistics()).total_span_bytes).toBe(90);
    await store.addSpan(spanFor(newest, 1)); // 120 > 100: drop t=100 (90), t=200 (60), t=300 (30 <= 50) and stop.
    await expect(store.querySpans(byStart[100]!.rollout_id)).rejects.toThrow(EvictedError);
    await expect(store.querySpans(byStart[200]!.rollout_id)).rejects.toThrow(EvictedError);
    await expect(store.querySpans(byStart[300]!.rollout_id)).rejects.toThrow(EvictedError);
    expect((await store.querySpans(newest.rollout_id)).total).toBe(1);
    const stats = await store.statistics();
    expect(stats.total_span_bytes).toBe(30);
    expect(stats.total_spans).toBe(1);
  });

  it("the rollout being written to can be evicted too; rollouts without spans are never marked evicted", async () => {
    const store = makeStore({
      memoryCapacityBytes: 1000,
      evictionMemoryThreshold: { bytes: 50 },
      safeMemoryThreshold: { bytes: 0 },
      spanSizeEstimator: () => 40,
    });
    const quiet = await store.startRollout({ q: 0 });
    const busy = await store.startRollout({ q: 1 });
    await store.addSpan(spanFor(busy, 1));
    await store.addSpan(spanFor(busy, 2)); // 80 > 50: everything goes, down to 0.
    await expect(store.querySpans(busy.rollout_id)).rejects.toThrow(EvictedError);
    expect((await store.querySpans(quiet.rollout_id)).items).toEqual([]);
    expect((await store.statistics()).total_spans).toBe(0);
  });

  it("an evicted rollout stays evicted: later spans are stored and counted but its span list is incomplete, so queries keep failing", async () => {
    const store = makeStore({
      memoryCapacityBytes: 1000,
      evictionMemoryThreshold: { bytes: 30 },
      safeMemoryThreshold: { bytes: 0 },
      spanSizeEstimator: () => 20,
    });
    const ar = await store.startRollout(null);
    await store.addSpan(spanFor(ar, 1));
    await store.addSpan(spanFor(ar, 2)); // 40 > 30: evicted
    expect(await store.addSpan(spanFor(ar, 3))).not.toBeNull();
    expect((await store.statistics()).total_spans).toBe(1);
    await expect(store.querySpans(ar.rollout_id)).rejects.toThrow(EvictedError);
    // Evicted span ids may be added again: nothing remembers them.
    expect(await store.addSpan(spanFor(ar, 1, { span_id: spanFor(ar, 9).span_id }))).not.toBeNull();
  });

  it("a batch is accounted as a whole: eviction runs after addManySpans inserted all of it", async () => {
    const store = makeStore({
      memoryCapacityBytes: 1000,
      evictionMemoryThreshold: { bytes: 100 },
      safeMemoryThreshold: { bytes: 10 },
      spanSizeEstimator: (s) => (s.name === "big" ? 95 : 10),
    });
    const old = await store.startRollout(null);
    const cur = await store.startRollout(null);
    await store.addSpan(spanFor(old, 1));
    const inserted = await store.addManySpans([spanFor(cur, 1, { name: "big" }), spanFor(cur, 2)]);
    expect(inserted).toHaveLength(2);
    // 115 > 100: old (10) goes first, 105 > 10, then cur (105): everything.
    await expect(store.querySpans(old.rollout_id)).rejects.toThrow(EvictedError);
    await expect(store.querySpans(cur.rollout_id)).rejects.toThrow(EvictedError);
    expect((await store.statistics()).total_span_bytes).toBe(0);
  });

  it("custom estimator results below zero count as zero; duplicates add no bytes", async () => {
    const store = makeStore({ memoryCapacityBytes: 1000, spanSizeEstimator: (s) => (s.sequence_id === 1 ? -50 : 7) });
    const ar = await store.startRollout(null);
    const first = spanFor(ar, 1);
    await store.addSpan(first);
    await store.addSpan(spanFor(ar, 2));
    expect(await store.addSpan({ ...first, sequence_id: 2 })).toBeNull();
    expect((await store.statistics()).total_span_bytes).toBe(7);
  });

  it("a custom estimator that throws fails the call and stores none of the batch", async () => {
    const store = makeStore({
      memoryCapacityBytes: 1000,
      spanSizeEstimator: (s) => {
        if (s.name === "bad") throw new Error("cannot size");
        return 1;
      },
    });
    const ar = await store.startRollout(null);
    await expect(store.addManySpans([spanFor(ar, 1), spanFor(ar, 2, { name: "bad" })])).rejects.toThrow("cannot size");
    expect((await store.querySpans(ar.rollout_id)).total).toBe(0);
    expect(await store.statistics()).toMatchObject({ total_spans: 0, total_span_bytes: 0 });
    expect((await store.getLatestAttempt(ar.rollout_id))!.last_heartbeat_time).toBeNull();
  });

  it("the default estimator grows with the span's content", () => {
    const small = spanFromAttributes({ rollout_id: "ro-1", attempt_id: "at-1", sequence_id: 1 });
    const big = { ...small, attributes: { text: "x".repeat(10_000) } };
    expect(jsonSpanSize(small)).toBeGreaterThan(100);
    expect(jsonSpanSize(big) - jsonSpanSize(small)).toBeGreaterThanOrEqual(10_000);
    // Close to the JSON length (within 25%).
    const json = JSON.stringify(small).length;
    expect(Math.abs(jsonSpanSize(small) - json) / json).toBeLessThan(0.25);
  });
});

describe("memory thresholds", () => {
  it("accepts byte values (150 / 20) and reports them in statistics", async () => {
    const store = makeStore({ evictionMemoryThreshold: { bytes: 150 }, safeMemoryThreshold: { bytes: 20 }, memoryCapacityBytes: 1000 });
    const stats = await store.statistics();
    expect(stats.eviction_threshold_bytes).toBe(150);
    expect(stats.safe_threshold_bytes).toBe(20);
    expect(stats.memory_capacity_bytes).toBe(1000);
  });

  it("ratios are taken of the capacity: 200 x 0.6 = 120, a safe ratio of 0 gives 0", () => {
    expect(resolveMemoryThresholds(200, { ratio: 0.6 }, { ratio: 0 })).toEqual({ evictionBytes: 120, safeBytes: 0 });
    expect(resolveMemoryThresholds(100, { ratio: 0.5 }, { ratio: 0.05 })).toEqual({ evictionBytes: 50, safeBytes: 5 });
    expect(resolveMemoryThresholds(100, { ratio: 1 }, { ratio: 0.99 })).toEqual({ evictionBytes: 100, safeBytes: 99 });
  });

  it("defaults: eviction 70% of the capacity (at least 1 byte), safe 80% of the eviction threshold", () => {
    expect(resolveMemoryThresholds(1000, null, null)).toEqual({ evictionBytes: 700, safeBytes: 560 });
    expect(resolveMemoryThresholds(1000, { bytes: 100 }, undefined)).toEqual({ evictionBytes: 100, safeBytes: 80 });
    expect(resolveMemoryThresholds(1, null, null)).toEqual({ evictionBytes: 1, safeBytes: 0 });
  });

  it("the default capacity is the machine's memory", async () => {
    const stats = await makeStore().statistics();
    expect(stats.memory_capacity_bytes).toBeGreaterThan(64 * 1024 * 1024);
    expect(stats.eviction_threshold_bytes).toBe(Math.floor(stats.memory_capacity_bytes! * 0.7));
  });

  it.each([
    ["safe not below eviction (50 / 100 bytes)", { bytes: 50 }, { bytes: 100 }],
    ["safe equal to eviction", { bytes: 50 }, { bytes: 50 }],
    ["an eviction ratio of 0", { ratio: 0 }, null],
    ["an eviction ratio above 1", { ratio: 1.5 }, null],
    ["a negative safe ratio", null, { ratio: -0.1 }],
    ["a safe ratio above 1", { ratio: 1 }, { ratio: 1.01 }],
    ["negative bytes", { bytes: -1 }, null],
    ["fractional bytes", { bytes: 10.5 }, null],
    ["neither ratio nor bytes", {} as { bytes: number }, null],
  ])("rejects %s with a ValidationError", (_label, eviction, safe) => {
    expect(
      () => new InMemoryLightningStore({ memoryCapacityBytes: 1000, evictionMemoryThreshold: eviction, safeMemoryThreshold: safe }),
    ).toThrow(ValidationError);
  });

  it("rejects a capacity that is not positive", () => {
    expect(() => resolveMemoryThresholds(0, null, null)).toThrow(ValidationError);
  });
});

describe("background watchdog timer (docs/departures.md#11)", () => {
  it("marks a timed-out attempt without any API call, and stops after close()", async () => {
    const clock = new ManualClock(1000);
    // A huge debounce: only the first lazy check may scan, so every later change comes from the timer.
    const store = makeStore({ clock, scanDebounceSeconds: 1e9, watchdogIntervalSeconds: 0.02 });
    const ar = await store.startRollout({ q: 1 }, { config: { timeout_seconds: 5, max_attempts: 2, retry_condition: ["timeout"] } });
    await sleep(60);
    expect((await store.getLatestAttempt(ar.rollout_id))!.status).toBe("preparing");
    clock.advance(10);
    let status = "preparing";
    for (let i = 0; i < 100 && status === "preparing"; i++) {
      await sleep(10);
      status = (await store.getLatestAttempt(ar.rollout_id))!.status;
    }
    expect(status).toBe("timeout");
    expect((await store.getRolloutById(ar.rollout_id))!.status).toBe("requeuing");

    const retry = (await store.dequeueRollout())!;
    expect(retry.attempt.sequence_id).toBe(2);
    await store.close();
    clock.advance(10);
    await sleep(80);
    // Closed: the timer is gone, so the second attempt is not judged (reads still work).
    expect((await store.getLatestAttempt(ar.rollout_id))!.status).toBe("preparing");
  });

  it("without the option there is no timer: only API calls scan", async () => {
    const clock = new ManualClock(1000);
    const store = makeStore({ clock, scanDebounceSeconds: 1e9 });
    const ar = await store.startRollout(null, { config: { timeout_seconds: 1 } });
    clock.advance(5);
    await sleep(50);
    expect((await store.getLatestAttempt(ar.rollout_id))!.status).toBe("preparing");
    // A forced scan applies the verdict.
    expect(await store.runWatchdog()).toBe(1);
    expect((await store.getLatestAttempt(ar.rollout_id))!.status).toBe("timeout");
    expect(await store.runWatchdog()).toBe(0);
  });

  it("rejects a non-positive interval", () => {
    expect(() => new InMemoryLightningStore({ watchdogIntervalSeconds: 0 })).toThrow(ValidationError);
  });
});

describe("returned rows are frozen, never live (docs/departures.md#9)", () => {
  it("writing to a returned rollout, attempt, span, worker or resources snapshot throws and changes nothing", async () => {
    const store = makeStore();
    const ar = (await store.startRollout({ deep: { list: [1, 2] } }, { worker_id: "w1", metadata: { k: "v" } }))!;
    expect(() => {
      (ar as { status: string }).status = "succeeded";
    }).toThrow(TypeError);
    expect(() => {
      (ar.input as { deep: { list: number[] } }).deep.list.push(3);
    }).toThrow(TypeError);
    expect(() => {
      ar.config.retry_condition.push("failed");
    }).toThrow(TypeError);
    expect(() => {
      (ar.attempt as { status: string }).status = "failed";
    }).toThrow(TypeError);
    const span = (await store.addSpan(spanFor(ar, 1, { attributes: { a: [1, 2] } })))!;
    expect(() => {
      (span.attributes.a as number[]).push(3);
    }).toThrow(TypeError);
    const worker = (await store.getWorkerById("w1"))!;
    expect(() => {
      (worker as { status: string }).status = "idle";
    }).toThrow(TypeError);
    const res = await store.addResources({
      llm: { resource_type: "llm", endpoint: "http://x", model: "m", sampling_parameters: { t: 1 } },
    });
    expect(() => {
      (res.resources.llm as { sampling_parameters: Record<string, unknown> }).sampling_parameters.t = 2;
    }).toThrow(TypeError);

    const again = (await store.getRolloutById(ar.rollout_id)) as AttemptedRollout;
    expect(again.status).toBe("running");
    expect(again.input).toEqual({ deep: { list: [1, 2] } });
    expect(again.config.retry_condition).toEqual([]);
    expect((await store.querySpans(ar.rollout_id)).items[0]!.attributes.a).toEqual([1, 2]);
    expect((await store.getResourcesById(res.resources_id))!.resources.llm).toMatchObject({ sampling_parameters: { t: 1 } });
  });

  it("the caller's objects are copied on the way in and stay writable", async () => {
    const store = makeStore();
    const input = { list: [1] };
    const metadata = { nested: { x: 1 } };
    const r = await store.enqueueRollout(input, { metadata });
    input.list.push(2);
    metadata.nested.x = 2;
    expect(Object.isFrozen(input)).toBe(false);
    const stored = (await store.getRolloutById(r.rollout_id))!;
    expect(stored.input).toEqual({ list: [1] });
    expect(stored.metadata).toEqual({ nested: { x: 1 } });

    const ar = (await store.dequeueRollout())!;
    const span = spanFor(ar, 1, { attributes: { k: "v" } });
    const storedSpan = (await store.addSpan(span))!;
    expect(storedSpan).not.toBe(span);
    span.attributes.k = "changed";
    expect((await store.querySpans(ar.rollout_id)).items[0]!.attributes.k).toBe("v");
  });
});

describe("waitForRollouts cancellation", () => {
  it("an abort that lands before the wait starts listening still cancels it", async () => {
    const store = makeStore();
    const r = await store.enqueueRollout(null);
    const ac = new AbortController();
    const waiting = store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: null, signal: ac.signal });
    // The call is now past its synchronous checks and reading the store: abort right there.
    ac.abort(new Error("stop"));
    await expect(waiting).rejects.toThrow("stop");
  });
});

describe("statistics and capabilities", () => {
  it("reports the in-memory fields with the class name and uptime from the clock", async () => {
    const clock = new ManualClock(50);
    const store = makeStore({ clock, memoryCapacityBytes: 10_000, spanSizeEstimator: () => 3 });
    const ar = await store.startRollout(null, { worker_id: "w" });
    await store.addManySpans([spanFor(ar, 1), spanFor(ar, 2)]);
    await store.addResources({});
    clock.advance(12.5);
    expect(await store.statistics()).toEqual({
      name: "InMemoryLightningStore",
      total_rollouts: 1,
      total_attempts: 1,
      total_spans: 2,
      total_resources: 1,
      total_workers: 1,
      uptime: 12.5,
      total_span_bytes: 6,
      eviction_threshold_bytes: 7000,
      safe_threshold_bytes: 5600,
      memory_capacity_bytes: 10_000,
    });
  });

  it("is async-safe but not thread-safe, zero-copy or an OTLP endpoint", () => {
    expect(makeStore().capabilities).toEqual({ thread_safe: false, async_safe: true, zero_copy: false, otlp_traces: false });
  });

  it("getLatestResources falls back to the largest update_time when the cache is cleared", async () => {
    const clock = new ManualClock(10);
    const store = makeStore({ clock });
    const a = await store.addResources({});
    clock.advance(1);
    const b = await store.addResources({});
    clock.advance(1);
    await store.updateResources(a.resources_id, {});
    store.forgetLatestResourcesCache();
    expect((await store.getLatestResources())!.resources_id).toBe(a.resources_id);
    expect(b.resources_id).not.toBe(a.resources_id);
  });
});

/**
 * The LightningStore conformance suite (docs/store.md#semantics, and docs/departures.md where Lightning TS
 * departs from Agent Lightning), shaped like drizzle-orm's shared test suites: every store (in-memory, libSQL, the HTTP client in front of a server) runs the same tests
 * through the public interface only. Objects are compared by value, never by identity, so the suite
 * also holds across a network hop.
 *
 * Each test gets a fresh `ManualClock` (starting at t=1000 s) and a fresh store from the factory; the
 * store's watchdog must read that clock, and the factory must configure a scan debounce of 0.
 * `waitForRollouts` timeouts are wall-clock durations (a ManualClock never moves by itself), so the
 * waiting tests measure real time.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MAX_COUNTED_SEQUENCE_ID, type LightningStore, type PageOptions } from "../../src/store/index.ts";
import {
  ConflictError,
  LightningError,
  ManualClock,
  NotFoundError,
  ValidationError,
  isAttemptedRollout,
  spanFromAttributes,
} from "../../src/types/index.ts";
import type {
  Attempt,
  AttemptStatus,
  AttemptedRollout,
  PaginatedResult,
  Rollout,
  RolloutConfigInput,
  RolloutStatus,
  Span,
  SpanFromAttributesOptions,
  Worker,
} from "../../src/types/index.ts";
import type { OtelReadableSpanLike } from "../../src/store/index.ts";

export interface StoreConformanceOptions {
  /** Extra milliseconds allowed in wall-clock assertions (an HTTP hop adds latency). Default 0. */
  timingSlackMs?: number;
  /** How many concurrent callers the concurrency tests start. Default 200. */
  concurrency?: number;
  /** Whether `addOtelSpan` is exercised. Default true. */
  otelSpans?: boolean;
  /**
   * For a store reached over HTTP: raw requests to the server behind it, so that the answers on the wire
   * are checked too (a client hides a `200 null` and a 404 behind the same `null`). Absent: not checked.
   */
  wire?: (store: LightningStore) => WireRequest;
}

/** One raw request under `/v1/agl` of the server behind a store; the answer's status and parsed JSON body. */
export type WireRequest = (method: "GET" | "POST", path: string, body?: unknown) => Promise<{ status: number; body: unknown }>;

/** A WireRequest over `fetch` to the server at `serverAddress` (`http://host:port`). */
export function httpWire(serverAddress: string, fetchFn: typeof fetch = fetch): WireRequest {
  return async (method, path, body) => {
    const res = await fetchFn(`${serverAddress}/v1/agl${path}`, {
      method,
      ...(body === undefined ? {} : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text === "" ? undefined : (JSON.parse(text) as unknown) };
  };
}

export type StoreFactory = (ctx: { clock: ManualClock }) => Promise<LightningStore> | LightningStore;

interface Env {
  store: LightningStore;
  clock: ManualClock;
  opts: Required<Omit<StoreConformanceOptions, "wire">>;
}

const T0 = 1_000;

// ---------------------------------------------------------------------------------------------------------------
// helpers

type ErrorClass<E> = abstract new (...args: never[]) => E;

/** Awaits a promise that must reject with `cls`; returns the error for further checks. */
async function rejectsWith<E extends Error>(p: Promise<unknown>, cls: ErrorClass<E>): Promise<E> {
  let caught: unknown;
  let resolved = false;
  try {
    await p;
    resolved = true;
  } catch (e) {
    caught = e;
  }
  expect(resolved, `expected a ${cls.name}, but the call succeeded`).toBe(false);
  expect(caught, `expected a ${cls.name}, got ${String(caught)}`).toBeInstanceOf(cls);
  return caught as E;
}

/** A ValidationError must carry a zod issue whose path names `key`. */
function expectIssueAt(err: ValidationError, key: string | number): void {
  expect(
    err.issues.some((i) => i.path.includes(key)),
    `no issue path contains ${String(key)}: ${JSON.stringify(err.issues)}`,
  ).toBe(true);
}

/** Mutates a returned object; a frozen object may throw instead, which is just as good (docs/departures.md#9). */
function tryMutate(fn: () => void): void {
  try {
    fn();
  } catch (e) {
    if (!(e instanceof TypeError)) throw e;
  }
}

function attemptOf(r: Rollout | AttemptedRollout | null): Attempt {
  expect(r).not.toBeNull();
  expect(isAttemptedRollout(r!), "expected the rollout to carry its latest attempt").toBe(true);
  return (r as AttemptedRollout).attempt;
}

function makeSpan(target: { rollout_id: string; attempt_id: string }, sequenceId: number, o: SpanFromAttributesOptions = {}): Span {
  return spanFromAttributes({
    rollout_id: target.rollout_id,
    attempt_id: target.attempt_id,
    sequence_id: sequenceId,
    name: `span-${sequenceId}`,
    start_time: T0 + sequenceId,
    end_time: T0 + sequenceId + 0.5,
    ...o,
  });
}

/** Target of a span: a rollout's attempt. */
const at = (r: AttemptedRollout): { rollout_id: string; attempt_id: string } => ({
  rollout_id: r.rollout_id,
  attempt_id: r.attempt.attempt_id,
});

/** Everything observable through queries: compared before and after a rejected call. */
async function snapshot(store: LightningStore): Promise<unknown> {
  const rollouts = (await store.queryRollouts()).items;
  const perRollout = [];
  for (const r of rollouts) {
    perRollout.push({
      attempts: (await store.queryAttempts(r.rollout_id)).items,
      spans: (await store.querySpans(r.rollout_id)).items,
    });
  }
  const stats = await store.statistics();
  return {
    rollouts,
    perRollout,
    resources: (await store.queryResources()).items,
    latestResources: await store.getLatestResources(),
    workers: (await store.queryWorkers()).items,
    counts: [stats.total_rollouts, stats.total_attempts, stats.total_spans, stats.total_resources, stats.total_workers],
  };
}

/** Seeds a varied store: queued, running (with spans and a worker), finished, resources, workers. */
async function seedVaried(env: Env): Promise<{ queued: Rollout; running: AttemptedRollout; done: AttemptedRollout }> {
  const { store, clock } = env;
  await store.addResources({ main: { resource_type: "llm", endpoint: "http://llm/v1", model: "m" } });
  const queued = await store.enqueueRollout({ q: 1 }, { mode: "train", metadata: { k: "v" } });
  clock.advance(1);
  const running = await store.startRollout({ q: 2 }, { worker_id: "w-run", config: { max_attempts: 2 } });
  await store.addSpan(makeSpan(at(running), 1));
  clock.advance(1);
  const done = await store.startRollout({ q: 3 });
  await store.updateAttempt(done.rollout_id, "latest", { status: "succeeded" });
  await store.updateWorker("w-stats", { load: 0.5 });
  clock.advance(1);
  return { queued, running, done };
}

const elapsedMs = (t0: number): number => performance.now() - t0;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A structural OpenTelemetry ReadableSpan (what `addOtelSpan` reads), with nanosecond-exact HrTimes. */
function otelSpan(o: { name: string; traceId: string; spanId: string; parentSpanId?: string; code?: number }): OtelReadableSpanLike {
  return {
    name: o.name,
    spanContext: () => ({ traceId: o.traceId, spanId: o.spanId, isRemote: false }),
    parentSpanContext: o.parentSpanId ? { traceId: o.traceId, spanId: o.parentSpanId } : undefined,
    status: { code: o.code ?? 1, message: undefined },
    attributes: { "gen_ai.system": "openai", n: 3 },
    events: [{ name: "ev", attributes: { a: "b" }, time: [1_700_000_000, 250_000_000] }],
    links: [],
    startTime: [1_700_000_000, 500_000_000],
    endTime: [1_700_000_001, 0],
    resource: { attributes: { "service.name": "svc" }, schemaUrl: "" },
  };
}

// ---------------------------------------------------------------------------------------------------------------

export function runStoreConformance(name: string, factory: StoreFactory, options: StoreConformanceOptions = {}): void {
  const opts: Env["opts"] = {
    timingSlackMs: options.timingSlackMs ?? 0,
    concurrency: options.concurrency ?? 200,
    otelSpans: options.otelSpans ?? true,
  };
  describe(`LightningStore conformance: ${name}`, () => {
    const env = { opts } as Env;
    beforeEach(async () => {
      env.clock = new ManualClock(T0);
      env.store = await factory({ clock: env.clock });
    });
    afterEach(async () => {
      await env.store.close();
    });

    creationTests(env);
    queueTests(env);
    statusDerivationTests(env);
    updateTests(env);
    watchdogTests(env);
    spanTests(env);
    heartbeatTests(env);
    sequenceIdTests(env);
    queryTests(env);
    paginationTests(env);
    sortTests(env);
    resourcesTests(env);
    workerTests(env);
    waitTests(env);
    copyTests(env);
    statisticsTests(env);
    badInputTests(env);
    concurrencyTests(env);
    if (options.wire) wireTests(env, options.wire);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Creating rollouts (docs/store.md#creating-rollouts)

function creationTests(env: Env): void {
  describe("creating rollouts", () => {
    it("enqueueRollout gives a queuing rollout with upstream's exact shape and no attempt key", async () => {
      const r = await env.store.enqueueRollout(null);
      expect(r.rollout_id).toMatch(/^ro-[0-9a-f]{12}$/);
      expect(r).toEqual({
        rollout_id: r.rollout_id,
        input: null,
        start_time: T0,
        end_time: null,
        mode: null,
        resources_id: null,
        status: "queuing",
        config: { timeout_seconds: null, unresponsive_seconds: null, max_attempts: 1, retry_condition: [] },
        metadata: {},
      });
      expect("attempt" in r).toBe(false);
      const stored = await env.store.getRolloutById(r.rollout_id);
      expect(stored).toEqual(r);
      expect("attempt" in stored!).toBe(false);
    });

    it("enqueueRollout keeps the given input, mode, resources_id (unchecked), config and metadata", async () => {
      const input = { question: "2+2?", nested: [1, { a: null }] };
      const r = await env.store.enqueueRollout(input, {
        mode: "val",
        resources_id: "res-123",
        config: { timeout_seconds: 30, max_attempts: 3, retry_condition: ["timeout"] },
        metadata: { owner: "me" },
      });
      expect(r.input).toEqual(input);
      expect(r.mode).toBe("val");
      expect(r.resources_id).toBe("res-123");
      expect(r.config).toEqual({ timeout_seconds: 30, unresponsive_seconds: null, max_attempts: 3, retry_condition: ["timeout"] });
      expect(r.metadata).toEqual({ owner: "me" });
      expect(await env.store.getRolloutById(r.rollout_id)).toEqual(r);
    });

    it.each([
      ["a string", "hello"],
      ["a number", 42],
      ["zero", 0],
      ["false", false],
      ["an array", [1, "two", null]],
      ["an empty object", {}],
    ])("accepts %s as task input", async (_label, input) => {
      const r = await env.store.enqueueRollout(input);
      expect((await env.store.getRolloutById(r.rollout_id))!.input).toEqual(input);
    });

    it("startRollout creates a preparing rollout with attempt 1, both started now, and does not queue it", async () => {
      const r = await env.store.startRollout({ x: 1 }, { mode: "train", worker_id: "w1" });
      expect(r.status).toBe("preparing");
      expect(r.start_time).toBe(T0);
      expect(r.metadata).toEqual({});
      expect(r.attempt).toEqual({
        rollout_id: r.rollout_id,
        attempt_id: r.attempt.attempt_id,
        sequence_id: 1,
        start_time: T0,
        end_time: null,
        status: "preparing",
        worker_id: "w1",
        last_heartbeat_time: null,
        metadata: null,
      });
      expect(r.attempt.attempt_id).toMatch(/^at-[0-9a-f]{8}$/);
      expect(await env.store.getRolloutById(r.rollout_id)).toEqual(r);
      expect(await env.store.dequeueRollout()).toBeNull();
    });

    it("startRollout keeps an empty-string worker_id and creates no worker for it", async () => {
      const r = await env.store.startRollout(null, { worker_id: "" });
      expect(r.attempt.worker_id).toBe("");
      expect((await env.store.getLatestAttempt(r.rollout_id))!.worker_id).toBe("");
      expect((await env.store.queryWorkers()).total).toBe(0);
    });

    it("enqueueManyRollouts returns rollouts in input order and queues them in that order", async () => {
      const out = await env.store.enqueueManyRollouts([
        { input: "a" },
        { input: "b", mode: "test", metadata: { i: 2 } },
        { input: "c", config: { max_attempts: 2 } },
      ]);
      expect(out.map((r) => r.input)).toEqual(["a", "b", "c"]);
      expect(out.every((r) => r.status === "queuing" && !("attempt" in r))).toBe(true);
      expect(out[1].mode).toBe("test");
      expect(out[1].metadata).toEqual({ i: 2 });
      expect(out[0].metadata).toEqual({});
      expect(out[2].config.max_attempts).toBe(2);
      expect(new Set(out.map((r) => r.rollout_id)).size).toBe(3);
      const claimed = [];
      for (let i = 0; i < 3; i++) claimed.push((await env.store.dequeueRollout())!.rollout_id);
      expect(claimed).toEqual(out.map((r) => r.rollout_id));
    });

    it("enqueueManyRollouts with an empty list adds nothing", async () => {
      expect(await env.store.enqueueManyRollouts([])).toEqual([]);
      expect((await env.store.queryRollouts()).total).toBe(0);
    });

    it("getRolloutById and getLatestAttempt give null for an unknown id", async () => {
      expect(await env.store.getRolloutById("ro-000000000000")).toBeNull();
      expect(await env.store.getLatestAttempt("ro-000000000000")).toBeNull();
      const r = await env.store.enqueueRollout(1);
      expect(await env.store.getLatestAttempt(r.rollout_id)).toBeNull();
    });

    it("rollout ids are unique", async () => {
      const rs = await env.store.enqueueManyRollouts(Array.from({ length: 50 }, (_, i) => ({ input: i })));
      expect(new Set(rs.map((r) => r.rollout_id)).size).toBe(50);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The queue, dequeueing and startAttempt (docs/store.md#the-queue-and-attempts)

function queueTests(env: Env): void {
  describe("queue and attempts", () => {
    it("dequeueRollout on an empty queue gives null", async () => {
      expect(await env.store.dequeueRollout()).toBeNull();
    });

    it("dequeueRollout claims FIFO, creating a preparing attempt started now", async () => {
      const a = await env.store.enqueueRollout("a");
      const b = await env.store.enqueueRollout("b");
      env.clock.advance(5);
      const got = (await env.store.dequeueRollout({ worker_id: "w1" }))!;
      expect(got.rollout_id).toBe(a.rollout_id);
      expect(got.status).toBe("preparing");
      expect(got.start_time).toBe(T0);
      expect(got.attempt).toMatchObject({
        rollout_id: a.rollout_id,
        sequence_id: 1,
        status: "preparing",
        start_time: T0 + 5,
        worker_id: "w1",
      });
      expect(await env.store.getRolloutById(a.rollout_id)).toEqual(got);
      expect((await env.store.dequeueRollout())!.rollout_id).toBe(b.rollout_id);
      expect(await env.store.dequeueRollout()).toBeNull();
    });

    it("dequeue skips rollouts whose status changed while queued and keeps popping", async () => {
      const a = await env.store.enqueueRollout("a");
      const b = await env.store.enqueueRollout("b");
      const c = await env.store.enqueueRollout("c");
      await env.store.updateRollout(a.rollout_id, { status: "cancelled" });
      await env.store.updateRollout(b.rollout_id, { status: "succeeded" });
      expect((await env.store.dequeueRollout())!.rollout_id).toBe(c.rollout_id);
      expect(await env.store.dequeueRollout()).toBeNull();
      expect((await env.store.getRolloutById(a.rollout_id))!.status).toBe("cancelled");
      expect(await env.store.getLatestAttempt(a.rollout_id)).toBeNull();
    });

    it("a queued rollout started by startAttempt is skipped by dequeue later", async () => {
      const a = await env.store.enqueueRollout("a");
      const started = await env.store.startAttempt(a.rollout_id);
      expect(started.status).toBe("preparing");
      expect(started.attempt.sequence_id).toBe(1);
      expect(await env.store.dequeueRollout()).toBeNull();
      expect((await env.store.queryAttempts(a.rollout_id)).total).toBe(1);
    });

    it("updateRollout to requeuing after a dequeue puts it back; the next dequeue makes attempt 2", async () => {
      const a = await env.store.enqueueRollout("a");
      const first = (await env.store.dequeueRollout())!;
      await env.store.updateRollout(a.rollout_id, { status: "requeuing" });
      const second = (await env.store.dequeueRollout())!;
      expect(second.rollout_id).toBe(a.rollout_id);
      expect(second.attempt.sequence_id).toBe(2);
      expect(second.attempt.attempt_id).not.toBe(first.attempt.attempt_id);
      expect(second.status).toBe("preparing");
    });

    it("a dequeued retry numbers its attempt after every existing attempt, manual ones included", async () => {
      const r = await env.store.startRollout("a");
      await env.store.startAttempt(r.rollout_id);
      await env.store.updateRollout(r.rollout_id, { status: "requeuing" });
      expect((await env.store.dequeueRollout())!.attempt.sequence_id).toBe(3);
    });

    it("updateRollout to queuing on an already queued rollout does not queue it twice", async () => {
      const a = await env.store.enqueueRollout("a");
      await env.store.updateRollout(a.rollout_id, { status: "queuing" });
      await env.store.updateRollout(a.rollout_id, { status: "requeuing" });
      expect((await env.store.dequeueRollout())!.rollout_id).toBe(a.rollout_id);
      expect(await env.store.dequeueRollout()).toBeNull();
    });

    it("dequeueManyRollouts claims up to limit in FIFO order, skipping non-queued ids", async () => {
      const rs = await env.store.enqueueManyRollouts(["a", "b", "c", "d", "e"].map((input) => ({ input })));
      await env.store.updateRollout(rs[1].rollout_id, { status: "cancelled" });
      const got = await env.store.dequeueManyRollouts({ limit: 3, worker_id: "w1" });
      expect(got.map((r) => r.rollout_id)).toEqual([rs[0], rs[2], rs[3]].map((r) => r.rollout_id));
      expect(got.every((r) => r.attempt.worker_id === "w1" && r.attempt.sequence_id === 1 && r.status === "preparing")).toBe(true);
      const rest = await env.store.dequeueManyRollouts({ limit: 10 });
      expect(rest.map((r) => r.rollout_id)).toEqual([rs[4].rollout_id]);
      expect(await env.store.dequeueManyRollouts({ limit: 10 })).toEqual([]);
    });

    it("dequeueManyRollouts defaults to one and gives [] for limit <= 0 without claiming", async () => {
      await env.store.enqueueManyRollouts([{ input: 1 }, { input: 2 }]);
      expect(await env.store.dequeueManyRollouts({ limit: 0 })).toEqual([]);
      expect(await env.store.dequeueManyRollouts({ limit: -3 })).toEqual([]);
      expect(await env.store.dequeueManyRollouts()).toHaveLength(1);
      expect(await env.store.dequeueManyRollouts({ limit: 5 })).toHaveLength(1);
    });

    it("startAttempt adds attempt count+1 even beyond max_attempts and keeps the rollout queued nowhere", async () => {
      const r = await env.store.startRollout("x", { config: { max_attempts: 1 } });
      env.clock.advance(3);
      const second = await env.store.startAttempt(r.rollout_id, { worker_id: "w2" });
      expect(second.attempt).toMatchObject({ sequence_id: 2, status: "preparing", worker_id: "w2", start_time: T0 + 3 });
      const third = await env.store.startAttempt(r.rollout_id);
      expect(third.attempt.sequence_id).toBe(3);
      expect(third.attempt.worker_id).toBeNull();
      expect((await env.store.getLatestAttempt(r.rollout_id))!.attempt_id).toBe(third.attempt.attempt_id);
      expect((await env.store.queryAttempts(r.rollout_id)).items.map((a) => a.sequence_id)).toEqual([1, 2, 3]);
      expect(await env.store.dequeueRollout()).toBeNull();
    });

    it("startAttempt on an unknown rollout throws NotFoundError", async () => {
      const err = await rejectsWith(env.store.startAttempt("ro-000000000000"), NotFoundError);
      expect(err.message).toContain("ro-000000000000");
    });

    it("startAttempt on a finished rollout is allowed, revives it to preparing and clears end_time (docs/departures.md#6)", async () => {
      for (const status of ["succeeded", "failed"] as const) {
        const r = await env.store.startRollout(status);
        env.clock.advance(1);
        await env.store.updateAttempt(r.rollout_id, "latest", { status });
        expect((await env.store.getRolloutById(r.rollout_id))!.end_time).toBe(env.clock.now());
        env.clock.advance(1);
        const revived = await env.store.startAttempt(r.rollout_id);
        expect(revived.status).toBe("preparing");
        expect(revived.end_time).toBeNull();
        expect(revived.attempt.sequence_id).toBe(2);
        expect(await env.store.getRolloutById(r.rollout_id)).toMatchObject({ status: "preparing", end_time: null });
        // A waiter must not see the revived rollout as finished.
        expect(await env.store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 0 })).toEqual([]);
        env.clock.advance(1);
        await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
        const done = await env.store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 0 });
        expect(done).toHaveLength(1);
        expect(done[0]).toMatchObject({ status: "succeeded", end_time: env.clock.now() });
      }
    });

    // docs/departures.md#6 allows a manual retry of any finished rollout; #16 only stops attempts from overriding a cancel.
    it("startAttempt on a cancelled rollout is a manual retry: preparing, end_time cleared", async () => {
      const r = await env.store.enqueueRollout("x");
      await env.store.updateRollout(r.rollout_id, { status: "cancelled" });
      const revived = await env.store.startAttempt(r.rollout_id);
      expect(revived).toMatchObject({ status: "preparing", end_time: null });
      expect(revived.attempt.sequence_id).toBe(1);
    });

    it("a waiter blocked on a revived rollout wakes only when it finishes again (docs/departures.md#6)", async () => {
      const r = await env.store.startRollout("x");
      await env.store.updateRollout(r.rollout_id, { status: "failed" });
      await env.store.startAttempt(r.rollout_id);
      let settled = false;
      const waiting = env.store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 5 }).then((v) => {
        settled = true;
        return v;
      });
      await sleep(100);
      expect(settled).toBe(false);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      const out = await waiting;
      expect(out.map((x) => [x.rollout_id, x.status])).toEqual([[r.rollout_id, "succeeded"]]);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The rollout follows its latest attempt; retries (docs/store.md#the-rollout-follows-its-latest-attempt;
// docs/departures.md#5 and docs/departures.md#16)

interface DerivationRow {
  attempt: AttemptStatus;
  config: RolloutConfigInput;
  rollout: RolloutStatus;
}

const DERIVATION: DerivationRow[] = [
  { attempt: "running", config: {}, rollout: "running" },
  { attempt: "succeeded", config: {}, rollout: "succeeded" },
  { attempt: "succeeded", config: { max_attempts: 3, retry_condition: ["failed"] }, rollout: "succeeded" },
  { attempt: "failed", config: {}, rollout: "failed" },
  { attempt: "failed", config: { max_attempts: 2, retry_condition: ["failed"] }, rollout: "requeuing" },
  { attempt: "failed", config: { max_attempts: 1, retry_condition: ["failed"] }, rollout: "failed" },
  { attempt: "failed", config: { max_attempts: 3, retry_condition: ["timeout", "unresponsive"] }, rollout: "failed" },
  { attempt: "timeout", config: {}, rollout: "failed" },
  { attempt: "timeout", config: { max_attempts: 2, retry_condition: ["timeout"] }, rollout: "requeuing" },
  { attempt: "timeout", config: { max_attempts: 2, retry_condition: ["failed"] }, rollout: "failed" },
  { attempt: "unresponsive", config: {}, rollout: "failed" },
  { attempt: "unresponsive", config: { max_attempts: 5, retry_condition: ["unresponsive"] }, rollout: "requeuing" },
  { attempt: "unresponsive", config: { max_attempts: 1, retry_condition: ["unresponsive"] }, rollout: "failed" },
];

function statusDerivationTests(env: Env): void {
  describe("rollout status follows the latest attempt", () => {
    it.each(DERIVATION)("attempt $attempt with config $config gives rollout $rollout", async ({ attempt, config, rollout }) => {
      const r = await env.store.startRollout("x", { config });
      env.clock.advance(2);
      const updated = await env.store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: attempt });
      expect(updated.status).toBe(attempt);
      // end_time on an attempt: only failed/succeeded set it.
      const attemptEnds = attempt === "failed" || attempt === "succeeded";
      expect(updated.end_time).toBe(attemptEnds ? T0 + 2 : null);
      const after = (await env.store.getRolloutById(r.rollout_id))!;
      expect(after.status).toBe(rollout);
      const terminal = rollout === "failed" || rollout === "succeeded";
      expect(after.end_time).toBe(terminal ? T0 + 2 : null);
      const next = await env.store.dequeueRollout();
      if (rollout === "requeuing") {
        expect(next!.rollout_id).toBe(r.rollout_id);
        expect(next!.attempt.sequence_id).toBe(2);
      } else {
        expect(next).toBeNull();
      }
    });

    // The one illegal transition (docs/store.md#the-rollout-follows-its-latest-attempt): an attempt is prepared once; a new try is a new attempt.
    it.each(["running", "succeeded", "failed", "timeout"] as const)(
      "an attempt that is %s cannot go back to preparing: ConflictError, nothing changes",
      async (status) => {
        const r = await env.store.startRollout("x", { worker_id: "w1" });
        await env.store.updateAttempt(r.rollout_id, "latest", { status });
        const before = await snapshot(env.store);
        env.clock.advance(1);
        await rejectsWith(env.store.updateAttempt(r.rollout_id, "latest", { status: "preparing", metadata: { m: 1 } }), ConflictError);
        expect(await snapshot(env.store)).toEqual(before);
      },
    );

    it("a preparing attempt may be set to preparing again (no transition)", async () => {
      const r = await env.store.startRollout("x");
      const a = await env.store.updateAttempt(r.rollout_id, "latest", { status: "preparing" });
      expect(a.status).toBe("preparing");
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("preparing");
    });

    it("ended attempts may move between ended statuses, and the rollout follows", async () => {
      const r = await env.store.startRollout("x");
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      env.clock.advance(1);
      const a = await env.store.updateAttempt(r.rollout_id, "latest", { status: "failed" });
      expect(a).toMatchObject({ status: "failed", end_time: T0 + 1 });
      expect(await env.store.getRolloutById(r.rollout_id)).toMatchObject({ status: "failed", end_time: T0 + 1 });
    });

    it("retries until max_attempts, then fails for good", async () => {
      const r = await env.store.enqueueRollout("x", { config: { max_attempts: 3, retry_condition: ["failed"] } });
      const seen: number[] = [];
      for (let i = 1; i <= 3; i++) {
        env.clock.advance(1);
        const claimed = (await env.store.dequeueRollout({ worker_id: "w" }))!;
        expect(claimed.rollout_id).toBe(r.rollout_id);
        seen.push(claimed.attempt.sequence_id);
        await env.store.updateAttempt(r.rollout_id, claimed.attempt.attempt_id, { status: "failed" });
        expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe(i < 3 ? "requeuing" : "failed");
      }
      expect(seen).toEqual([1, 2, 3]);
      expect(await env.store.dequeueRollout()).toBeNull();
      const attempts = (await env.store.queryAttempts(r.rollout_id)).items;
      expect(attempts.map((a) => [a.sequence_id, a.status])).toEqual([
        [1, "failed"],
        [2, "failed"],
        [3, "failed"],
      ]);
      expect(attempts.every((a) => a.end_time !== null)).toBe(true);
      expect((await env.store.getRolloutById(r.rollout_id))!.end_time).toBe(T0 + 3);
    });

    it("a retried rollout goes to the BACK of the queue", async () => {
      const a = await env.store.enqueueRollout("a", { config: { max_attempts: 2, retry_condition: ["failed"] } });
      const b = await env.store.enqueueRollout("b");
      const c = await env.store.enqueueRollout("c");
      const claimed = (await env.store.dequeueRollout())!;
      expect(claimed.rollout_id).toBe(a.rollout_id);
      await env.store.updateAttempt(a.rollout_id, "latest", { status: "failed" });
      const order = (await env.store.dequeueManyRollouts({ limit: 3 })).map((r) => r.rollout_id);
      expect(order).toEqual([b.rollout_id, c.rollout_id, a.rollout_id]);
    });

    it("the attempt sequence id, not the count of attempts of that status, limits retries", async () => {
      // A manual startAttempt beyond max_attempts: its failure cannot be retried.
      const r = await env.store.startRollout("x", { config: { max_attempts: 2, retry_condition: ["failed"] } });
      await env.store.startAttempt(r.rollout_id);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "failed" });
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("failed");
    });

    it("updates to an attempt that is not the latest never touch the rollout", async () => {
      const r = await env.store.startRollout("x", { config: { max_attempts: 3, retry_condition: ["failed"] } });
      const second = await env.store.startAttempt(r.rollout_id);
      expect(second.attempt.sequence_id).toBe(2);
      for (const status of ["failed", "succeeded", "timeout", "running"] as const) {
        env.clock.advance(1);
        const a = await env.store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status });
        expect(a.status).toBe(status);
        expect(await env.store.getRolloutById(r.rollout_id)).toMatchObject({ status: "preparing", end_time: null });
        expect(attemptOf(await env.store.getRolloutById(r.rollout_id)).attempt_id).toBe(second.attempt.attempt_id);
      }
      expect(await env.store.dequeueRollout()).toBeNull();
    });

    it("'latest' addresses the attempt with the highest sequence id", async () => {
      const r = await env.store.startRollout("x");
      const second = await env.store.startAttempt(r.rollout_id);
      const updated = await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      expect(updated.attempt_id).toBe(second.attempt.attempt_id);
      expect((await env.store.queryAttempts(r.rollout_id)).items.map((a) => a.status)).toEqual(["preparing", "succeeded"]);
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("succeeded");
    });

    it("a finished (failed) rollout follows a later success of its latest attempt", async () => {
      const r = await env.store.startRollout("x");
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "failed" });
      env.clock.advance(4);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      expect(await env.store.getRolloutById(r.rollout_id)).toMatchObject({ status: "succeeded", end_time: T0 + 4 });
    });

    it("a metadata-only updateAttempt leaves a hand-set rollout status alone (docs/departures.md#5)", async () => {
      const r = await env.store.startRollout("x");
      await env.store.updateRollout(r.rollout_id, { status: "running" });
      const a = await env.store.updateAttempt(r.rollout_id, "latest", { metadata: { note: "hi" } });
      expect(a.status).toBe("preparing");
      expect(a.metadata).toEqual({ note: "hi" });
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("running");
    });

    // docs/departures.md#5 names metadata-only updates; a worker- or heartbeat-only update is no status change either.
    it.each([
      ["worker_id", { worker_id: "w7" }],
      ["last_heartbeat_time", { last_heartbeat_time: T0 + 0.5 }],
    ] as const)("a %s-only updateAttempt leaves a hand-set rollout status alone", async (_label, patch) => {
      const r = await env.store.startRollout("x");
      await env.store.updateRollout(r.rollout_id, { status: "running" });
      await env.store.updateAttempt(r.rollout_id, "latest", patch);
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("running");
    });

    it("a metadata-only updateAttempt leaves a cancelled rollout cancelled (docs/departures.md#5)", async () => {
      const r = await env.store.startRollout("x");
      await env.store.updateRollout(r.rollout_id, { status: "cancelled" });
      await env.store.updateAttempt(r.rollout_id, "latest", { metadata: { m: 1 } });
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("cancelled");
    });

    it.each(["succeeded", "failed", "running", "timeout"] as const)(
      "a cancelled rollout stays cancelled when its attempt becomes %s (docs/departures.md#16)",
      async (status) => {
        const r = await env.store.startRollout("x", { config: { max_attempts: 3, retry_condition: ["failed", "timeout"] } });
        env.clock.advance(1);
        await env.store.updateRollout(r.rollout_id, { status: "cancelled" });
        env.clock.advance(1);
        const a = await env.store.updateAttempt(r.rollout_id, "latest", { status });
        expect(a.status).toBe(status);
        expect(await env.store.getRolloutById(r.rollout_id)).toMatchObject({ status: "cancelled", end_time: T0 + 1 });
        expect(await env.store.dequeueRollout()).toBeNull();
      },
    );

    it("cancelling a rollout does not touch its attempt", async () => {
      const r = await env.store.startRollout("x");
      await env.store.updateRollout(r.rollout_id, { status: "cancelled" });
      expect((await env.store.getLatestAttempt(r.rollout_id))!).toEqual(r.attempt);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Field semantics of updateRollout / updateAttempt (docs/store.md#updating-rollouts-and-attempts)

function updateTests(env: Env): void {
  describe("updateRollout and updateAttempt", () => {
    it("updateRollout replaces only the given fields and returns the plain rollout", async () => {
      const r = await env.store.startRollout({ a: 1 }, { mode: "train", resources_id: "rs-x", metadata: { keep: 1 } });
      const out = await env.store.updateRollout(r.rollout_id, { input: { b: 2 } });
      expect("attempt" in out).toBe(false);
      const { attempt: _a, ...plain } = r;
      expect(out).toEqual({ ...plain, input: { b: 2 } });
      expect(await env.store.getRolloutById(r.rollout_id)).toEqual({ ...r, input: { b: 2 } });
    });

    it("updateRollout with explicit nulls clears mode, resources_id and metadata", async () => {
      const r = await env.store.enqueueRollout(1, { mode: "train", resources_id: "rs-1", metadata: { a: 1 } });
      const out = await env.store.updateRollout(r.rollout_id, { mode: null, resources_id: null, metadata: null });
      expect(out).toMatchObject({ mode: null, resources_id: null, metadata: null });
      expect(await env.store.getRolloutById(r.rollout_id)).toEqual(out);
    });

    it("updateRollout replaces metadata instead of merging it, and replaces config", async () => {
      const r = await env.store.enqueueRollout(1, { metadata: { a: 1, b: 2 }, config: { max_attempts: 4 } });
      const out = await env.store.updateRollout(r.rollout_id, {
        metadata: { c: 3 },
        config: { timeout_seconds: 9, retry_condition: ["failed"] },
      });
      expect(out.metadata).toEqual({ c: 3 });
      expect(out.config).toEqual({ timeout_seconds: 9, unresponsive_seconds: null, max_attempts: 1, retry_condition: ["failed"] });
    });

    it.each(["failed", "succeeded", "cancelled"] as const)("updateRollout to %s writes end_time = now", async (status) => {
      const r = await env.store.enqueueRollout(1);
      env.clock.advance(7.25);
      const out = await env.store.updateRollout(r.rollout_id, { status });
      expect(out.status).toBe(status);
      expect(out.end_time).toBe(T0 + 7.25);
      expect(out.end_time!).toBeGreaterThan(out.start_time);
    });

    it.each(["queuing", "requeuing", "preparing", "running"] as const)("updateRollout to %s writes no end_time", async (status) => {
      const r = await env.store.startRollout(1);
      env.clock.advance(1);
      const out = await env.store.updateRollout(r.rollout_id, { status });
      expect(out).toMatchObject({ status, end_time: null });
    });

    // docs/departures.md#6 says a revived rollout has no end_time; the same holds when it is revived by hand.
    it("a finished rollout set back to requeuing by hand loses its end_time and is queued again", async () => {
      const r = await env.store.startRollout(1);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "failed" });
      env.clock.advance(1);
      const out = await env.store.updateRollout(r.rollout_id, { status: "requeuing" });
      expect(out).toMatchObject({ status: "requeuing", end_time: null });
      const retry = (await env.store.dequeueRollout())!;
      expect(retry.rollout_id).toBe(r.rollout_id);
      expect(retry.attempt.sequence_id).toBe(2);
    });

    it("updateRollout on an unknown id throws NotFoundError", async () => {
      await rejectsWith(env.store.updateRollout("ro-000000000000", { status: "failed" }), NotFoundError);
    });

    it("updateAttempt replaces worker_id, last_heartbeat_time and metadata and leaves the rest", async () => {
      const r = await env.store.startRollout(1, { worker_id: "w1" });
      const out = await env.store.updateAttempt(r.rollout_id, r.attempt.attempt_id, {
        worker_id: "w2",
        last_heartbeat_time: 1234.5,
        metadata: { x: [1, 2] },
      });
      expect(out).toEqual({ ...r.attempt, worker_id: "w2", last_heartbeat_time: 1234.5, metadata: { x: [1, 2] } });
      expect(await env.store.getLatestAttempt(r.rollout_id)).toEqual(out);
      const again = await env.store.updateAttempt(r.rollout_id, "latest", { metadata: { y: 1 } });
      expect(again.metadata).toEqual({ y: 1 });
    });

    it("updateAttempt on an unknown rollout throws NotFoundError", async () => {
      await rejectsWith(env.store.updateAttempt("ro-000000000000", "latest", { status: "failed" }), NotFoundError);
    });

    it("updateAttempt on a rollout without attempts throws NotFoundError, even for a made-up attempt id", async () => {
      const r = await env.store.enqueueRollout(1);
      await rejectsWith(env.store.updateAttempt(r.rollout_id, "latest", { status: "failed" }), NotFoundError);
      await rejectsWith(env.store.updateAttempt(r.rollout_id, "at-deadbeef", { status: "failed" }), NotFoundError);
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("queuing");
    });

    it("updateAttempt with an unknown attempt id throws NotFoundError and changes nothing", async () => {
      const r = await env.store.startRollout(1);
      const before = await snapshot(env.store);
      const err = await rejectsWith(env.store.updateAttempt(r.rollout_id, "at-deadbeef", { status: "failed" }), NotFoundError);
      expect(err.message).toContain("at-deadbeef");
      expect(await snapshot(env.store)).toEqual(before);
    });

    it("updateAttempt with an attempt of another rollout throws NotFoundError", async () => {
      const r1 = await env.store.startRollout(1);
      const r2 = await env.store.startRollout(2);
      await rejectsWith(env.store.updateAttempt(r1.rollout_id, r2.attempt.attempt_id, { status: "failed" }), NotFoundError);
      expect((await env.store.getLatestAttempt(r2.rollout_id))!.status).toBe("preparing");
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The watchdog (docs/store.md#the-watchdog), driven by the injected clock; scans run before query calls (debounce 0)

function watchdogTests(env: Env): void {
  /** Lets the watchdog look at the store at the current clock time, through a scanning call. */
  const scanAndGet = (id: string) => env.store.getRolloutById(id);

  describe("watchdog", () => {
    it("timeout_seconds is strict: at exactly the limit nothing happens, just past it the attempt times out", async () => {
      const r = await env.store.startRollout(1, { config: { timeout_seconds: 10 }, worker_id: "w1" });
      env.clock.set(T0 + 10);
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("preparing");
      env.clock.set(T0 + 10.001);
      const after = (await scanAndGet(r.rollout_id))!;
      expect(after.status).toBe("failed");
      expect(after.end_time).toBe(T0 + 10.001);
      expect(attemptOf(after)).toMatchObject({ status: "timeout", end_time: null });
    });

    it("timeout_seconds counts from the attempt's start, not the rollout's", async () => {
      const r = await env.store.enqueueRollout(1, { config: { timeout_seconds: 10 } });
      env.clock.advance(50);
      await env.store.dequeueRollout();
      env.clock.advance(9);
      expect((await scanAndGet(r.rollout_id))!.status).toBe("preparing");
      env.clock.advance(1.5);
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("timeout");
    });

    it("a timed-out attempt is retried when timeout is in retry_condition, at the back of the queue", async () => {
      const r = await env.store.startRollout(1, { config: { timeout_seconds: 5, max_attempts: 2, retry_condition: ["timeout"] } });
      const other = await env.store.enqueueRollout(2);
      env.clock.advance(6);
      const after = (await scanAndGet(r.rollout_id))!;
      expect(after.status).toBe("requeuing");
      expect(after.end_time).toBeNull();
      expect((await env.store.dequeueRollout())!.rollout_id).toBe(other.rollout_id);
      const retry = (await env.store.dequeueRollout())!;
      expect(retry.rollout_id).toBe(r.rollout_id);
      expect(retry.attempt).toMatchObject({ sequence_id: 2, start_time: T0 + 6 });
      // The second attempt gets its own full timeout, then fails for good.
      env.clock.advance(5);
      expect((await scanAndGet(r.rollout_id))!.status).toBe("preparing");
      env.clock.advance(0.5);
      expect((await scanAndGet(r.rollout_id))!.status).toBe("failed");
      expect((await env.store.queryAttempts(r.rollout_id)).items.map((a) => a.status)).toEqual(["timeout", "timeout"]);
    });

    it("unresponsive_seconds without a heartbeat counts from the attempt's start, strictly", async () => {
      const r = await env.store.startRollout(1, { config: { unresponsive_seconds: 3 } });
      env.clock.advance(3);
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("preparing");
      env.clock.advance(0.01);
      const after = (await scanAndGet(r.rollout_id))!;
      expect(attemptOf(after)).toMatchObject({ status: "unresponsive", end_time: null });
      expect(after).toMatchObject({ status: "failed", end_time: T0 + 3.01 });
    });

    it("unresponsive_seconds with a span heartbeat counts from the last heartbeat, strictly", async () => {
      const r = await env.store.startRollout(1, { config: { unresponsive_seconds: 3 } });
      env.clock.advance(2);
      await env.store.addSpan(makeSpan(at(r), 1));
      env.clock.advance(2); // 4 s after start, 2 s after the heartbeat
      expect(attemptOf(await scanAndGet(r.rollout_id))).toMatchObject({ status: "running", last_heartbeat_time: T0 + 2 });
      env.clock.set(T0 + 5); // exactly 3 s after the heartbeat
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("running");
      env.clock.set(T0 + 5.01);
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("unresponsive");
      expect((await scanAndGet(r.rollout_id))!.status).toBe("failed");
    });

    it("a heartbeat set through updateAttempt also counts", async () => {
      const r = await env.store.startRollout(1, { config: { unresponsive_seconds: 3 } });
      await env.store.updateAttempt(r.rollout_id, "latest", { last_heartbeat_time: T0 + 10 });
      env.clock.set(T0 + 12);
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("preparing");
      env.clock.set(T0 + 13.5);
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("unresponsive");
    });

    it("an unresponsive attempt is retried when unresponsive is in retry_condition", async () => {
      const r = await env.store.startRollout(1, {
        config: { unresponsive_seconds: 1, max_attempts: 2, retry_condition: ["unresponsive"] },
      });
      env.clock.advance(2);
      expect((await scanAndGet(r.rollout_id))!.status).toBe("requeuing");
      const retry = (await env.store.dequeueRollout())!;
      expect(retry.attempt.sequence_id).toBe(2);
    });

    it("timeout wins over unresponsive when both limits are exceeded", async () => {
      const r = await env.store.startRollout(1, { config: { timeout_seconds: 5, unresponsive_seconds: 2 } });
      env.clock.advance(10);
      expect(attemptOf(await scanAndGet(r.rollout_id)).status).toBe("timeout");
    });

    it("the worker of a timed-out or unresponsive attempt becomes unknown, keeping its heartbeat stats", async () => {
      await env.store.updateWorker("w1", { gpu: 0.9 });
      const hb = (await env.store.getWorkerById("w1"))!.last_heartbeat_time;
      const r1 = await env.store.startRollout(1, { config: { timeout_seconds: 1 }, worker_id: "w1" });
      await env.store.startRollout(2, { config: { unresponsive_seconds: 1 }, worker_id: "w2" });
      expect((await env.store.getWorkerById("w1"))!.status).toBe("busy");
      env.clock.advance(2);
      await scanAndGet(r1.rollout_id);
      for (const id of ["w1", "w2"]) {
        const w = (await env.store.getWorkerById(id))!;
        expect(w).toMatchObject({ status: "unknown", last_idle_time: T0 + 2, current_rollout_id: null, current_attempt_id: null });
      }
      expect((await env.store.getWorkerById("w1"))!).toMatchObject({ heartbeat_stats: { gpu: 0.9 }, last_heartbeat_time: hb });
    });

    it("finished, queued and unconfigured rollouts are left alone", async () => {
      const done = await env.store.startRollout(1, { config: { timeout_seconds: 1 } });
      await env.store.updateAttempt(done.rollout_id, "latest", { status: "succeeded" });
      const queued = await env.store.enqueueRollout(2, { config: { timeout_seconds: 1, unresponsive_seconds: 1 } });
      const free = await env.store.startRollout(3);
      env.clock.advance(1_000_000);
      expect((await env.store.queryRollouts()).items.map((r) => r.status)).toEqual(["succeeded", "queuing", "preparing"]);
      expect(attemptOf(await scanAndGet(done.rollout_id)).status).toBe("succeeded");
      expect(await scanAndGet(queued.rollout_id)).toMatchObject({ status: "queuing" });
      expect(attemptOf(await scanAndGet(free.rollout_id)).status).toBe("preparing");
    });

    it("a rollout set running by hand without any attempt is skipped, not an error", async () => {
      const r = await env.store.enqueueRollout(1, { config: { timeout_seconds: 1, unresponsive_seconds: 1 } });
      await env.store.updateRollout(r.rollout_id, { status: "running" });
      env.clock.advance(10);
      expect((await env.store.queryRollouts()).items.map((x) => x.status)).toEqual(["running"]);
      expect(await env.store.getLatestAttempt(r.rollout_id)).toBeNull();
    });

    it("only the latest attempt is checked", async () => {
      const r = await env.store.startRollout(1, { config: { timeout_seconds: 5 } });
      env.clock.advance(4);
      const second = await env.store.startAttempt(r.rollout_id);
      env.clock.advance(2); // attempt 1 is 6 s old, attempt 2 only 2 s
      expect((await scanAndGet(r.rollout_id))!.status).toBe("preparing");
      const attempts = (await env.store.queryAttempts(r.rollout_id)).items;
      expect(attempts.map((a) => a.status)).toEqual(["preparing", "preparing"]);
      expect(attemptOf(await scanAndGet(r.rollout_id)).attempt_id).toBe(second.attempt.attempt_id);
    });

    it("waitForRollouts and dequeueRollout run the watchdog first", async () => {
      const failing = await env.store.startRollout(1, { config: { timeout_seconds: 1 } });
      const retried = await env.store.startRollout(2, { config: { timeout_seconds: 1, max_attempts: 2, retry_condition: ["timeout"] } });
      env.clock.advance(2);
      const done = await env.store.waitForRollouts({ rollout_ids: [failing.rollout_id, retried.rollout_id], timeout: 0 });
      expect(done.map((r) => [r.rollout_id, r.status])).toEqual([[failing.rollout_id, "failed"]]);
      const again = (await env.store.dequeueRollout())!;
      expect(again.rollout_id).toBe(retried.rollout_id);
      expect(again.attempt.sequence_id).toBe(2);
    });

    it("dequeueRollout claims a rollout the watchdog requeues in the same call", async () => {
      const r = await env.store.startRollout(1, {
        config: { unresponsive_seconds: 1, max_attempts: 2, retry_condition: ["unresponsive"] },
      });
      env.clock.advance(1.5);
      const again = (await env.store.dequeueRollout({ worker_id: "w2" }))!;
      expect(again).toMatchObject({ rollout_id: r.rollout_id, status: "preparing" });
      expect(again.attempt).toMatchObject({ sequence_id: 2, worker_id: "w2", start_time: T0 + 1.5 });
    });

    it("a waiter is woken when the watchdog fails a rollout", async () => {
      const r = await env.store.startRollout(1, { config: { timeout_seconds: 1 } });
      // A real-time limit far above the wake-up: a loaded machine (the suite runs child processes
      // beside it) must not turn the wake into a timeout; a missed wake still fails at the test timeout.
      const waiting = env.store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 25 });
      await sleep(20);
      env.clock.advance(2);
      await env.store.queryRollouts();
      const out = await waiting;
      expect(out.map((x) => x.status)).toEqual(["failed"]);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Spans (docs/store.md#spans)

function spanTests(env: Env): void {
  describe("spans", () => {
    it("addSpan stores the span and returns it by value", async () => {
      const r = await env.store.startRollout(1);
      const s = makeSpan(at(r), 1, { attributes: { k: "v", n: 2, flags: [true, false], xs: [1.5, 2] }, parent_id: "00000000000000aa" });
      const out = await env.store.addSpan(s);
      expect(out).toEqual(s);
      const stored = await env.store.querySpans(r.rollout_id);
      expect(stored.items).toEqual([s]);
      expect(stored.total).toBe(1);
    });

    it("extra span keys survive the round trip", async () => {
      const r = await env.store.startRollout(1);
      const s = { ...makeSpan(at(r), 1), custom_field: { deep: [1, 2] }, another: "x" } as Span;
      await env.store.addSpan(s);
      expect((await env.store.querySpans(r.rollout_id)).items[0]).toMatchObject({ custom_field: { deep: [1, 2] }, another: "x" });
    });

    it("a duplicate (rollout, attempt, span_id) returns null, keeps the first span and gives no heartbeat", async () => {
      const r = await env.store.startRollout(1);
      const s = makeSpan(at(r), 1);
      await env.store.addSpan(s);
      env.clock.advance(10);
      const dup = { ...s, name: "changed" };
      expect(await env.store.addSpan(dup)).toBeNull();
      const spans = (await env.store.querySpans(r.rollout_id)).items;
      expect(spans).toEqual([s]);
      expect((await env.store.getLatestAttempt(r.rollout_id))!.last_heartbeat_time).toBe(T0);
    });

    it("the same span_id in another attempt or rollout is not a duplicate", async () => {
      const r1 = await env.store.startRollout(1);
      const r1b = await env.store.startAttempt(r1.rollout_id);
      const r2 = await env.store.startRollout(2);
      const s = makeSpan(at(r1), 1);
      expect(await env.store.addSpan(s)).not.toBeNull();
      expect(await env.store.addSpan({ ...s, attempt_id: r1b.attempt.attempt_id })).not.toBeNull();
      expect(await env.store.addSpan({ ...s, rollout_id: r2.rollout_id, attempt_id: r2.attempt.attempt_id })).not.toBeNull();
      expect((await env.store.querySpans(r1.rollout_id)).total).toBe(2);
      expect((await env.store.querySpans(r2.rollout_id)).total).toBe(1);
    });

    it("several spans may share one sequence_id", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addSpan(makeSpan(at(r), 3));
      await env.store.addSpan(makeSpan(at(r), 3));
      expect((await env.store.querySpans(r.rollout_id)).items.map((s) => s.sequence_id)).toEqual([3, 3]);
    });

    it("addSpan for an unknown rollout or attempt throws NotFoundError and stores nothing", async () => {
      const r = await env.store.startRollout(1);
      await rejectsWith(env.store.addSpan(makeSpan({ rollout_id: "ro-000000000000", attempt_id: r.attempt.attempt_id }, 1)), NotFoundError);
      await rejectsWith(env.store.addSpan(makeSpan({ rollout_id: r.rollout_id, attempt_id: "at-00000000" }, 1)), NotFoundError);
      expect((await env.store.querySpans(r.rollout_id)).total).toBe(0);
      expect((await env.store.statistics()).total_spans).toBe(0);
      expect((await env.store.getLatestAttempt(r.rollout_id))!.status).toBe("preparing");
    });

    it("addManySpans returns only the spans really inserted, in input order", async () => {
      const r = await env.store.startRollout(1);
      const s1 = makeSpan(at(r), 1);
      await env.store.addSpan(s1);
      const batch = [makeSpan(at(r), 2), s1, makeSpan(at(r), 3), makeSpan(at(r), 4)];
      const out = await env.store.addManySpans(batch);
      expect(out).toEqual([batch[0], batch[2], batch[3]]);
      expect((await env.store.querySpans(r.rollout_id)).total).toBe(4);
    });

    it("addManySpans skips a duplicate inside the batch itself, keeping the first", async () => {
      const r = await env.store.startRollout(1);
      const a = makeSpan(at(r), 1);
      const b = makeSpan(at(r), 2);
      const out = await env.store.addManySpans([a, b, { ...a, name: "second copy" }]);
      expect(out).toEqual([a, b]);
      expect((await env.store.querySpans(r.rollout_id)).items.map((s) => s.name)).toEqual([a.name, b.name]);
    });

    it("addManySpans spans several rollouts and attempts, and an empty batch adds nothing", async () => {
      const r1 = await env.store.startRollout(1);
      const r2 = await env.store.startRollout(2);
      expect(await env.store.addManySpans([])).toEqual([]);
      const out = await env.store.addManySpans([makeSpan(at(r1), 1), makeSpan(at(r2), 1), makeSpan(at(r1), 2)]);
      expect(out).toHaveLength(3);
      expect((await env.store.querySpans(r1.rollout_id)).total).toBe(2);
      expect((await env.store.querySpans(r2.rollout_id)).total).toBe(1);
      for (const r of [r1, r2]) expect(attemptOf(await env.store.getRolloutById(r.rollout_id)).status).toBe("running");
    });

    // Upstream keeps the groups inserted before the bad one; here bad input changes nothing.
    it("a failing addManySpans batch (unknown attempt in a later group) commits nothing", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addSpan(makeSpan(at(r), 1));
      const before = await snapshot(env.store);
      env.clock.advance(5);
      await rejectsWith(
        env.store.addManySpans([makeSpan(at(r), 2), makeSpan({ rollout_id: r.rollout_id, attempt_id: "at-00000000" }, 3)]),
        NotFoundError,
      );
      expect(await snapshot(env.store)).toEqual(before);
    });

    it("spans are stored for finished and non-latest attempts without changing their status", async () => {
      const r = await env.store.startRollout(1);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      const second = await env.store.startAttempt(r.rollout_id);
      env.clock.advance(2);
      expect(await env.store.addSpan(makeSpan(at(r), 1))).not.toBeNull();
      const first = (await env.store.queryAttempts(r.rollout_id)).items[0];
      expect(first).toMatchObject({ status: "succeeded", last_heartbeat_time: T0 + 2 });
      // Not the latest attempt: the rollout does not move.
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("preparing");
      expect(attemptOf(await env.store.getRolloutById(r.rollout_id)).attempt_id).toBe(second.attempt.attempt_id);
    });

    it("querySpans for an unknown rollout or attempt gives an empty result, not an error", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addSpan(makeSpan(at(r), 1));
      expect(await env.store.querySpans("ro-000000000000")).toEqual({ items: [], limit: -1, offset: 0, total: 0 });
      expect((await env.store.querySpans(r.rollout_id, { attempt_id: "at-00000000" })).total).toBe(0);
      const other = await env.store.startRollout(2);
      expect((await env.store.querySpans(r.rollout_id, { attempt_id: other.attempt.attempt_id })).total).toBe(0);
    });

    it("querySpans with attempt_id selects one attempt; 'latest' the latest one; none when there are no attempts", async () => {
      const r = await env.store.startRollout(1);
      const second = await env.store.startAttempt(r.rollout_id);
      await env.store.addManySpans([makeSpan(at(r), 1), makeSpan(at(second), 2), makeSpan(at(second), 3), makeSpan(at(r), 4)]);
      expect((await env.store.querySpans(r.rollout_id)).items.map((s) => s.sequence_id)).toEqual([1, 2, 3, 4]);
      expect((await env.store.querySpans(r.rollout_id, { attempt_id: r.attempt.attempt_id })).items.map((s) => s.sequence_id)).toEqual([
        1, 4,
      ]);
      expect((await env.store.querySpans(r.rollout_id, { attempt_id: "latest" })).items.map((s) => s.sequence_id)).toEqual([2, 3]);
      const q = await env.store.enqueueRollout(2);
      expect(await env.store.querySpans(q.rollout_id, { attempt_id: "latest", limit: 5, offset: 1 })).toEqual({
        items: [],
        limit: 5,
        offset: 1,
        total: 0,
      });
    });

    if (env.opts.otelSpans !== false) otelTests(env);
  });
}

function otelTests(env: Env): void {
  it("addOtelSpan converts an OpenTelemetry span and takes the next sequence id", async () => {
    const r = await env.store.startRollout(1);
    const traceId = "0123456789abcdef0123456789abcdef";
    const out = (await env.store.addOtelSpan(
      r.rollout_id,
      r.attempt.attempt_id,
      otelSpan({ name: "llm", traceId, spanId: "00000000000000bb", parentSpanId: "00000000000000aa", code: 2 }),
    ))!;
    expect(out).toMatchObject({
      rollout_id: r.rollout_id,
      attempt_id: r.attempt.attempt_id,
      sequence_id: 1,
      trace_id: traceId,
      span_id: "00000000000000bb",
      parent_id: "00000000000000aa",
      name: "llm",
      attributes: { "gen_ai.system": "openai", n: 3 },
      start_time: 1_700_000_000.5,
      end_time: 1_700_000_001,
      resource: { attributes: { "service.name": "svc" }, schema_url: "" },
    });
    expect(out.status.status_code).toBe("ERROR");
    expect(out.events[0]).toMatchObject({ name: "ev", attributes: { a: "b" }, timestamp: 1_700_000_000.25 });
    expect(out.context).toMatchObject({ trace_id: traceId, span_id: "00000000000000bb" });
    expect((await env.store.querySpans(r.rollout_id)).items).toEqual([out]);
    expect(attemptOf(await env.store.getRolloutById(r.rollout_id)).status).toBe("running");
    expect(await env.store.getNextSpanSequenceId(r.rollout_id, r.attempt.attempt_id)).toBe(2);
  });

  it("addOtelSpan with an explicit sequence id raises the counter; a duplicate gives null", async () => {
    const r = await env.store.startRollout(1);
    const s = otelSpan({ name: "x", traceId: "0123456789abcdef0123456789abcdef", spanId: "00000000000000cc", code: 1 });
    const out = (await env.store.addOtelSpan(r.rollout_id, r.attempt.attempt_id, s, 50))!;
    expect(out.sequence_id).toBe(50);
    expect(out.status.status_code).toBe("OK");
    expect(out.parent_id).toBeNull();
    expect(await env.store.addOtelSpan(r.rollout_id, r.attempt.attempt_id, s)).toBeNull();
    // Whether the refused duplicate used up an id is the store's business; the next one is above 50 either way.
    expect(await env.store.getNextSpanSequenceId(r.rollout_id, "any")).toBeGreaterThan(50);
  });

  it("an explicit sequence id raises the counter even when its span is refused as a duplicate", async () => {
    const r = await env.store.startRollout(1);
    const first = makeSpan(at(r), 3);
    expect(await env.store.addSpan(first)).not.toBeNull();
    expect(await env.store.addSpan({ ...first, sequence_id: 30 })).toBeNull();
    expect(await env.store.getNextSpanSequenceId(r.rollout_id, "any")).toBe(31);
    expect(await env.store.addManySpans([{ ...first, sequence_id: 60 }])).toEqual([]);
    expect(await env.store.getNextSpanSequenceId(r.rollout_id, "any")).toBe(61);
    expect((await env.store.querySpans(r.rollout_id)).items.map((s) => s.sequence_id)).toEqual([3]);
  });

  it("addOtelSpan for an unknown attempt throws NotFoundError", async () => {
    const r = await env.store.startRollout(1);
    const s = otelSpan({ name: "x", traceId: "0123456789abcdef0123456789abcdef", spanId: "00000000000000dd" });
    await rejectsWith(env.store.addOtelSpan(r.rollout_id, "at-00000000", s), NotFoundError);
    expect((await env.store.querySpans(r.rollout_id)).total).toBe(0);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// A stored span is a heartbeat (docs/store.md#spans, docs/departures.md#4)

function heartbeatTests(env: Env): void {
  describe("spans as heartbeats", () => {
    it("a span makes a preparing attempt and its rollout running and sets last_heartbeat_time", async () => {
      const r = await env.store.startRollout(1);
      env.clock.advance(3);
      await env.store.addSpan(makeSpan(at(r), 1));
      const after = (await env.store.getRolloutById(r.rollout_id))!;
      expect(after.status).toBe("running");
      expect(attemptOf(after)).toMatchObject({ status: "running", last_heartbeat_time: T0 + 3 });
      env.clock.advance(1);
      await env.store.addSpan(makeSpan(at(r), 2));
      expect((await env.store.getLatestAttempt(r.rollout_id))!.last_heartbeat_time).toBe(T0 + 4);
    });

    it("a span for a queuing rollout makes it running (docs/departures.md#4); its stale queue entry is skipped", async () => {
      const q = await env.store.enqueueRollout(1);
      const claimed = (await env.store.dequeueRollout())!;
      await env.store.updateRollout(q.rollout_id, { status: "queuing" });
      await env.store.addSpan(makeSpan(at(claimed), 1));
      const after = (await env.store.getRolloutById(q.rollout_id))!;
      expect(after.status).toBe("running");
      expect(attemptOf(after).status).toBe("running");
      expect(await env.store.dequeueRollout()).toBeNull();
    });

    // Upstream turns the requeuing rollout `running` here and drops the retry. Lightning TS
    // (docs/departures.md#24) keeps the retry: a late span of a timed-out attempt is stored as a heartbeat but revives nothing.
    it("a late span of a timed-out attempt keeps its status and gets the heartbeat; the pending retry stays", async () => {
      const r = await env.store.startRollout(1, { config: { timeout_seconds: 2, max_attempts: 2, retry_condition: ["timeout"] } });
      env.clock.advance(3);
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("requeuing");
      env.clock.advance(1);
      expect(await env.store.addSpan(makeSpan(at(r), 1))).not.toBeNull();
      const after = (await env.store.getRolloutById(r.rollout_id))!;
      expect(after.status).toBe("requeuing");
      expect(attemptOf(after)).toMatchObject({ status: "timeout", last_heartbeat_time: T0 + 4 });
      const retry = (await env.store.dequeueRollout())!;
      expect(retry.rollout_id).toBe(r.rollout_id);
      expect(retry.attempt.sequence_id).toBe(2);
    });

    it("a timed-out attempt of a failed rollout keeps its status but gets the heartbeat", async () => {
      const r = await env.store.startRollout(1, { config: { timeout_seconds: 2 } });
      env.clock.advance(3);
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("failed");
      await env.store.addSpan(makeSpan(at(r), 1));
      const after = (await env.store.getRolloutById(r.rollout_id))!;
      expect(after.status).toBe("failed");
      expect(attemptOf(after)).toMatchObject({ status: "timeout", last_heartbeat_time: T0 + 3 });
    });

    it("an unresponsive attempt revived by a span drops the pending retry", async () => {
      const r = await env.store.startRollout(1, {
        config: { unresponsive_seconds: 5, max_attempts: 3, retry_condition: ["unresponsive"] },
      });
      env.clock.advance(6);
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("requeuing");
      env.clock.advance(1);
      await env.store.addSpan(makeSpan(at(r), 1));
      const after = (await env.store.getRolloutById(r.rollout_id))!;
      expect(after.status).toBe("running");
      expect(attemptOf(after)).toMatchObject({ status: "running", last_heartbeat_time: T0 + 7, sequence_id: 1 });
      expect(await env.store.dequeueRollout()).toBeNull();
      expect((await env.store.queryAttempts(r.rollout_id)).total).toBe(1);
    });

    it("an unresponsive attempt of a failed rollout becomes running but the rollout stays failed", async () => {
      const r = await env.store.startRollout(1, { config: { unresponsive_seconds: 1 } });
      env.clock.advance(2);
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("failed");
      await env.store.addSpan(makeSpan(at(r), 1));
      const after = (await env.store.getRolloutById(r.rollout_id))!;
      expect(after.status).toBe("failed");
      expect(attemptOf(after).status).toBe("running");
    });

    it.each(["succeeded", "failed"] as const)("a %s attempt keeps its status and its rollout on a span", async (status) => {
      const r = await env.store.startRollout(1);
      await env.store.updateAttempt(r.rollout_id, "latest", { status });
      env.clock.advance(1);
      await env.store.addSpan(makeSpan(at(r), 1));
      const after = (await env.store.getRolloutById(r.rollout_id))!;
      expect(after.status).toBe(status);
      expect(attemptOf(after)).toMatchObject({ status, last_heartbeat_time: T0 + 1 });
    });

    it("a cancelled rollout stays cancelled when a span arrives (docs/departures.md#16)", async () => {
      const r = await env.store.startRollout(1);
      await env.store.updateRollout(r.rollout_id, { status: "cancelled" });
      await env.store.addSpan(makeSpan(at(r), 1));
      expect((await env.store.getRolloutById(r.rollout_id))!.status).toBe("cancelled");
    });

    it("a heartbeat does not clobber a concurrent metadata update of the attempt", async () => {
      const r = await env.store.startRollout(1);
      env.clock.advance(1);
      const spans = Array.from({ length: 10 }, (_, i) => env.store.addSpan(makeSpan(at(r), i + 1)));
      const meta = env.store.updateAttempt(r.rollout_id, "latest", { metadata: { from: "runner" } });
      await Promise.all([...spans, meta]);
      expect(await env.store.getLatestAttempt(r.rollout_id)).toMatchObject({
        status: "running",
        last_heartbeat_time: T0 + 1,
        metadata: { from: "runner" },
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Span sequence ids, one counter per rollout (docs/store.md#span-sequence-ids)

function sequenceIdTests(env: Env): void {
  describe("span sequence ids", () => {
    it("getNextSpanSequenceId counts per rollout from 1 and ignores the attempt id", async () => {
      const a = await env.store.startRollout(1);
      const b = await env.store.startRollout(2);
      expect(await env.store.getNextSpanSequenceId(a.rollout_id, a.attempt.attempt_id)).toBe(1);
      expect(await env.store.getNextSpanSequenceId(a.rollout_id, "at-other")).toBe(2);
      expect(await env.store.getNextSpanSequenceId(b.rollout_id, b.attempt.attempt_id)).toBe(1);
      expect(await env.store.getNextSpanSequenceId(a.rollout_id, a.attempt.attempt_id)).toBe(3);
    });

    it("getNextSpanSequenceId validates nothing: an unknown rollout still gets numbers", async () => {
      expect(await env.store.getNextSpanSequenceId("ro-unknown", "at-unknown")).toBe(1);
      expect(await env.store.getNextSpanSequenceId("ro-unknown", "at-unknown")).toBe(2);
    });

    it("getManySpanSequenceIds hands out consecutive values per rollout in input order ([1,1,2,3])", async () => {
      const A = await env.store.startRollout("A");
      const B = await env.store.startRollout("B");
      const a2 = await env.store.startAttempt(A.rollout_id);
      const ids = await env.store.getManySpanSequenceIds([
        [A.rollout_id, A.attempt.attempt_id],
        [B.rollout_id, B.attempt.attempt_id],
        [A.rollout_id, a2.attempt.attempt_id],
        [A.rollout_id, A.attempt.attempt_id],
      ]);
      expect(ids).toEqual([1, 1, 2, 3]);
      expect(await env.store.getNextSpanSequenceId(A.rollout_id, A.attempt.attempt_id)).toBe(4);
      expect(await env.store.getNextSpanSequenceId(B.rollout_id, B.attempt.attempt_id)).toBe(2);
      expect(await env.store.getManySpanSequenceIds([])).toEqual([]);
    });

    it("explicit sequence ids raise the counter like chmax: 100 -> 101, then 0 changes nothing", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addSpan(makeSpan(at(r), 100));
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, r.attempt.attempt_id)).toBe(101);
      await env.store.addSpan(makeSpan(at(r), 0));
      await env.store.addSpan(makeSpan(at(r), 7));
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, r.attempt.attempt_id)).toBe(102);
    });

    it("a span with sequence id 0 leaves the next value at 1; 101 makes it 102", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addSpan(makeSpan(at(r), 0));
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, r.attempt.attempt_id)).toBe(1);
      await env.store.addSpan(makeSpan(at(r), 101));
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, r.attempt.attempt_id)).toBe(102);
    });

    it("addManySpans raises the counter with each rollout's largest sequence id", async () => {
      const a = await env.store.startRollout(1);
      const b = await env.store.startRollout(2);
      await env.store.addManySpans([makeSpan(at(a), 5), makeSpan(at(a), 42), makeSpan(at(b), 9), makeSpan(at(a), 3)]);
      expect(await env.store.getNextSpanSequenceId(a.rollout_id, "x")).toBe(43);
      expect(await env.store.getNextSpanSequenceId(b.rollout_id, "x")).toBe(10);
    });

    it("the counter is shared by all attempts of a rollout", async () => {
      const r = await env.store.startRollout(1);
      const second = await env.store.startAttempt(r.rollout_id);
      await env.store.addSpan(makeSpan(at(r), 10));
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, second.attempt.attempt_id)).toBe(11);
    });

    it("an explicit id at the top of the safe range cannot exhaust the counter: it counts up to MAX_COUNTED_SEQUENCE_ID", async () => {
      const r = await env.store.startRollout(1);
      const top = Number.MAX_SAFE_INTEGER;
      expect((await env.store.addSpan(makeSpan(at(r), top)))!.sequence_id).toBe(top);
      const next = MAX_COUNTED_SEQUENCE_ID + 1;
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, "x")).toBe(next);
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, "x")).toBe(next + 1);
      expect(
        await env.store.getManySpanSequenceIds([
          [r.rollout_id, "x"],
          [r.rollout_id, "y"],
        ]),
      ).toEqual([next + 2, next + 3]);
      // Ids handed out are taken back as explicit ids; ids up to the ceiling still raise the counter as before.
      expect(await env.store.addManySpans([makeSpan(at(r), next + 1), makeSpan(at(r), MAX_COUNTED_SEQUENCE_ID - 5)])).toHaveLength(2);
      expect(await env.store.getNextSpanSequenceId(r.rollout_id, "x")).toBe(next + 4);
      if (env.opts.otelSpans) {
        const s = otelSpan({ name: "o", traceId: "0123456789abcdef0123456789abcdef", spanId: "00000000000000ee" });
        expect((await env.store.addOtelSpan(r.rollout_id, r.attempt.attempt_id, s))!.sequence_id).toBe(next + 5);
      }
      const ids = (await env.store.querySpans(r.rollout_id)).items.map((s) => s.sequence_id);
      expect(ids.every(Number.isSafeInteger)).toBe(true);
      expect(ids.at(-1)).toBe(top);

      // On a fresh rollout: the ceiling itself counts, an id above it counts as the ceiling.
      const a = await env.store.startRollout(2);
      await env.store.addSpan(makeSpan(at(a), MAX_COUNTED_SEQUENCE_ID));
      expect(await env.store.getNextSpanSequenceId(a.rollout_id, "x")).toBe(next);
      const b = await env.store.startRollout(3);
      await env.store.addManySpans([makeSpan(at(b), MAX_COUNTED_SEQUENCE_ID + 7), makeSpan(at(b), 3)]);
      expect(await env.store.getNextSpanSequenceId(b.rollout_id, "x")).toBe(next);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Filters (docs/store.md#filters-sorting-and-pages)

function queryTests(env: Env): void {
  /** Three rollouts: queuing, preparing (with an attempt), succeeded. */
  async function threeRollouts() {
    const q = await env.store.enqueueRollout("q");
    const p = await env.store.startRollout("p");
    const s = await env.store.startRollout("s");
    await env.store.updateAttempt(s.rollout_id, "latest", { status: "succeeded" });
    return { q, p, s };
  }
  const ids = (page: PaginatedResult<Rollout>) => page.items.map((r) => r.rollout_id);

  describe("queryRollouts filters", () => {
    it("no filter gives everything in insertion order, with the latest attempt attached where there is one", async () => {
      const { q, p, s } = await threeRollouts();
      const second = await env.store.startAttempt(p.rollout_id);
      const all = await env.store.queryRollouts();
      expect(ids(all)).toEqual([q.rollout_id, p.rollout_id, s.rollout_id]);
      expect(all).toMatchObject({ total: 3, limit: -1, offset: 0 });
      expect("attempt" in all.items[0]).toBe(false);
      expect(attemptOf(all.items[1]).attempt_id).toBe(second.attempt.attempt_id);
      expect(attemptOf(all.items[2]).status).toBe("succeeded");
    });

    it("status_in filters; status_in [] and rollout_id_in [] match nothing", async () => {
      const { q, p, s } = await threeRollouts();
      expect(ids(await env.store.queryRollouts({ status_in: ["queuing", "succeeded"] }))).toEqual([q.rollout_id, s.rollout_id]);
      expect(ids(await env.store.queryRollouts({ status_in: ["preparing"] }))).toEqual([p.rollout_id]);
      expect(await env.store.queryRollouts({ status_in: [] })).toMatchObject({ items: [], total: 0 });
      expect(await env.store.queryRollouts({ rollout_id_in: [] })).toMatchObject({ items: [], total: 0 });
    });

    it("rollout_id_in and rollout_id_contains filter; unknown ids are ignored", async () => {
      const { q, s } = await threeRollouts();
      expect(ids(await env.store.queryRollouts({ rollout_id_in: [s.rollout_id, "ro-nope", q.rollout_id] }))).toEqual([
        q.rollout_id,
        s.rollout_id,
      ]);
      expect(ids(await env.store.queryRollouts({ rollout_id_contains: s.rollout_id.slice(-6) }))).toEqual([s.rollout_id]);
      expect((await env.store.queryRollouts({ rollout_id_contains: "ro-" })).total).toBe(3);
      expect((await env.store.queryRollouts({ rollout_id_contains: "zzz" })).total).toBe(0);
    });

    it("mode_in filters by mode (a Lightning extension); rollouts without a mode match no mode", async () => {
      const t = await env.store.enqueueRollout("t", { mode: "train" });
      const v = await env.store.startRollout("v", { mode: "val" });
      await env.store.enqueueRollout("none");
      expect(ids(await env.store.queryRollouts({ mode_in: ["val"] }))).toEqual([v.rollout_id]);
      expect(ids(await env.store.queryRollouts({ mode_in: ["train", "val"] }))).toEqual([t.rollout_id, v.rollout_id]);
      expect(ids(await env.store.queryRollouts({ mode_in: ["val"], status_in: ["queuing"] }))).toEqual([]);
      expect(await env.store.queryRollouts({ mode_in: [] })).toMatchObject({ items: [], total: 0 });
      await expect(env.store.queryRollouts({ mode_in: ["dev" as "val"] })).rejects.toMatchObject({ name: "ValidationError" });
    });

    it("filters combine with and (default) or with or", async () => {
      const { q, p, s } = await threeRollouts();
      const query = { status_in: ["queuing" as const], rollout_id_in: [p.rollout_id, q.rollout_id] };
      expect(ids(await env.store.queryRollouts(query))).toEqual([q.rollout_id]);
      expect(ids(await env.store.queryRollouts({ ...query, filter_logic: "and" }))).toEqual([q.rollout_id]);
      expect(ids(await env.store.queryRollouts({ ...query, filter_logic: "or" }))).toEqual([q.rollout_id, p.rollout_id]);
      expect(
        ids(await env.store.queryRollouts({ status_in: ["succeeded"], rollout_id_contains: q.rollout_id, filter_logic: "or" })),
      ).toEqual([q.rollout_id, s.rollout_id]);
    });

    it("filter_logic or with no filters matches everything", async () => {
      await threeRollouts();
      expect((await env.store.queryRollouts({ filter_logic: "or" })).total).toBe(3);
    });

    it("the deprecated aliases work alone and lose to the new names", async () => {
      const { q, p, s } = await threeRollouts();
      expect(ids(await env.store.queryRollouts({ status: ["preparing"] }))).toEqual([p.rollout_id]);
      expect(ids(await env.store.queryRollouts({ rollout_ids: [s.rollout_id] }))).toEqual([s.rollout_id]);
      expect(ids(await env.store.queryRollouts({ status_in: ["queuing"], status: ["preparing"] }))).toEqual([q.rollout_id]);
      expect(ids(await env.store.queryRollouts({ rollout_id_in: [q.rollout_id], rollout_ids: [s.rollout_id] }))).toEqual([q.rollout_id]);
      expect((await env.store.queryRollouts({ status_in: [], status: ["queuing"] })).total).toBe(0);
    });
  });

  describe("querySpans filters", () => {
    async function spans() {
      const r = await env.store.startRollout(1);
      const other = await env.store.startRollout(2);
      const t1 = "11111111111111111111111111111111";
      const t2 = "22222222222222222222222222222222";
      const list = [
        makeSpan(at(r), 1, { name: "agent.run", trace_id: t1, span_id: "aaaaaaaaaaaaaaa1" }),
        makeSpan(at(r), 2, { name: "llm.call", trace_id: t1, span_id: "aaaaaaaaaaaaaaa2", parent_id: "aaaaaaaaaaaaaaa1" }),
        makeSpan(at(r), 3, { name: "tool.call", trace_id: t2, span_id: "bbbbbbbbbbbbbbb3", parent_id: "aaaaaaaaaaaaaaa1" }),
        makeSpan(at(r), 4, { name: "llm.call", trace_id: t2, span_id: "bbbbbbbbbbbbbbb4", parent_id: "bbbbbbbbbbbbbbb3" }),
      ];
      await env.store.addManySpans(list);
      await env.store.addSpan(makeSpan(at(other), 1, { name: "llm.call", trace_id: t1, span_id: "ccccccccccccccc1" }));
      return { r, t1, t2 };
    }
    const seqs = (page: PaginatedResult<Span>) => page.items.map((s) => s.sequence_id);

    it.each([
      ["name", { name: "llm.call" }, [2, 4]],
      ["name_contains", { name_contains: "call" }, [2, 3, 4]],
      ["trace_id", { trace_id: "11111111111111111111111111111111" }, [1, 2]],
      ["trace_id_contains", { trace_id_contains: "2222" }, [3, 4]],
      ["span_id", { span_id: "bbbbbbbbbbbbbbb3" }, [3]],
      ["span_id_contains", { span_id_contains: "aaaa" }, [1, 2]],
      ["parent_id", { parent_id: "aaaaaaaaaaaaaaa1" }, [2, 3]],
      ["parent_id_contains", { parent_id_contains: "bbbb" }, [4]],
      ["and of two", { name: "llm.call", trace_id_contains: "2222" }, [4]],
      ["or of two", { name: "tool.call", span_id: "aaaaaaaaaaaaaaa1", filter_logic: "or" as const }, [1, 3]],
      ["or with no filters (docs/departures.md#3)", { filter_logic: "or" as const }, [1, 2, 3, 4]],
      ["and with no filters", { filter_logic: "and" as const }, [1, 2, 3, 4]],
      ["or never leaks other rollouts", { name: "llm.call", span_id_contains: "c", filter_logic: "or" as const }, [2, 4]],
      ["no match", { name: "nothing" }, []],
    ])("%s", async (_label, query, expected) => {
      const { r } = await spans();
      const page = await env.store.querySpans(r.rollout_id, query);
      expect(seqs(page)).toEqual(expected);
      expect(page.total).toBe(expected.length);
    });
  });

  describe("other filters", () => {
    it("queryAttempts lists one rollout's attempts by sequence id; unknown rollout gives empty", async () => {
      const r = await env.store.startRollout(1);
      await env.store.startAttempt(r.rollout_id);
      await env.store.startRollout(2);
      const page = await env.store.queryAttempts(r.rollout_id);
      expect(page.items.map((a) => [a.rollout_id, a.sequence_id])).toEqual([
        [r.rollout_id, 1],
        [r.rollout_id, 2],
      ]);
      expect(page.total).toBe(2);
      expect(await env.store.queryAttempts("ro-000000000000")).toEqual({ items: [], limit: -1, offset: 0, total: 0 });
    });

    it("queryResources ANDs resources_id and resources_id_contains", async () => {
      const a = await env.store.addResources({});
      const b = await env.store.addResources({});
      const rid = (p: PaginatedResult<{ resources_id: string }>) => p.items.map((x) => x.resources_id);
      expect(rid(await env.store.queryResources({ resources_id: a.resources_id }))).toEqual([a.resources_id]);
      expect(rid(await env.store.queryResources({ resources_id_contains: b.resources_id.slice(4) }))).toEqual([b.resources_id]);
      expect(rid(await env.store.queryResources({ resources_id_contains: "rs-" }))).toEqual([a.resources_id, b.resources_id]);
      expect((await env.store.queryResources({ resources_id: a.resources_id, resources_id_contains: b.resources_id })).total).toBe(0);
    });

    it("queryWorkers filters by status_in and worker_id_contains, with and / or", async () => {
      await env.store.updateWorker("gpu-1");
      await env.store.startRollout(1, { worker_id: "gpu-2" });
      await env.store.dequeueRollout({ worker_id: "cpu-1" });
      const wid = (p: PaginatedResult<Worker>) => p.items.map((w) => w.worker_id);
      expect(wid(await env.store.queryWorkers())).toEqual(["gpu-1", "gpu-2", "cpu-1"]);
      expect(wid(await env.store.queryWorkers({ status_in: ["busy"] }))).toEqual(["gpu-2"]);
      expect(wid(await env.store.queryWorkers({ status_in: ["idle", "unknown"] }))).toEqual(["gpu-1", "cpu-1"]);
      expect(wid(await env.store.queryWorkers({ worker_id_contains: "gpu" }))).toEqual(["gpu-1", "gpu-2"]);
      expect(wid(await env.store.queryWorkers({ status_in: ["idle"], worker_id_contains: "gpu" }))).toEqual([]);
      expect(wid(await env.store.queryWorkers({ status_in: ["idle"], worker_id_contains: "gpu-1", filter_logic: "or" }))).toEqual([
        "gpu-1",
        "cpu-1",
      ]);
      expect((await env.store.queryWorkers({ status_in: [] })).total).toBe(0);
      expect((await env.store.queryWorkers({ filter_logic: "or" })).total).toBe(3);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Pagination, the same for every paginated query (docs/store.md#filters-sorting-and-pages)

interface Pager {
  kind: string;
  /** A field whose order matches the ids' string order. */
  sortBy: string;
  /** Seeds five items and returns the query and the item ids in default order. */
  seed: (env: Env) => Promise<{ query: (p: PageOptions) => Promise<PaginatedResult<unknown>>; ids: string[]; key: (x: unknown) => string }>;
}

const PAGERS: Pager[] = [
  {
    kind: "rollouts",
    sortBy: "rollout_id",
    seed: async ({ store }) => {
      const rs = await store.enqueueManyRollouts([0, 1, 2, 3, 4].map((input) => ({ input })));
      return { query: (p) => store.queryRollouts(p), ids: rs.map((r) => r.rollout_id), key: (x) => (x as Rollout).rollout_id };
    },
  },
  {
    kind: "attempts",
    sortBy: "attempt_id",
    seed: async ({ store }) => {
      const r = await store.startRollout(0);
      const ids = [r.attempt.attempt_id];
      for (let i = 0; i < 4; i++) ids.push((await store.startAttempt(r.rollout_id)).attempt.attempt_id);
      return { query: (p) => store.queryAttempts(r.rollout_id, p), ids, key: (x) => (x as Attempt).attempt_id };
    },
  },
  {
    kind: "spans",
    sortBy: "span_id",
    seed: async ({ store }) => {
      const r = await store.startRollout(0);
      const spans = [1, 2, 3, 4, 5].map((i) => makeSpan(at(r), i));
      await store.addManySpans(spans);
      return { query: (p) => store.querySpans(r.rollout_id, p), ids: spans.map((s) => s.span_id), key: (x) => (x as Span).span_id };
    },
  },
  {
    kind: "resources",
    sortBy: "resources_id",
    seed: async ({ store }) => {
      const ids = [];
      for (let i = 0; i < 5; i++) ids.push((await store.addResources({})).resources_id);
      return { query: (p) => store.queryResources(p), ids, key: (x) => (x as { resources_id: string }).resources_id };
    },
  },
  {
    kind: "workers",
    sortBy: "worker_id",
    seed: async ({ store }) => {
      const ids = ["w0", "w1", "w2", "w3", "w4"];
      for (const id of ids) await store.updateWorker(id);
      return { query: (p) => store.queryWorkers(p), ids, key: (x) => (x as Worker).worker_id };
    },
  },
];

const PAGE_CASES: { label: string; page: PageOptions; slice: [number, number] }[] = [
  { label: "limit -1 gives all", page: { limit: -1 }, slice: [0, 5] },
  { label: "no limit gives all", page: {}, slice: [0, 5] },
  { label: "limit 0 gives no items", page: { limit: 0 }, slice: [0, 0] },
  { label: "limit 2 offset 1", page: { limit: 2, offset: 1 }, slice: [1, 3] },
  { label: "limit past the end", page: { limit: 10, offset: 3 }, slice: [3, 5] },
  { label: "offset at the end", page: { limit: 2, offset: 5 }, slice: [5, 5] },
  { label: "offset past the end", page: { offset: 17 }, slice: [5, 5] },
  { label: "offset past the end with limit 0", page: { limit: 0, offset: 17 }, slice: [5, 5] },
];

function paginationTests(env: Env): void {
  describe("pagination", () => {
    for (const pager of PAGERS) {
      it.each(PAGE_CASES)(`${pager.kind}: $label, with the right total and echoed limit/offset`, async ({ page, slice }) => {
        const { query, ids, key } = await pager.seed(env);
        const out = await query(page);
        expect(out.items.map(key)).toEqual(ids.slice(...slice));
        expect(out.total).toBe(5);
        expect(out.limit).toBe(page.limit ?? -1);
        expect(out.offset).toBe(page.offset ?? 0);
      });

      it(`${pager.kind}: sort_by an unknown field throws ValidationError`, async () => {
        const { query } = await pager.seed(env);
        const err = await rejectsWith(query({ sort_by: "no_such_field" }), ValidationError);
        expect(err.message).toContain("no_such_field");
      });

      it(`${pager.kind}: desc pages by ${pager.sortBy} cover everything exactly once, in order`, async () => {
        const { query, ids, key } = await pager.seed(env);
        const expected = [...ids].sort().reverse();
        const full = await query({ sort_by: pager.sortBy, sort_order: "desc" });
        expect(full.items.map(key)).toEqual(expected);
        const paged: string[] = [];
        for (let offset = 0; offset < 5; offset += 2) {
          paged.push(...(await query({ sort_by: pager.sortBy, sort_order: "desc", limit: 2, offset })).items.map(key));
        }
        expect(paged).toEqual(expected);
      });
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Sorting (docs/store.md#filters-sorting-and-pages). Nulls in `*_time` fields sort as +infinity; in other fields as the empty/zero value.
// Ties keep insertion order in both directions (desc is not a plain reverse).

function sortTests(env: Env): void {
  describe("sorting", () => {
    /** Rollouts A..E: A ends at +10, B open, C ends at +5, D open, E ends at +10; modes train/null/val/null/train. */
    async function five() {
      const mk = (input: string, mode: "train" | "val" | null) => env.store.startRollout(input, { mode });
      const A = await mk("A", "train");
      const B = await mk("B", null);
      const C = await mk("C", "val");
      const D = await mk("D", null);
      const E = await mk("E", "train");
      env.clock.set(T0 + 5);
      await env.store.updateRollout(C.rollout_id, { status: "succeeded" });
      env.clock.set(T0 + 10);
      await env.store.updateRollout(A.rollout_id, { status: "failed" });
      await env.store.updateRollout(E.rollout_id, { status: "failed" });
      return { A, B, C, D, E };
    }
    const inputs = (p: PaginatedResult<Rollout>) => p.items.map((r) => r.input);

    it.each([
      ["end_time asc: nulls last", { sort_by: "end_time", sort_order: "asc" as const }, ["C", "A", "E", "B", "D"]],
      [
        "end_time desc: nulls first, ties in insertion order",
        { sort_by: "end_time", sort_order: "desc" as const },
        ["B", "D", "A", "E", "C"],
      ],
      ["mode asc: nulls first", { sort_by: "mode", sort_order: "asc" as const }, ["B", "D", "A", "E", "C"]],
      ["mode desc: nulls last, ties in insertion order", { sort_by: "mode", sort_order: "desc" as const }, ["C", "A", "E", "B", "D"]],
      ["start_time desc: all equal, so insertion order", { sort_by: "start_time", sort_order: "desc" as const }, ["A", "B", "C", "D", "E"]],
      ["status asc", { sort_by: "status", sort_order: "asc" as const }, ["A", "E", "B", "D", "C"]],
      ["status desc", { sort_by: "status", sort_order: "desc" as const }, ["C", "B", "D", "A", "E"]],
    ])("rollouts by %s", async (_label, query, expected) => {
      await five();
      expect(inputs(await env.store.queryRollouts(query))).toEqual(expected);
    });

    it("sorting applies before pagination", async () => {
      await five();
      const page = await env.store.queryRollouts({ sort_by: "end_time", sort_order: "desc", limit: 2, offset: 1 });
      expect(inputs(page)).toEqual(["D", "A"]);
      expect(page.total).toBe(5);
    });

    it("attempts by worker_id: null sorts as the empty string", async () => {
      const r = await env.store.startRollout(1, { worker_id: "w2" });
      await env.store.startAttempt(r.rollout_id);
      await env.store.startAttempt(r.rollout_id, { worker_id: "w1" });
      const seq = async (o: "asc" | "desc") =>
        (await env.store.queryAttempts(r.rollout_id, { sort_by: "worker_id", sort_order: o })).items.map((a) => a.sequence_id);
      expect(await seq("asc")).toEqual([2, 3, 1]);
      expect(await seq("desc")).toEqual([1, 3, 2]);
    });

    it("attempts default to sequence_id asc, and desc reverses", async () => {
      const r = await env.store.startRollout(1);
      await env.store.startAttempt(r.rollout_id);
      await env.store.startAttempt(r.rollout_id);
      expect((await env.store.queryAttempts(r.rollout_id)).items.map((a) => a.sequence_id)).toEqual([1, 2, 3]);
      expect((await env.store.queryAttempts(r.rollout_id, { sort_order: "desc" })).items.map((a) => a.sequence_id)).toEqual([3, 2, 1]);
    });

    it("spans default to sequence_id asc whatever the insertion order", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addManySpans([makeSpan(at(r), 3), makeSpan(at(r), 1), makeSpan(at(r), 2)]);
      expect((await env.store.querySpans(r.rollout_id)).items.map((s) => s.sequence_id)).toEqual([1, 2, 3]);
      expect((await env.store.querySpans(r.rollout_id, { sort_order: "desc" })).items.map((s) => s.sequence_id)).toEqual([3, 2, 1]);
    });

    it("spans by start_time put nulls last in asc, first in desc; by parent_id nulls first in asc", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addManySpans([
        makeSpan(at(r), 1, { start_time: 50, parent_id: "00000000000000b2" }),
        makeSpan(at(r), 2, { start_time: null, parent_id: null }),
        makeSpan(at(r), 3, { start_time: 20, parent_id: "00000000000000a1" }),
        makeSpan(at(r), 4, { start_time: null, parent_id: null }),
      ]);
      const seq = async (sort_by: string, sort_order: "asc" | "desc") =>
        (await env.store.querySpans(r.rollout_id, { sort_by, sort_order })).items.map((s) => s.sequence_id);
      expect(await seq("start_time", "asc")).toEqual([3, 1, 2, 4]);
      expect(await seq("start_time", "desc")).toEqual([2, 4, 1, 3]);
      expect(await seq("parent_id", "asc")).toEqual([2, 4, 3, 1]);
      expect(await seq("parent_id", "desc")).toEqual([1, 3, 2, 4]);
      expect(await seq("name", "desc")).toEqual([4, 3, 2, 1]);
    });

    it("strings compare in plain code-point order", async () => {
      const r = await env.store.startRollout(1);
      await env.store.addManySpans([
        makeSpan(at(r), 1, { name: "beta-critical" }),
        makeSpan(at(r), 2, { name: "beta optional" }),
        makeSpan(at(r), 3, { name: "Zeta" }),
        makeSpan(at(r), 4, { name: "alpha" }),
      ]);
      const names = (await env.store.querySpans(r.rollout_id, { sort_by: "name" })).items.map((s) => s.name);
      expect(names).toEqual(["Zeta", "alpha", "beta optional", "beta-critical"]);
    });

    it("resources by version desc and workers by last_heartbeat_time with nulls last", async () => {
      const a = await env.store.addResources({});
      const b = await env.store.addResources({});
      await env.store.updateResources(a.resources_id, {});
      const versions = (await env.store.queryResources({ sort_by: "version", sort_order: "desc" })).items.map((x) => x.resources_id);
      expect(versions).toEqual([a.resources_id, b.resources_id]);

      await env.store.startRollout(1, { worker_id: "no-heartbeat" });
      env.clock.advance(1);
      await env.store.updateWorker("late");
      env.clock.set(T0 - 5);
      await env.store.updateWorker("early");
      const byHb = async (o: "asc" | "desc") =>
        (await env.store.queryWorkers({ sort_by: "last_heartbeat_time", sort_order: o })).items.map((w) => w.worker_id);
      expect(await byHb("asc")).toEqual(["early", "late", "no-heartbeat"]);
      expect(await byHb("desc")).toEqual(["no-heartbeat", "late", "early"]);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Resources and their versions (docs/store.md#resources)

const LLM_A = { resource_type: "llm" as const, endpoint: "http://a/v1", model: "model-a" };
const PROMPT = { resource_type: "prompt_template" as const, template: "Hi {name}", engine: "f-string" as const };

function resourcesTests(env: Env): void {
  describe("resources", () => {
    it("there are no latest resources at first", async () => {
      expect(await env.store.getLatestResources()).toBeNull();
      expect(await env.store.getResourcesById("rs-000000000000")).toBeNull();
      expect((await env.store.queryResources()).total).toBe(0);
    });

    it("addResources creates version 1 with create_time = update_time = now and model defaults filled in", async () => {
      const r = await env.store.addResources({ llm: LLM_A, prompt: PROMPT });
      expect(r.resources_id).toMatch(/^rs-[0-9a-f]{12}$/);
      expect(r).toEqual({
        resources_id: r.resources_id,
        create_time: T0,
        update_time: T0,
        version: 1,
        resources: { llm: { ...LLM_A, api_key: null, sampling_parameters: {} }, prompt: PROMPT },
      });
      expect(await env.store.getResourcesById(r.resources_id)).toEqual(r);
      expect(await env.store.getLatestResources()).toEqual(r);
    });

    it("an empty resources map is valid", async () => {
      const r = await env.store.addResources({});
      expect(r.resources).toEqual({});
      expect(r.version).toBe(1);
    });

    it("updateResources of an existing id bumps the version, replaces resources and keeps create_time", async () => {
      const r = await env.store.addResources({ llm: LLM_A });
      const other = await env.store.addResources({});
      env.clock.advance(5);
      const u = await env.store.updateResources(r.resources_id, { prompt: PROMPT });
      expect(u).toEqual({ resources_id: r.resources_id, create_time: T0, update_time: T0 + 5, version: 2, resources: { prompt: PROMPT } });
      env.clock.advance(1);
      expect((await env.store.updateResources(r.resources_id, {})).version).toBe(3);
      expect(await env.store.getLatestResources()).toMatchObject({ resources_id: r.resources_id, version: 3, update_time: T0 + 6 });
      expect(await env.store.getResourcesById(other.resources_id)).toEqual(other);
      expect((await env.store.queryResources()).total).toBe(2);
    });

    it("updateResources of an unknown id inserts it as version 1 and makes it the latest", async () => {
      await env.store.addResources({});
      env.clock.advance(2);
      const u = await env.store.updateResources("rs-custom", { llm: LLM_A });
      expect(u).toMatchObject({ resources_id: "rs-custom", create_time: T0 + 2, update_time: T0 + 2, version: 1 });
      expect((await env.store.getLatestResources())!.resources_id).toBe("rs-custom");
      expect(await env.store.getResourcesById("rs-custom")).toEqual(u);
    });

    it("the latest resources are whichever were added or updated last", async () => {
      const a = await env.store.addResources({});
      const b = await env.store.addResources({});
      expect((await env.store.getLatestResources())!.resources_id).toBe(b.resources_id);
      await env.store.updateResources(a.resources_id, {});
      expect((await env.store.getLatestResources())!.resources_id).toBe(a.resources_id);
    });

    it("rollouts created without resources_id take the latest snapshot at creation time", async () => {
      const none = await env.store.enqueueRollout(0);
      expect(none.resources_id).toBeNull();
      expect((await env.store.startRollout(0)).resources_id).toBeNull();
      const a = await env.store.addResources({});
      const r1 = await env.store.enqueueRollout(1);
      const s1 = await env.store.startRollout(1);
      const b = await env.store.addResources({});
      const many = await env.store.enqueueManyRollouts([{ input: 2 }, { input: 3, resources_id: "explicit" }]);
      await env.store.updateResources(a.resources_id, {});
      const r3 = await env.store.enqueueRollout(4);
      expect([r1.resources_id, s1.resources_id]).toEqual([a.resources_id, a.resources_id]);
      expect(many.map((r) => r.resources_id)).toEqual([b.resources_id, "explicit"]);
      expect(r3.resources_id).toBe(a.resources_id);
      // Stored values do not move when newer resources arrive.
      expect((await env.store.getRolloutById(r1.rollout_id))!.resources_id).toBe(a.resources_id);
      expect((await env.store.getRolloutById(many[0].rollout_id))!.resources_id).toBe(b.resources_id);
    });

    it("queryResources lists in insertion order, not update order", async () => {
      const a = await env.store.addResources({});
      const b = await env.store.addResources({});
      await env.store.updateResources(a.resources_id, {});
      expect((await env.store.queryResources()).items.map((x) => x.resources_id)).toEqual([a.resources_id, b.resources_id]);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Worker telemetry (docs/store.md#workers)

function workerTests(env: Env): void {
  const worker = async (id: string) => (await env.store.getWorkerById(id))!;

  describe("workers", () => {
    it("updateWorker creates an unknown worker with a heartbeat; stats are replaced, or kept when not given", async () => {
      const w = await env.store.updateWorker("w1", { cpu: 0.5, tags: ["a"] });
      expect(w).toEqual({
        worker_id: "w1",
        status: "unknown",
        heartbeat_stats: { cpu: 0.5, tags: ["a"] },
        last_heartbeat_time: T0,
        last_dequeue_time: null,
        last_busy_time: null,
        last_idle_time: null,
        current_rollout_id: null,
        current_attempt_id: null,
      });
      env.clock.advance(1);
      expect(await env.store.updateWorker("w1")).toMatchObject({ heartbeat_stats: { cpu: 0.5, tags: ["a"] }, last_heartbeat_time: T0 + 1 });
      env.clock.advance(1);
      expect(await env.store.updateWorker("w1", { mem: 1 })).toMatchObject({ heartbeat_stats: { mem: 1 }, last_heartbeat_time: T0 + 2 });
      expect(await worker("w1")).toMatchObject({ heartbeat_stats: { mem: 1 } });
      expect(await env.store.updateWorker("w2")).toMatchObject({ heartbeat_stats: null, status: "unknown" });
    });

    it("updateWorker is only a heartbeat: a busy worker stays busy on its attempt", async () => {
      const r = await env.store.startRollout(1, { worker_id: "w1" });
      env.clock.advance(2);
      const w = await env.store.updateWorker("w1", { q: 1 });
      expect(w).toMatchObject({
        status: "busy",
        last_busy_time: T0,
        last_heartbeat_time: T0 + 2,
        heartbeat_stats: { q: 1 },
        current_rollout_id: r.rollout_id,
        current_attempt_id: r.attempt.attempt_id,
      });
    });

    it("getWorkerById gives null for an unknown worker", async () => {
      expect(await env.store.getWorkerById("nobody")).toBeNull();
    });

    it("startRollout with a worker makes it busy on that attempt, without a dequeue time", async () => {
      const r = await env.store.startRollout(1, { worker_id: "w1" });
      expect(await worker("w1")).toMatchObject({
        status: "busy",
        last_busy_time: T0,
        last_dequeue_time: null,
        current_rollout_id: r.rollout_id,
        current_attempt_id: r.attempt.attempt_id,
      });
    });

    it("dequeue with a worker sets last_dequeue_time and busy; finishing makes it idle and clears the current ids", async () => {
      await env.store.enqueueRollout(1);
      env.clock.advance(1);
      const r = (await env.store.dequeueRollout({ worker_id: "w1" }))!;
      expect(await worker("w1")).toMatchObject({
        status: "busy",
        last_dequeue_time: T0 + 1,
        last_busy_time: T0 + 1,
        current_rollout_id: r.rollout_id,
        current_attempt_id: r.attempt.attempt_id,
      });
      env.clock.advance(1);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "running" });
      expect(await worker("w1")).toMatchObject({ status: "busy", last_busy_time: T0 + 2 });
      env.clock.advance(1);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      expect(await worker("w1")).toMatchObject({
        status: "idle",
        last_idle_time: T0 + 3,
        last_busy_time: T0 + 2,
        last_dequeue_time: T0 + 1,
        current_rollout_id: null,
        current_attempt_id: null,
      });
    });

    it.each([
      ["failed", "idle"],
      ["succeeded", "idle"],
      ["timeout", "unknown"],
      ["unresponsive", "unknown"],
    ] as const)("an attempt marked %s leaves its worker %s", async (status, workerStatus) => {
      const r = await env.store.startRollout(1, { worker_id: "w1" });
      env.clock.advance(1);
      await env.store.updateAttempt(r.rollout_id, "latest", { status });
      expect(await worker("w1")).toMatchObject({
        status: workerStatus,
        last_idle_time: T0 + 1,
        current_rollout_id: null,
        current_attempt_id: null,
      });
    });

    it("attempt-driven syncs keep heartbeat_stats and last_heartbeat_time", async () => {
      await env.store.updateWorker("w1", { gpu: 3 });
      env.clock.advance(1);
      await env.store.enqueueRollout(1);
      const r = (await env.store.dequeueRollout({ worker_id: "w1" }))!;
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "failed" });
      expect(await worker("w1")).toMatchObject({ heartbeat_stats: { gpu: 3 }, last_heartbeat_time: T0, status: "idle" });
    });

    it("updateAttempt with a new worker_id makes that worker busy on the attempt", async () => {
      const r = await env.store.startRollout(1);
      expect((await env.store.queryWorkers()).total).toBe(0);
      await env.store.updateAttempt(r.rollout_id, "latest", { worker_id: "w9" });
      expect(await worker("w9")).toMatchObject({ status: "busy", current_attempt_id: r.attempt.attempt_id });
    });

    it("a worker-less attempt creates no worker when it finishes", async () => {
      const r = await env.store.startRollout(1);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      expect((await env.store.queryWorkers()).total).toBe(0);
    });

    it("dequeueing an empty queue marks the worker idle; an idle worker only gets a new dequeue time", async () => {
      expect(await env.store.dequeueRollout({ worker_id: "w1" })).toBeNull();
      expect(await worker("w1")).toMatchObject({ status: "idle", last_idle_time: T0, last_dequeue_time: T0 });
      env.clock.advance(3);
      await env.store.dequeueRollout({ worker_id: "w1" });
      expect(await worker("w1")).toMatchObject({ status: "idle", last_idle_time: T0, last_dequeue_time: T0 + 3 });
      // A busy worker that finds the queue empty becomes idle.
      await env.store.startRollout(1, { worker_id: "w1" });
      env.clock.advance(1);
      await env.store.dequeueManyRollouts({ limit: 4, worker_id: "w1" });
      expect(await worker("w1")).toMatchObject({ status: "idle", last_idle_time: T0 + 4, last_dequeue_time: T0 + 4 });
    });

    it("dequeueManyRollouts syncs the worker with the last claimed attempt only", async () => {
      await env.store.enqueueManyRollouts([{ input: 1 }, { input: 2 }, { input: 3 }]);
      env.clock.advance(1);
      const got = await env.store.dequeueManyRollouts({ limit: 3, worker_id: "w1" });
      expect(got).toHaveLength(3);
      expect(await worker("w1")).toMatchObject({
        status: "busy",
        last_dequeue_time: T0 + 1,
        current_rollout_id: got[2].rollout_id,
        current_attempt_id: got[2].attempt.attempt_id,
      });
      expect((await env.store.queryWorkers()).total).toBe(1);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// waitForRollouts (docs/store.md#waiting-for-rollouts; wall-clock timeouts in seconds)

function waitTests(env: Env): void {
  const slack = () => env.opts.timingSlackMs;

  describe("waitForRollouts", () => {
    it("timeout 0 checks once and returns at once, only the finished rollouts", async () => {
      const done = await env.store.startRollout(1);
      await env.store.updateAttempt(done.rollout_id, "latest", { status: "succeeded" });
      const open = await env.store.startRollout(2);
      const t0 = performance.now();
      const out = await env.store.waitForRollouts({ rollout_ids: [open.rollout_id, done.rollout_id], timeout: 0 });
      expect(elapsedMs(t0)).toBeLessThan(50 + slack());
      expect(out.map((r) => r.rollout_id)).toEqual([done.rollout_id]);
      expect(out[0]).toMatchObject({ status: "succeeded", end_time: T0 });
      expect("attempt" in out[0]).toBe(false);
    });

    it("a negative timeout also returns at once", async () => {
      const open = await env.store.startRollout(1);
      const t0 = performance.now();
      expect(await env.store.waitForRollouts({ rollout_ids: [open.rollout_id], timeout: -1 })).toEqual([]);
      expect(elapsedMs(t0)).toBeLessThan(50 + slack());
    });

    it("returns in input order, repeating duplicates and leaving out unknown ids", async () => {
      const a = await env.store.startRollout("a");
      const b = await env.store.startRollout("b");
      await env.store.updateRollout(a.rollout_id, { status: "failed" });
      await env.store.updateRollout(b.rollout_id, { status: "cancelled" });
      const out = await env.store.waitForRollouts({
        rollout_ids: [b.rollout_id, "ro-000000000000", a.rollout_id, b.rollout_id],
        timeout: 1,
      });
      expect(out.map((r) => [r.rollout_id, r.status])).toEqual([
        [b.rollout_id, "cancelled"],
        [a.rollout_id, "failed"],
        [b.rollout_id, "cancelled"],
      ]);
    });

    it("unknown ids alone return at once even without a timeout", async () => {
      const t0 = performance.now();
      expect(await env.store.waitForRollouts({ rollout_ids: ["ro-000000000000", "ro-111111111111"] })).toEqual([]);
      expect(await env.store.waitForRollouts({ rollout_ids: [] })).toEqual([]);
      expect(elapsedMs(t0)).toBeLessThan(500 + slack());
    });

    it("honours the timeout and returns whatever finished by then", async () => {
      const done = await env.store.startRollout(1);
      await env.store.updateRollout(done.rollout_id, { status: "succeeded" });
      const open = await env.store.startRollout(2);
      const t0 = performance.now();
      const out = await env.store.waitForRollouts({ rollout_ids: [done.rollout_id, open.rollout_id], timeout: 0.3 });
      const took = elapsedMs(t0);
      expect(out.map((r) => r.rollout_id)).toEqual([done.rollout_id]);
      expect(took).toBeGreaterThanOrEqual(250);
      expect(took).toBeLessThan(1_300 + slack());
      expect((await env.store.getRolloutById(open.rollout_id))!.status).toBe("preparing");
    });

    it("resolves promptly, not by polling, when the last rollout finishes", async () => {
      const a = await env.store.startRollout("a");
      const b = await env.store.startRollout("b");
      await env.store.updateAttempt(a.rollout_id, "latest", { status: "succeeded" });
      let firedAt = 0;
      const timer = setTimeout(() => {
        firedAt = performance.now();
        void env.store.updateAttempt(b.rollout_id, "latest", { status: "failed" });
      }, 200);
      const t0 = performance.now();
      try {
        const out = await env.store.waitForRollouts({ rollout_ids: [a.rollout_id, b.rollout_id], timeout: 10 });
        const resolvedAt = performance.now();
        expect(out.map((r) => r.status)).toEqual(["succeeded", "failed"]);
        expect(firedAt).toBeGreaterThan(0);
        expect(resolvedAt - t0).toBeGreaterThanOrEqual(190);
        // Within 300 ms of the finish: a 1 s (or 10 s) polling loop would miss this.
        expect(resolvedAt - firedAt).toBeLessThan(300 + slack());
      } finally {
        clearTimeout(timer);
      }
    });

    it("without a timeout waits until the rollouts finish", async () => {
      const r = await env.store.startRollout(1);
      setTimeout(() => void env.store.updateRollout(r.rollout_id, { status: "cancelled" }), 100);
      const t0 = performance.now();
      const out = await env.store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: null });
      expect(out.map((x) => x.status)).toEqual(["cancelled"]);
      expect(elapsedMs(t0)).toBeLessThan(400 + slack());
    });

    it("a wait without a timeout can be cancelled with an AbortSignal", async () => {
      const r = await env.store.startRollout(1);
      const ac = new AbortController();
      let settled = false;
      const waiting = env.store.waitForRollouts({ rollout_ids: [r.rollout_id], signal: ac.signal });
      void waiting.then(
        () => (settled = true),
        () => (settled = true),
      );
      await sleep(100);
      expect(settled).toBe(false);
      const reason = new Error("stop waiting");
      const t0 = performance.now();
      ac.abort(reason);
      await expect(waiting).rejects.toBeDefined();
      expect(elapsedMs(t0)).toBeLessThan(200 + slack());
      // The store is unaffected by the abandoned wait.
      await env.store.updateRollout(r.rollout_id, { status: "succeeded" });
      expect((await env.store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 0 })).map((x) => x.status)).toEqual(["succeeded"]);
    });

    // As with fetch(): a signal aborted before the call rejects without waiting.
    it("an already aborted signal rejects at once", async () => {
      const r = await env.store.startRollout(1);
      const ac = new AbortController();
      ac.abort(new Error("no"));
      await expect(env.store.waitForRollouts({ rollout_ids: [r.rollout_id], signal: ac.signal })).rejects.toBeDefined();
    });

    it("waiting changes nothing", async () => {
      await seedVaried(env);
      const before = await snapshot(env.store);
      const ids = (await env.store.queryRollouts()).items.map((r) => r.rollout_id);
      await env.store.waitForRollouts({ rollout_ids: ids, timeout: 0.05 });
      expect(await snapshot(env.store)).toEqual(before);
    });

    it("many waiters on one rollout all wake up", async () => {
      const r = await env.store.startRollout(1);
      const waits = Array.from({ length: 20 }, () => env.store.waitForRollouts({ rollout_ids: [r.rollout_id], timeout: 5 }));
      await sleep(20);
      await env.store.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
      const outs = await Promise.all(waits);
      expect(outs.every((o) => o.length === 1 && o[0].status === "succeeded")).toBe(true);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Callers get copies (or frozen objects); the store never shares its state (docs/store.md#what-callers-get-back,
// docs/departures.md#9)

function copyTests(env: Env): void {
  describe("returned and passed objects are not live", () => {
    it("mutating returned rollouts and attempts does not change the store", async () => {
      const r = await env.store.startRollout({ deep: { x: 1 } }, { metadata: { m: 1 }, config: { retry_condition: ["failed"] } });
      const before = await snapshot(env.store);
      const victims: (Rollout | AttemptedRollout)[] = [
        r,
        (await env.store.getRolloutById(r.rollout_id))!,
        ...(await env.store.queryRollouts()).items,
      ];
      for (const v of victims) {
        tryMutate(() => (v.status = "failed"));
        tryMutate(() => ((v.metadata as Record<string, unknown>).m = 99));
        tryMutate(() => (v.config.max_attempts = 50));
        tryMutate(() => v.config.retry_condition.push("timeout"));
        tryMutate(() => (((v.input as Record<string, unknown>).deep as Record<string, unknown>).x = 2));
        if (isAttemptedRollout(v)) {
          tryMutate(() => (v.attempt.status = "succeeded"));
          tryMutate(() => (v.attempt.sequence_id = 7));
        }
      }
      for (const a of [(await env.store.getLatestAttempt(r.rollout_id))!, ...(await env.store.queryAttempts(r.rollout_id)).items]) {
        tryMutate(() => (a.status = "timeout"));
        tryMutate(() => (a.worker_id = "evil"));
      }
      expect(await snapshot(env.store)).toEqual(before);
    });

    it("mutating the attempt returned by updateAttempt does not change the store", async () => {
      const r = await env.store.startRollout(1);
      const updated = await env.store.updateAttempt(r.rollout_id, "latest", { metadata: { k: [1] } });
      tryMutate(() => (updated.metadata!.k as number[]).push(2));
      tryMutate(() => (updated.status = "failed"));
      const after = (await env.store.getLatestAttempt(r.rollout_id))!;
      expect(after).toMatchObject({ status: "preparing", metadata: { k: [1] } });
      tryMutate(() => (after.metadata = null));
      expect((await env.store.getLatestAttempt(r.rollout_id))!.metadata).toEqual({ k: [1] });
    });

    it("mutating the objects passed in afterwards does not change the store", async () => {
      const input = { q: [1, 2] };
      const config = { max_attempts: 2, retry_condition: ["failed" as const] };
      const metadata = { tag: "a" };
      const r = await env.store.enqueueRollout(input, { config, metadata });
      tryMutate(() => input.q.push(3));
      tryMutate(() => config.retry_condition.push("failed"));
      tryMutate(() => (config.max_attempts = 9));
      tryMutate(() => (metadata.tag = "b"));
      expect(await env.store.getRolloutById(r.rollout_id)).toMatchObject({
        input: { q: [1, 2] },
        config: { max_attempts: 2, retry_condition: ["failed"] },
        metadata: { tag: "a" },
      });
    });

    it("mutating spans (given or returned) does not change the store", async () => {
      const r = await env.store.startRollout(1);
      const s = makeSpan(at(r), 1, { attributes: { k: "v" } });
      const copy = structuredClone(s);
      const returned = (await env.store.addSpan(s))!;
      tryMutate(() => (s.attributes.k = "changed"));
      tryMutate(() => (s.name = "changed"));
      tryMutate(() => (returned.attributes.k = "changed-2"));
      tryMutate(() => (returned.status.status_code = "ERROR"));
      const q1 = (await env.store.querySpans(r.rollout_id)).items[0];
      tryMutate(() => (q1.name = "changed-3"));
      tryMutate(() => q1.events.push({ name: "x", attributes: {}, timestamp: null }));
      expect((await env.store.querySpans(r.rollout_id)).items).toEqual([copy]);
      const many = [makeSpan(at(r), 2)];
      const manyCopy = structuredClone(many);
      const ins = await env.store.addManySpans(many);
      tryMutate(() => (many[0].name = "changed"));
      tryMutate(() => (ins[0].name = "changed"));
      expect((await env.store.querySpans(r.rollout_id)).items).toEqual([copy, ...manyCopy]);
    });

    it("mutating resources and workers (given or returned) does not change the store", async () => {
      const res = { llm: { ...LLM_A, sampling_parameters: { temperature: 0.5 } } };
      const added = await env.store.addResources(res);
      const expected = structuredClone(added);
      tryMutate(() => (res.llm.model = "changed"));
      tryMutate(() => (res.llm.sampling_parameters.temperature = 2));
      tryMutate(() => (added.version = 42));
      tryMutate(() => ((added.resources.llm as { model: string }).model = "changed"));
      const latest = (await env.store.getLatestResources())!;
      tryMutate(() => (latest.resources = {}));
      const listed = (await env.store.queryResources()).items[0];
      tryMutate(() => (listed.update_time = 0));
      expect(await env.store.getResourcesById(added.resources_id)).toEqual(expected);
      expect(await env.store.getLatestResources()).toEqual(expected);

      const stats = { load: { one: 1 } };
      const w = await env.store.updateWorker("w1", stats);
      tryMutate(() => (stats.load.one = 5));
      tryMutate(() => (w.status = "busy"));
      tryMutate(() => ((w.heartbeat_stats as { load: { one: number } }).load.one = 6));
      const got = (await env.store.getWorkerById("w1"))!;
      tryMutate(() => (got.current_rollout_id = "ro-evil"));
      expect(await env.store.getWorkerById("w1")).toMatchObject({
        status: "unknown",
        heartbeat_stats: { load: { one: 1 } },
        current_rollout_id: null,
      });
    });

    it("mutating a dequeued rollout does not change the store", async () => {
      const r = await env.store.enqueueRollout({ a: 1 }, { metadata: { m: 1 } });
      const got = (await env.store.dequeueRollout())!;
      tryMutate(() => (got.status = "succeeded"));
      tryMutate(() => (got.attempt.status = "failed"));
      tryMutate(() => ((got.metadata as Record<string, unknown>).m = 2));
      tryMutate(() => ((got.input as Record<string, unknown>).a = 2));
      const stored = (await env.store.getRolloutById(r.rollout_id))!;
      expect(stored).toMatchObject({ status: "preparing", metadata: { m: 1 }, input: { a: 1 } });
      expect(attemptOf(stored).status).toBe("preparing");
    });

    it("mutating a page of results does not change later queries", async () => {
      await env.store.enqueueManyRollouts([{ input: 1 }, { input: 2 }]);
      const page = await env.store.queryRollouts();
      tryMutate(() => page.items.pop());
      tryMutate(() => page.items.reverse());
      const again = await env.store.queryRollouts();
      expect(again.items.map((r) => r.input)).toEqual([1, 2]);
      const waited = await env.store.waitForRollouts({ rollout_ids: [again.items[0].rollout_id], timeout: 0 });
      expect(waited).toEqual([]);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Statistics, capabilities, close (docs/store.md#what-callers-get-back)

function statisticsTests(env: Env): void {
  describe("statistics and lifecycle", () => {
    it("statistics count rollouts, attempts, spans, resources and workers exactly", async () => {
      const empty = await env.store.statistics();
      expect(empty).toMatchObject({ total_rollouts: 0, total_attempts: 0, total_spans: 0, total_resources: 0, total_workers: 0 });
      const { running } = await seedVaried(env);
      await env.store.startAttempt(running.rollout_id);
      await env.store.addManySpans([makeSpan(at(running), 2), makeSpan(at(running), 3)]);
      await env.store.addSpan(makeSpan(at(running), 2, { span_id: (await env.store.querySpans(running.rollout_id)).items[0].span_id }));
      const s = await env.store.statistics();
      expect(s).toMatchObject({ total_rollouts: 3, total_attempts: 3, total_spans: 3, total_resources: 1, total_workers: 2 });
      if (s.name !== undefined) expect(typeof s.name).toBe("string");
      if (s.uptime !== undefined) expect(s.uptime).toBeGreaterThanOrEqual(0);
    });

    it("the store is async-safe", () => {
      expect(env.store.capabilities.async_safe).toBe(true);
    });

    it("close can be called twice", async () => {
      await env.store.close();
      await env.store.close();
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Bad input: a typed error, and nothing already stored changes

interface Seeded {
  queued: Rollout;
  running: AttemptedRollout;
  done: AttemptedRollout;
  resourcesId: string;
}

interface BadCase {
  label: string;
  call: (store: LightningStore, s: Seeded) => Promise<unknown>;
  error: ErrorClass<LightningError>;
  /** A key that must appear in some issue path (ValidationError only). */
  path?: string | number;
}

/** Casts a deliberately malformed value past the type checker. */
const bad = (v: unknown): never => v as never;

const BAD_INPUT: BadCase[] = [
  // Rollout creation
  {
    label: "enqueueRollout with max_attempts 0",
    call: (st) => st.enqueueRollout(1, { config: { max_attempts: 0 } }),
    error: ValidationError,
    path: "max_attempts",
  },
  {
    label: "enqueueRollout with a fractional max_attempts",
    call: (st) => st.enqueueRollout(1, { config: { max_attempts: 1.5 } }),
    error: ValidationError,
    path: "max_attempts",
  },
  {
    label: "enqueueRollout with a queuing retry_condition",
    call: (st) => st.enqueueRollout(1, { config: { retry_condition: bad(["queuing"]) } }),
    error: ValidationError,
    path: "retry_condition",
  },
  {
    label: "enqueueRollout with a string timeout",
    call: (st) => st.enqueueRollout(1, { config: { timeout_seconds: bad("10") } }),
    error: ValidationError,
    path: "timeout_seconds",
  },
  {
    label: "enqueueRollout with a bad mode",
    call: (st) => st.enqueueRollout(1, { mode: bad("training") }),
    error: ValidationError,
    path: "mode",
  },
  {
    label: "enqueueRollout with array metadata",
    call: (st) => st.enqueueRollout(1, { metadata: bad("not an object") }),
    error: ValidationError,
    path: "metadata",
  },
  {
    label: "startRollout with max_attempts 0",
    call: (st) => st.startRollout(1, { config: { max_attempts: 0 }, worker_id: "w-new" }),
    error: ValidationError,
    path: "max_attempts",
  },
  {
    label: "startRollout with a bad mode",
    call: (st) => st.startRollout(1, { mode: bad("prod"), worker_id: "w-new" }),
    error: ValidationError,
    path: "mode",
  },
  {
    label: "enqueueManyRollouts with one bad request in the batch",
    call: (st) => st.enqueueManyRollouts([{ input: 1 }, { input: 2, config: { max_attempts: 0 } }]),
    error: ValidationError,
    path: "max_attempts",
  },
  {
    label: "enqueueManyRollouts with a request lacking input",
    call: (st) => st.enqueueManyRollouts([{ input: 1 }, bad({ mode: "train" })]),
    error: ValidationError,
    path: "input",
  },
  // Rollout updates
  {
    label: "updateRollout with a bad status",
    call: (st, s) => st.updateRollout(s.queued.rollout_id, { status: bad("paused") }),
    error: ValidationError,
    path: "status",
  },
  {
    label: "updateRollout with max_attempts 0",
    call: (st, s) => st.updateRollout(s.queued.rollout_id, { config: { max_attempts: 0 } }),
    error: ValidationError,
    path: "max_attempts",
  },
  {
    label: "updateRollout with a bad mode and a good status",
    call: (st, s) => st.updateRollout(s.running.rollout_id, { status: "succeeded", mode: bad("x") }),
    error: ValidationError,
    path: "mode",
  },
  // Attempt updates
  {
    label: "updateAttempt with a rollout-only status (cancelled)",
    call: (st, s) => st.updateAttempt(s.running.rollout_id, "latest", { status: bad("cancelled") }),
    error: ValidationError,
    path: "status",
  },
  {
    label: "updateAttempt with status queuing",
    call: (st, s) => st.updateAttempt(s.running.rollout_id, "latest", { status: bad("queuing") }),
    error: ValidationError,
    path: "status",
  },
  {
    label: "updateAttempt with a string heartbeat time",
    call: (st, s) => st.updateAttempt(s.running.rollout_id, "latest", { last_heartbeat_time: bad("soon") }),
    error: ValidationError,
    path: "last_heartbeat_time",
  },
  {
    label: "updateAttempt with string metadata",
    call: (st, s) => st.updateAttempt(s.running.rollout_id, "latest", { status: "succeeded", metadata: bad("m") }),
    error: ValidationError,
    path: "metadata",
  },
  // Spans
  {
    label: "addSpan without a name",
    call: (st, s) => {
      const { name: _n, ...rest } = makeSpan(at(s.running), 9);
      return st.addSpan(bad(rest));
    },
    error: ValidationError,
    path: "name",
  },
  {
    label: "addSpan with a bad status code",
    call: (st, s) => st.addSpan({ ...makeSpan(at(s.running), 9), status: bad({ status_code: "FINE" }) }),
    error: ValidationError,
    path: "status_code",
  },
  {
    label: "addSpan with a string sequence_id",
    call: (st, s) => st.addSpan({ ...makeSpan(at(s.running), 9), sequence_id: bad("9") }),
    error: ValidationError,
    path: "sequence_id",
  },
  {
    label: "addSpan with an object attribute value",
    call: (st, s) => st.addSpan({ ...makeSpan(at(s.running), 9), attributes: bad({ k: { nested: 1 } }) }),
    error: ValidationError,
    path: "attributes",
  },
  {
    label: "addSpan without the nullable parent key",
    call: (st, s) => {
      const { parent: _p, ...rest } = makeSpan(at(s.running), 9);
      return st.addSpan(bad(rest));
    },
    error: ValidationError,
    path: "parent",
  },
  {
    label: "addManySpans with one malformed span",
    call: (st, s) => st.addManySpans([makeSpan(at(s.running), 9), { ...makeSpan(at(s.running), 10), events: bad("none") }]),
    error: ValidationError,
    path: "events",
  },
  // Resources and workers
  {
    label: "addResources with an LLM lacking endpoint",
    call: (st) => st.addResources(bad({ x: { resource_type: "llm", model: "m" } })),
    error: ValidationError,
    path: "endpoint",
  },
  {
    label: "addResources with an unknown resource_type",
    call: (st) => st.addResources(bad({ x: { resource_type: "gpu" } })),
    error: ValidationError,
    path: "x",
  },
  {
    label: "addResources with a bad template engine",
    call: (st) => st.addResources(bad({ p: { resource_type: "prompt_template", template: "t", engine: "mustache" } })),
    error: ValidationError,
    path: "engine",
  },
  {
    label: "updateResources with a bad resource",
    call: (st, s) => st.updateResources(s.resourcesId, bad({ x: { resource_type: "llm", endpoint: 5, model: "m" } })),
    error: ValidationError,
    path: "endpoint",
  },
  { label: "updateWorker with null stats", call: (st) => st.updateWorker("w-stats", bad(null)), error: ValidationError },
  // Queries: a misspelt status is an error rather than a filter that silently matches nothing.
  { label: "queryRollouts with an unknown status", call: (st) => st.queryRollouts({ status_in: bad(["paused"]) }), error: ValidationError },
  { label: "queryWorkers with an unknown status", call: (st) => st.queryWorkers({ status_in: bad(["sleeping"]) }), error: ValidationError },
  {
    label: "queryRollouts with a bad filter_logic",
    call: (st) => st.queryRollouts({ filter_logic: bad("xor"), status_in: ["queuing"] }),
    error: ValidationError,
  },
  {
    label: "querySpans with a bad sort_order",
    call: (st, s) => st.querySpans(s.running.rollout_id, { sort_order: bad("up") }),
    error: ValidationError,
  },
  // Illegal transitions
  {
    label: "updateAttempt sending a running attempt back to preparing",
    call: (st, s) => st.updateAttempt(s.running.rollout_id, "latest", { status: "preparing" }),
    error: ConflictError,
  },
  {
    label: "updateAttempt sending a succeeded attempt back to preparing",
    call: (st, s) => st.updateAttempt(s.done.rollout_id, s.done.attempt.attempt_id, { status: "preparing", worker_id: "w-new" }),
    error: ConflictError,
  },
  // Unknown ids
  {
    label: "startAttempt on an unknown rollout",
    call: (st) => st.startAttempt("ro-000000000000", { worker_id: "w-new" }),
    error: NotFoundError,
  },
  {
    label: "updateRollout on an unknown rollout",
    call: (st) => st.updateRollout("ro-000000000000", { status: "succeeded" }),
    error: NotFoundError,
  },
  {
    label: "updateAttempt on an unknown rollout",
    call: (st) => st.updateAttempt("ro-000000000000", "latest", { status: "succeeded" }),
    error: NotFoundError,
  },
  {
    label: "updateAttempt on a rollout without attempts",
    call: (st, s) => st.updateAttempt(s.queued.rollout_id, "latest", { status: "succeeded" }),
    error: NotFoundError,
  },
  {
    label: "updateAttempt on an unknown attempt",
    call: (st, s) => st.updateAttempt(s.running.rollout_id, "at-00000000", { status: "succeeded", worker_id: "w-new" }),
    error: NotFoundError,
  },
  {
    label: "addSpan on an unknown rollout",
    call: (st, s) => st.addSpan(makeSpan({ rollout_id: "ro-000000000000", attempt_id: s.running.attempt.attempt_id }, 9)),
    error: NotFoundError,
  },
  {
    label: "addSpan on an unknown attempt",
    call: (st, s) => st.addSpan(makeSpan({ rollout_id: s.running.rollout_id, attempt_id: "at-00000000" }, 9)),
    error: NotFoundError,
  },
  {
    label: "addManySpans whose last span has an unknown attempt",
    call: (st, s) =>
      st.addManySpans([
        makeSpan(at(s.running), 9),
        makeSpan(at(s.done), 10),
        makeSpan({ rollout_id: s.done.rollout_id, attempt_id: "at-00000000" }, 11),
      ]),
    error: NotFoundError,
  },
];

function badInputTests(env: Env): void {
  describe("bad input is rejected with a typed error and changes nothing", () => {
    it.each(BAD_INPUT)("$label", async ({ call, error, path }) => {
      const seeded = await seedVaried(env);
      const resourcesId = (await env.store.getLatestResources())!.resources_id;
      const before = await snapshot(env.store);
      env.clock.advance(1);
      const err = await rejectsWith(call(env.store, { ...seeded, resourcesId }), error);
      if (path !== undefined) expectIssueAt(err as ValidationError, path);
      expect(await snapshot(env.store)).toEqual(before);
      // The queue is untouched too: exactly the one queued rollout comes out.
      const claimed = await env.store.dequeueManyRollouts({ limit: 10 });
      expect(claimed.map((r) => r.rollout_id)).toEqual([seeded.queued.rollout_id]);
    });

    it("errors carry the typed error's errorType and HTTP status", async () => {
      const nf = await rejectsWith(env.store.updateRollout("ro-000000000000", { status: "failed" }), NotFoundError);
      expect([nf.errorType, nf.status]).toEqual(["NotFoundError", 404]);
      const ve = await rejectsWith(env.store.enqueueRollout(1, { config: { max_attempts: 0 } }), ValidationError);
      expect([ve.errorType, ve.status]).toEqual(["ValidationError", 400]);
      expect(ve.issues.length).toBeGreaterThan(0);
      expect(ConflictError.prototype).toBeInstanceOf(LightningError);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Concurrent callers

function concurrencyTests(env: Env): void {
  const n = () => env.opts.concurrency;

  describe("concurrent callers", () => {
    it("concurrent getNextSpanSequenceId calls get unique, consecutive ids per rollout", async () => {
      const a = await env.store.startRollout("a");
      const b = await env.store.startRollout("b");
      const calls = Array.from({ length: n() }, (_, i) => {
        const r = i % 3 === 0 ? b : a;
        return env.store.getNextSpanSequenceId(r.rollout_id, r.attempt.attempt_id).then((id) => [r.rollout_id, id] as const);
      });
      const got = await Promise.all(calls);
      for (const r of [a, b]) {
        const ids = got
          .filter(([rid]) => rid === r.rollout_id)
          .map(([, id]) => id)
          .sort((x, y) => x - y);
        expect(ids).toEqual(Array.from({ length: ids.length }, (_, i) => i + 1));
      }
      expect(await env.store.getNextSpanSequenceId(a.rollout_id, "x")).toBe(got.filter(([rid]) => rid === a.rollout_id).length + 1);
    });

    it("concurrent single and batched sequence id requests never collide", async () => {
      const a = await env.store.startRollout("a");
      const pair = [a.rollout_id, a.attempt.attempt_id] as const;
      const singles = Array.from({ length: n() / 2 }, () => env.store.getNextSpanSequenceId(...pair).then((x) => [x]));
      const batches = Array.from({ length: n() / 20 }, () => env.store.getManySpanSequenceIds(Array.from({ length: 5 }, () => pair)));
      const all = (await Promise.all([...singles, ...batches])).flat().sort((x, y) => x - y);
      expect(all).toEqual(Array.from({ length: all.length }, (_, i) => i + 1));
      for (const batch of await Promise.all(batches)) {
        expect(batch.slice(1).every((v, i) => v === batch[i] + 1)).toBe(true);
      }
    });

    it("concurrent dequeues claim every rollout exactly once", async () => {
      const rs = await env.store.enqueueManyRollouts(Array.from({ length: n() / 4 }, (_, i) => ({ input: i })));
      const got = await Promise.all(Array.from({ length: n() }, (_, i) => env.store.dequeueRollout({ worker_id: `w${i % 7}` })));
      const claimed = got.filter((x): x is AttemptedRollout => x !== null);
      expect(claimed).toHaveLength(rs.length);
      expect(new Set(claimed.map((r) => r.rollout_id))).toEqual(new Set(rs.map((r) => r.rollout_id)));
      expect(claimed.every((r) => r.attempt.sequence_id === 1)).toBe(true);
    });

    it("concurrent duplicates of one span insert it exactly once", async () => {
      const r = await env.store.startRollout(1);
      const s = makeSpan(at(r), 1);
      const out = await Promise.all(Array.from({ length: 20 }, () => env.store.addSpan(s)));
      expect(out.filter((x) => x !== null)).toHaveLength(1);
      expect((await env.store.querySpans(r.rollout_id)).total).toBe(1);
    });

    it("concurrent updateResources on one id lose no version", async () => {
      const res = await env.store.addResources({});
      await Promise.all(Array.from({ length: 50 }, () => env.store.updateResources(res.resources_id, {})));
      expect((await env.store.getResourcesById(res.resources_id))!.version).toBe(51);
    });

    it("concurrent enqueues and startAttempts keep per-rollout sequence ids unique", async () => {
      const r = await env.store.startRollout(1);
      const out = await Promise.all(Array.from({ length: 30 }, () => env.store.startAttempt(r.rollout_id)));
      expect(out.map((x) => x.attempt.sequence_id).sort((x, y) => x - y)).toEqual(Array.from({ length: 30 }, (_, i) => i + 2));
      const rs = await Promise.all(Array.from({ length: 30 }, (_, i) => env.store.enqueueRollout(i)));
      expect((await env.store.queryRollouts({ status_in: ["queuing"] })).total).toBe(rs.length);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The answers on the wire (stores reached over HTTP only)

function wireTests(env: Env, wireOf: (store: LightningStore) => WireRequest): void {
  describe("on the wire (docs/departures.md#2)", () => {
    it("a single-item GET of an unknown id answers 200 null, as upstream's Python client expects", async () => {
      const wire = wireOf(env.store);
      const queued = await env.store.enqueueRollout(1);
      const lookups = [
        "/rollouts/ro-000000000000",
        "/rollouts/ro-000000000000/attempts/latest",
        `/rollouts/${queued.rollout_id}/attempts/latest`,
        "/resources/latest",
        "/resources/rs-000000000000",
        "/workers/nobody",
      ];
      for (const path of lookups) expect([path, await wire("GET", path)]).toEqual([path, { status: 200, body: null }]);
    });

    it("the same lookups of known ids answer 200 with the object", async () => {
      const wire = wireOf(env.store);
      const r = await env.store.startRollout(1, { worker_id: "w1" });
      const res = await env.store.addResources({});
      expect(await wire("GET", `/rollouts/${r.rollout_id}`)).toMatchObject({
        status: 200,
        body: { rollout_id: r.rollout_id, attempt: { attempt_id: r.attempt.attempt_id } },
      });
      expect(await wire("GET", `/rollouts/${r.rollout_id}/attempts/latest`)).toMatchObject({
        status: 200,
        body: { attempt_id: r.attempt.attempt_id },
      });
      expect(await wire("GET", "/resources/latest")).toMatchObject({ status: 200, body: { resources_id: res.resources_id } });
      expect(await wire("GET", `/resources/${res.resources_id}`)).toMatchObject({ status: 200, body: { resources_id: res.resources_id } });
      expect(await wire("GET", "/workers/w1")).toMatchObject({ status: 200, body: { worker_id: "w1", status: "busy" } });
    });

    it("writes and nested paths on an unknown id stay 404 NotFoundError; an unknown route is RouteNotFound", async () => {
      const wire = wireOf(env.store);
      const r = await env.store.startRollout(1);
      const writes: [string, unknown][] = [
        ["/rollouts/ro-000000000000", { status: "failed" }],
        ["/rollouts/ro-000000000000/attempts", undefined],
        ["/rollouts/ro-000000000000/attempts/latest", { status: "succeeded" }],
        [`/rollouts/${r.rollout_id}/attempts/at-00000000`, { status: "succeeded" }],
      ];
      for (const [path, body] of writes) {
        const answer = await wire("POST", path, body);
        expect([path, answer.status, (answer.body as { error_type?: string }).error_type]).toEqual([path, 404, "NotFoundError"]);
      }
      const route = await wire("GET", `/rollouts/${r.rollout_id}/attempts/latest/more`);
      expect([route.status, (route.body as { error_type?: string }).error_type]).toEqual([404, "RouteNotFound"]);
      expect(await env.store.getLatestAttempt(r.rollout_id)).toMatchObject({ status: "preparing" });
    });
  });
}

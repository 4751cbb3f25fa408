/**
 * The tracer's span buffer while the store is away (docs/tracing.md): bounded in spans and in bytes,
 * spans beyond the bound fail the trace context with a SpanDeliveryError; which errors are retried; the
 * backoff; option checks.
 */
import { afterEach, describe, expect, it } from "vitest";
import { StoreConnectionError, StoreHttpError, type LightningStoreClient } from "../../src/client/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { OtelTracer, SpanDeliveryError, getOtelTracer, isStoreUnavailable } from "../../src/tracer/index.ts";
import { Backoff } from "../../src/tracer/delivery.ts";
import { ValidationError } from "../../src/types/index.ts";
import { FaultyFetch, flakyClient, restartableServer, until } from "../runner/flaky-store.ts";

let store: InMemoryLightningStore | undefined;
let client: LightningStoreClient | undefined;
let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await client?.close();
  await close?.();
  await store?.close();
  store = client = close = undefined;
});

const mark = (name: string, attributes: Record<string, string> = {}) =>
  getOtelTracer("test").startActiveSpan(name, { attributes }, (s) => s.end());

/** A rollout on an in-memory store behind a server that is stopped while `body` runs and restarted after it marked its spans. */
async function traceThroughOutage(tracer: OtelTracer, body: () => void) {
  store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  const server = await restartableServer(store);
  close = server.close;
  const faults = new FaultyFetch();
  client = flakyClient(server.url, faults);
  tracer.initWorker(0, client);
  const r = await store.startRollout(null);
  const traced = tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, async () => {
    await server.stop();
    body();
    // Two failures: the client gives up on its own after the first (its health probe fails too), so the second is the tracer's retry.
    await until(() => faults.spanWriteFailures() >= 2, "the tracer to try again");
    await server.start();
  });
  const error = await traced.then(
    () => null,
    (e: unknown) => e,
  );
  const stored = (await store.querySpans(r.rollout_id)).items.map((s) => s.name);
  return { error, stored };
}

const tracerWith = (o: ConstructorParameters<typeof OtelTracer>[0]) =>
  new OtelTracer({ flushIntervalSeconds: 0.02, retryMinDelaySeconds: 0.02, retryMaxDelaySeconds: 0.1, ...o });

describe("the span buffer while the store is away", () => {
  it("holds at most maxBufferedSpans: the rest are dropped, the others stored, and the context fails saying so", async () => {
    const { error, stored } = await traceThroughOutage(tracerWith({ maxBufferedSpans: 3 }), () => {
      for (let i = 1; i <= 5; i++) mark(`m${i}`);
    });
    expect(stored).toEqual(["m1", "m2", "m3"]);
    expect(error).toBeInstanceOf(SpanDeliveryError);
    expect((error as SpanDeliveryError).undelivered).toBe(2);
    expect((error as Error).message).toMatch(
      /^2 span\(s\) of rollout \S+ attempt \S+ could not be delivered to the store: 2 dropped because the delivery buffer was full \(3 spans or \d+ bytes/,
    );
  }, 30_000);

  it("holds at most maxBufferedBytes: a span that would pass it is dropped", async () => {
    const { error, stored } = await traceThroughOutage(tracerWith({ maxBufferedBytes: 4000 }), () => {
      mark("small");
      mark("big", { text: "x".repeat(5000) });
      mark("small-again");
    });
    expect(stored).toEqual(["small", "small-again"]);
    expect((error as SpanDeliveryError).undelivered).toBe(1);
    expect((error as Error).message).toMatch(/1 dropped because the delivery buffer was full \(10000 spans or 4000 bytes/);
  }, 30_000);

  it("within the bounds, every span waits for the store and the context succeeds", async () => {
    const { error, stored } = await traceThroughOutage(tracerWith({ maxBufferedSpans: 5 }), () => {
      for (let i = 1; i <= 5; i++) mark(`m${i}`);
    });
    expect(error).toBeNull();
    expect(stored).toEqual(["m1", "m2", "m3", "m4", "m5"]);
  }, 30_000);
});

describe("retry policy", () => {
  it("retries only errors that say the store is unreachable or busy", () => {
    expect(isStoreUnavailable(new StoreConnectionError("refused"))).toBe(true);
    for (const status of [408, 429, 500, 502, 503]) expect(isStoreUnavailable(new StoreHttpError(status, "x", "m"))).toBe(true);
    for (const status of [400, 401, 404, 409, 413]) expect(isStoreUnavailable(new StoreHttpError(status, "x", "m"))).toBe(false);
    expect(isStoreUnavailable(new ValidationError("bad"))).toBe(false);
    expect(isStoreUnavailable(new Error("disk full"))).toBe(false);
  });

  it("backs off exponentially up to the maximum, each wait jittered down to half, and starts over after a success", () => {
    const top = new Backoff(100, 800, () => 1);
    expect([1, 2, 3, 4, 5].map(() => top.next())).toEqual([100, 200, 400, 800, 800]);
    top.reset();
    expect(top.next()).toBe(100);
    const bottom = new Backoff(100, 800, () => 0);
    expect([1, 2, 3].map(() => bottom.next())).toEqual([50, 100, 200]);
  });

  it("refuses limits that make no sense, naming the option", () => {
    expect(() => new OtelTracer({ maxBufferedSpans: -1 })).toThrow(ValidationError);
    expect(() => new OtelTracer({ finalFlushTimeoutSeconds: Number.NaN })).toThrow(/finalFlushTimeoutSeconds must be a number >= 0/);
    expect(() => new OtelTracer({ retryMinDelaySeconds: 2, retryMaxDelaySeconds: 1 })).toThrow(
      /retryMaxDelaySeconds must be >= retryMinDelaySeconds/,
    );
  });
});

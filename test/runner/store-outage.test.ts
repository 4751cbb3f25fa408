/**
 * The runner over HTTP while the store server is briefly away (docs/tracing.md): spans wait and are
 * retried, so the agent's work still ends `succeeded` with every span stored exactly once, in start
 * order; a store that never comes back fails the attempt with a SpanDeliveryError, within bounds.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { LightningStoreClient } from "../../src/client/index.ts";
import { LitAgent, LitAgentRunner } from "../../src/runner/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { OtelTracer, SpanDeliveryError, captureLogs, getOtelTracer } from "../../src/tracer/index.ts";
import { FaultyFetch, SPAN_WRITE, flakyClient, restartableServer, until, type RestartableServer } from "./flaky-store.ts";
import { PROMPT } from "./helpers.ts";

let store: InMemoryLightningStore;
let server: (RestartableServer & { close(): Promise<void> }) | undefined;
let client: LightningStoreClient | undefined;
afterEach(async () => {
  await client?.close();
  await server?.close();
  await store?.close();
  client = server = undefined;
});

async function setup(tasks: string[]) {
  store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  await store.addResources(PROMPT);
  for (const t of tasks) await store.enqueueRollout(t);
  server = await restartableServer(store);
  const faults = new FaultyFetch();
  client = flakyClient(server.url, faults);
  return { server, faults, client };
}

/** Short waits so a test sees retries quickly; the bounds are what the tests are about. */
const fastTracer = (extra: ConstructorParameters<typeof OtelTracer>[0] = {}) =>
  new OtelTracer({ flushIntervalSeconds: 0.02, retryMinDelaySeconds: 0.02, retryMaxDelaySeconds: 0.1, ...extra });

const runnerWith = (tracer: OtelTracer, extra: Partial<ConstructorParameters<typeof LitAgentRunner>[0]> = {}) =>
  new LitAgentRunner<string>({ tracer, maxRollouts: 1, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0, ...extra });

class Agent extends LitAgent<string> {
  constructor(private readonly body: () => Promise<void>) {
    super();
  }
  override async rollout(): Promise<void> {
    await this.body();
  }
}

/** An instant span of the rollout's trace, named `name`. */
const mark = (name: string) => getOtelTracer("test").startActiveSpan(name, (s) => s.end());

async function storedSpans() {
  const [r] = (await store.queryRollouts()).items;
  const spans = (await store.querySpans(r!.rollout_id)).items;
  return { rollout: r!, spans, names: spans.map((s) => s.name), seqs: spans.map((s) => s.sequence_id) };
}

describe("runner over HTTP: a store that is briefly away", () => {
  for (const outage of ["restart", "503"] as const) {
    it(`mid-rollout (${outage === "restart" ? "server stopped and restarted on the same port" : "every request answered 503"}): succeeded, every span stored once, in start order`, async () => {
      const { server, faults, client } = await setup(["a"]);
      const down = () => (outage === "restart" ? server.stop() : void (faults.unavailable = () => true));
      const up = () => (outage === "restart" ? server.start() : void (faults.unavailable = null));
      const agent = new Agent(() =>
        getOtelTracer("test").startActiveSpan("outer", async (outer) => {
          mark("m1");
          mark("m2");
          await until(async () => (await store.statistics()).total_spans === 2, "the first spans to be stored");
          await down();
          mark("m3");
          mark("m4");
          await until(() => faults.spanWriteFailures() >= 2, "span writes to fail while the store is away");
          await up();
          mark("m5");
          outer.end();
        }),
      );
      const runner = runnerWith(fastTracer());
      await runner.withRunContext({ agent, store: client, workerId: 0 }, (r) => r.iter());

      const { rollout, spans, names, seqs } = await storedSpans();
      expect(rollout.status).toBe("succeeded");
      expect(names).toEqual(["outer", "m1", "m2", "m3", "m4", "m5"]);
      expect(seqs).toEqual([1, 2, 3, 4, 5, 6]);
      expect(new Set(spans.map((s) => s.span_id)).size).toBe(6);
      expect(runner.tracer.getLastTrace().map((s) => [s.name, s.sequence_id])).toEqual(spans.map((s) => [s.name, s.sequence_id]));
    }, 30_000);
  }

  it("at the end of the rollout: the last spans and the final status wait for the restarted server", async () => {
    const { server, faults, client } = await setup(["a"]);
    let returned = false;
    const agent = new Agent(async () => {
      mark("m1");
      mark("m2");
      await server.stop();
      mark("m3");
      returned = true;
    });
    const runner = runnerWith(fastTracer());
    const run = runner.withRunContext({ agent, store: client, workerId: 0 }, (r) => r.iter());
    await until(() => returned && faults.spanWriteFailures() >= 2, "the runner to fail to finish the attempt");
    await server.start();
    await run;

    const { rollout, names, seqs } = await storedSpans();
    expect(rollout.status).toBe("succeeded");
    expect(names).toEqual(["m1", "m2", "m3"]);
    expect(seqs).toEqual([1, 2, 3]);
    expect(runner.tracer.getLastTrace().map((s) => s.sequence_id)).toEqual([1, 2, 3]);
  }, 30_000);

  it("a returned reward written while the server restarts is stored once, after the traced spans", async () => {
    const { server, faults, client } = await setup(["a"]);
    let returned = false;
    const agent = new (class extends LitAgent<string> {
      override async rollout(): Promise<number> {
        mark("m1");
        await until(async () => (await store.statistics()).total_spans === 1, "the traced span to be stored");
        await server.stop();
        returned = true;
        return 0.75;
      }
    })();
    const runner = runnerWith(fastTracer());
    const run = runner.withRunContext({ agent, store: client, workerId: 0 }, (r) => r.iter());
    // Two failed tries of the reward's sequence id: the client gave up on the first (its health probe failed too).
    await until(
      () => returned && faults.failures.filter((r) => r.endsWith("/spans/next")).length >= 2,
      "the runner to try the reward again",
    );
    await server.start();
    await run;

    const { rollout, names, spans } = await storedSpans();
    expect(rollout.status).toBe("succeeded");
    expect(names).toEqual(["m1", "agentlightning.annotation"]);
    expect(spans[1]!.attributes["agentlightning.reward.0.value"]).toBe(0.75);
    expect(spans[1]!.sequence_id).toBeGreaterThan(spans[0]!.sequence_id);
  }, 30_000);

  it("an answer lost after the server stored the spans: nothing is stored twice, and the tracer learns the store's ids", async () => {
    const { faults, client } = await setup(["a"]);
    faults.loseAnswerOf((route) => route.endsWith("/attempts/finish"));
    const agent = new Agent(async () => {
      mark("m1");
      mark("m2");
    });
    // No timer flush: both spans go in the finishing request, which the server numbers itself.
    const runner = runnerWith(fastTracer({ flushIntervalSeconds: 60 }));
    await runner.withRunContext({ agent, store: client, workerId: 0 }, (r) => r.iter());

    expect(faults.served.filter((r) => r.endsWith("/attempts/finish")).length).toBe(2);
    const { rollout, names, seqs } = await storedSpans();
    expect(rollout.status).toBe("succeeded");
    expect(names).toEqual(["m1", "m2"]);
    expect(seqs).toEqual([1, 2]);
    expect(runner.tracer.getLastTrace().map((s) => [s.name, s.sequence_id])).toEqual([
      ["m1", 1],
      ["m2", 2],
    ]);
  }, 30_000);
});

describe("runner over HTTP: a store that does not come back", () => {
  it("step() fails with a SpanDeliveryError naming the spans left, within the configured bounds", async () => {
    const { server, client } = await setup([]);
    const agent = new Agent(async () => {
      await server.stop();
      mark("m1");
      mark("m2");
    });
    const runner = runnerWith(fastTracer({ finalFlushTimeoutSeconds: 0.3 }), { storeRetryTimeoutSeconds: 0.3 });
    const logs = captureLogs();
    try {
      await runner.withRunContext({ agent, store: client, workerId: 0 }, async (r) => {
        const err = await r.step("a").then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(SpanDeliveryError);
        expect((err as SpanDeliveryError).undelivered).toBe(2);
        expect((err as Error).message).toMatch(
          /^2 span\(s\) of rollout ro-\w+ attempt at-\w+ could not be delivered to the store: 2 still waiting when the final flush gave up: the store was unreachable for 0.3 s after the attempt ended/,
        );
      });
    } finally {
      logs.stop();
    }
    expect(logs.text()).toMatch(/Exception during update_attempt/);
    // The store never heard from the attempt after it started.
    const { rollout, spans } = await storedSpans();
    expect(spans).toEqual([]);
    expect(rollout.status).toBe("preparing");
  }, 30_000);

  it("span writes answered 503 for good: the attempt ends failed in the store, the error says how many spans and why", async () => {
    const { faults, client } = await setup(["a"]);
    // Only span writes fail: the rest of the store answers, so the runner can record the failure.
    faults.unavailable = (route) => SPAN_WRITE.test(route);
    const agent = new Agent(async () => {
      mark("m1");
      await until(() => faults.spanWriteFailures() >= 1, "a span write to fail");
      mark("m2");
      mark("m3");
    });
    const runner = runnerWith(fastTracer({ finalFlushTimeoutSeconds: 0.3 }), { storeRetryTimeoutSeconds: 0.3 });
    const logs = captureLogs();
    try {
      await runner.withRunContext({ agent, store: client, workerId: 0 }, (r) => r.iter());
    } finally {
      logs.stop();
    }
    const { rollout, spans } = await storedSpans();
    expect(spans).toEqual([]);
    expect(rollout.status).toBe("failed");
    expect(logs.text()).toMatch(
      /Exception during rollout \| SpanDeliveryError: 3 span\(s\) of rollout .* could not be delivered to the store: 3 still waiting when the final flush gave up: the store was unreachable for 0.3 s after the attempt ended \(finalFlushTimeoutSeconds; last error: StoreHttpError: POST \/spans\/(batch|next): the store is unavailable\)/,
    );
  }, 30_000);
});

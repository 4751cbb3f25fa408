/**
 * The other direction: our `LightningStoreClient` and `LitAgentRunner` against a server that answers
 * the way Agent Lightning v0.3.0's does (upstream-server.ts): its `200 null` lookups, its 500 for an
 * unknown rollout, its error bodies (a retried 500 with a Python traceback, pydantic's 422, a 400 with
 * a string detail), and the Lightning routes it lacks, which the client replaces with upstream's calls.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { findFinalReward } from "../../src/adapter/reward.ts";
import { LightningStoreClient, StoreHttpError } from "../../src/client/index.ts";
import { LitAgent, LitAgentRunner } from "../../src/runner/index.ts";
import { emitReward, getOtelTracer } from "../../src/tracer/index.ts";
import { ValidationError, spanFromAttributes, type AttemptedRollout, type Span } from "../../src/types/index.ts";
import { startUpstreamShapedServer, type UpstreamShapedServer } from "./upstream-server.ts";

let server: UpstreamShapedServer;
beforeEach(async () => {
  server = await startUpstreamShapedServer();
});
afterEach(async () => {
  await server.close();
});

/** Retries as upstream's client does, with short delays; health probes on. */
const clientOf = (s: UpstreamShapedServer) => new LightningStoreClient(s.url, { retryDelays: [0.01, 0.01], healthRetryDelays: [0.01] });

const span = (r: AttemptedRollout, name: string, sequenceId: number | null): Span =>
  ({
    ...spanFromAttributes({ rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, name, sequence_id: 0 }),
    sequence_id: sequenceId,
  }) as unknown as Span;

describe("lookups against upstream's server", () => {
  it("its 200 null answers read as null", async () => {
    const client = clientOf(server);
    expect(await client.getLatestResources()).toBeNull();
    expect(await client.getResourcesById("rs-000000000000")).toBeNull();
    expect(await client.getLatestAttempt("ro-000000000000")).toBeNull();
    expect(await client.getWorkerById("Worker-0")).toBeNull();
    expect(server.counts).toMatchObject({
      "GET /v1/agl/resources/latest": 1,
      "GET /v1/agl/resources/{id}": 1,
      "GET /v1/agl/workers/{id}": 1,
    });
  });

  it("its 500 for an unknown rollout reads as null at once: one request, no retry, no health probe", async () => {
    const client = clientOf(server);
    expect(await client.getRolloutById("ro-000000000000")).toBeNull();
    expect(server.counts["GET /v1/agl/rollouts/{id}"]).toBe(1);
    expect(server.counts["GET /v1/agl/health"]).toBeUndefined();
    const r = await client.enqueueRollout({ q: 1 });
    expect(await client.getRolloutById(r.rollout_id)).toMatchObject({ rollout_id: r.rollout_id, status: "queuing" });
  });
});

describe("error bodies from upstream's server", () => {
  it("a store error is its 500, retried as upstream's client does, then a typed error naming the Python exception", async () => {
    const client = clientOf(server);
    const err = await client.updateRollout("ro-000000000000", { status: "failed" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreHttpError);
    expect([(err as StoreHttpError).status, (err as StoreHttpError).errorType]).toEqual([500, "ValueError"]);
    expect((err as Error).message).toMatch(/Internal server error \(ValueError: .*ro-000000000000/);
    expect(server.counts["POST /v1/agl/rollouts/{id}"]).toBe(3);
  });

  it("pydantic's 422 is a ValidationError with the issue paths, not retried", async () => {
    const client = clientOf(server);
    const r = await client.enqueueRollout(1);
    const err = await client.updateRollout(r.rollout_id, { status: "paused" as never }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues.map((i) => i.path)).toEqual([["status"]]);
    expect((err as Error).message).toContain("status:");
    expect(server.counts["POST /v1/agl/rollouts/{id}"]).toBe(1);
    expect(await client.getRolloutById(r.rollout_id)).toMatchObject({ status: "queuing" });
  });

  it("a 400 with a string detail is a ValidationError carrying that detail", async () => {
    const err = await clientOf(server)
      .queryRollouts({ limit: 0 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as Error).message).toContain("Limit must be greater than 0 or -1 for no limit");
  });
});

describe("Lightning routes upstream's server lacks", () => {
  it("span batches, many sequence ids and finishing fall back to upstream's calls, asking for each route once", async () => {
    const client = clientOf(server);
    const r = await client.startRollout("a");
    const stored = await client.addManySpans([span(r, "first", null), span(r, "explicit", 7), span(r, "after", null)]);
    expect(stored.map((s) => [s.name, s.sequence_id])).toEqual([
      ["first", 1],
      ["explicit", 7],
      ["after", 8],
    ]);
    expect((await client.addManySpans([span(r, "more", null)])).map((s) => s.sequence_id)).toEqual([9]);
    expect(await client.addManySpansForSequenceIds([span(r, "numbered", null)])).toEqual([10]);
    expect(
      await client.getManySpanSequenceIds([
        [r.rollout_id, r.attempt.attempt_id],
        [r.rollout_id, r.attempt.attempt_id],
      ]),
    ).toEqual([11, 12]);
    expect(await client.getManySpanSequenceIds([[r.rollout_id, "x"]])).toEqual([13]);

    const queued = await client.enqueueRollout("b");
    const done = await client.finishAttempt({
      rollout_id: r.rollout_id,
      attempt_id: r.attempt.attempt_id,
      spans: [span(r, "last", null)],
      attempt: { status: "succeeded" },
      claim: { worker_id: "w1" },
    });
    expect(done.sequence_ids).toEqual([14]);
    expect(done.attempt).toMatchObject({ status: "succeeded" });
    expect(done.next).toMatchObject({ rollout_id: queued.rollout_id, attempt: { worker_id: "w1" } });
    expect((await server.store.querySpans(r.rollout_id)).items.map((s) => s.name)).toEqual([
      "first",
      "explicit",
      "after",
      "more",
      "numbered",
      "last",
    ]);

    expect(server.counts).toMatchObject({
      "POST /v1/agl/spans/batch": 1,
      "POST /v1/agl/spans/next/many": 1,
      "POST /v1/agl/attempts/finish": 1,
    });
    await client.finishAttempt({ rollout_id: queued.rollout_id, attempt_id: done.next!.attempt.attempt_id, attempt: { status: "failed" } });
    expect(server.counts["POST /v1/agl/attempts/finish"]).toBe(1);
  });

  it("a wait returns once upstream answers before the hold, without polling again", async () => {
    const client = clientOf(server);
    const r = await client.startRollout("a");
    await client.updateAttempt(r.rollout_id, "latest", { status: "succeeded" });
    expect(
      (await client.waitForRollouts({ rollout_ids: [r.rollout_id, "ro-000000000000"], timeout: 60 })).map((x) => x.rollout_id),
    ).toEqual([r.rollout_id]);
    expect(server.counts["POST /v1/agl/waits/rollouts"]).toBe(1);
  });
});

/** Two traced spans and a reward, as an agent does. */
class Traced extends LitAgent<string> {
  override async rollout(task: string) {
    getOtelTracer("interop").startActiveSpan(`work-${task}`, (s) => {
      getOtelTracer("interop").startActiveSpan("llm", (c) => c.end());
      s.end();
    });
    emitReward(0.5);
  }
}

describe("our runner against upstream's server", () => {
  it("completes every rollout with its spans numbered and its reward, through upstream's routes", async () => {
    await server.store.addResources({ prompt: { resource_type: "prompt_template", template: "Q: {q}", engine: "f-string" } });
    const rollouts = await server.store.enqueueManyRollouts(["a", "b", "c"].map((input) => ({ input })));
    const client = clientOf(server);
    const runner = new LitAgentRunner<string>({ maxRollouts: 3, pollInterval: 0.01, intervalJitter: 0, heartbeatInterval: 0 });
    await runner.withRunContext({ agent: new Traced(), store: client, workerId: 0 }, (r) => r.iter());
    await client.close();

    for (const r of rollouts) {
      expect(await server.store.getRolloutById(r.rollout_id)).toMatchObject({ status: "succeeded" });
      const spans = (await server.store.querySpans(r.rollout_id)).items;
      expect(spans.map((s) => [s.name, s.sequence_id])).toEqual([
        [`work-${r.input as string}`, 1],
        ["llm", 2],
        ["agentlightning.annotation", 3],
      ]);
      expect(spans[1]!.parent_id).toBe(spans[0]!.span_id);
      expect(findFinalReward(spans)).toBe(0.5);
    }
    expect(runner.tracer.getLastTrace().map((s) => s.sequence_id)).toEqual([1, 2, 3]);
    expect(await server.store.getWorkerById("Worker-0")).toMatchObject({ status: "idle" });
    // Each missing route was asked for once; nothing answered 5xx.
    expect(server.counts["POST /v1/agl/attempts/finish"]).toBe(1);
    expect(server.counts["POST /v1/agl/spans/batch"] ?? 0).toBeLessThanOrEqual(1);
  });
});

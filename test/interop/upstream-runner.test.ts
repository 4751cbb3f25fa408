/**
 * Upstream's Python runner loop (v0.3.0 `LitAgentRunner` with its `OtelTracer`, replayed in
 * upstream-runner.ts) against our store server under Node, Deno and Bun, with our TypeScript client as
 * the algorithm side: heartbeats, dequeues, resources (none published yet, then by id), spans exported
 * as OTLP protobuf while the agent runs, reward spans with ids from `/spans/next`, `SpanCoreFields` and
 * SDK spans handed back, `update_attempt` at the end, a failed attempt retried. Every request must get
 * upstream's status and a shape its pydantic models accept, and the algorithm must read back what the
 * runner stored.
 */
import { SpanStatusCode } from "@opentelemetry/api";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findFinalReward } from "../../src/adapter/reward.ts";
import { LightningStoreClient } from "../../src/client/index.ts";
import type { Span } from "../../src/types/index.ts";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { RUNTIMES } from "../runtimes.ts";
import { UpstreamStoreClient, type Exchange } from "./upstream-client.ts";
import { OTLP_EXPORTER_HEADERS, UpstreamRunner, childOf, untracedSpans, type Agent } from "./upstream-runner.ts";

const TOKEN = "runner-token";
const REWARD_ATTRS = (value: number) => ({ "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value });

/** The agent: what it does depends on the task's `kind`. */
const agent: Agent = ({ input, rollout, tracer }) => {
  const { kind } = input as { kind: string };
  switch (kind) {
    case "traced-float": {
      // Spans ended inside the trace context reach the store as OTLP right away; the float becomes a reward span.
      const root = tracer.startSpan("agent.run", { attributes: { "agentlightning.operation.name": "solve" } });
      const llm = childOf(tracer, root, "openai.chat.completion", { "gen_ai.system": "openai", "gen_ai.usage.completion_tokens": 7 });
      llm.addEvent("first_token", { index: 0 });
      llm.setStatus({ code: SpanStatusCode.OK });
      llm.end();
      root.end();
      return 0.5;
    }
    case "emitted-reward": {
      // `emit_reward(1.0)` inside the trace: OtelTracer.create_span, status OK, exported like any span.
      const span = tracer.startSpan("agentlightning.annotation", { attributes: REWARD_ATTRS(1) });
      span.setStatus({ code: SpanStatusCode.OK });
      span.end();
      return null;
    }
    case "core-fields":
      return {
        coreFields: [
          { name: "tool.search", attributes: { query: "capital of France" } },
          { name: "agentlightning.annotation", attributes: REWARD_ATTRS(0.25) },
        ],
      };
    case "sdk-spans":
      return {
        otelSpans: untracedSpans((t) => {
          const root = t.startSpan("workflow");
          childOf(t, root, "step", { i: 1 }).end();
          root.end();
        }),
      };
    case "flaky":
      if (rollout.attempt.sequence_id === 1) throw new Error("the environment crashed");
      return 1;
    default:
      throw new Error(`unknown task ${kind}`);
  }
};

/** Upstream's status for a successful call: 201 for the creating routes, 200 otherwise (OTLP included). */
function upstreamStatus(e: Exchange): number {
  const path = e.request.url.split("?")[0]!.replace(/^\/v1\/agl/, "");
  return e.request.method === "POST" && /^\/(rollouts|queues\/rollouts\/enqueue|rollouts\/[^/]+\/attempts|resources|spans)$/.test(path)
    ? 201
    : 200;
}

describe.each(RUNTIMES)("upstream's Python runner loop against the %s server", (runtime) => {
  let server: ServerProcess;
  let py: UpstreamStoreClient;
  let runner: UpstreamRunner;
  let algorithm: LightningStoreClient;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    server = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--log-level", "warning", "--token", TOKEN]);
    py = new UpstreamStoreClient(server.url, { authorization: `Bearer ${TOKEN}` });
    runner = new UpstreamRunner(py, agent, { workerId: 0, serverAddress: server.url, otlpHeaders: { authorization: `Bearer ${TOKEN}` } });
    algorithm = new LightningStoreClient(server.url, { token: TOKEN, retryDelays: [], healthRetryDelays: [] });
  }, 90_000);
  afterAll(async () => {
    await algorithm.close();
    expect(await server.stop("SIGTERM")).toBe(0);
  });

  it("starts: a heartbeat, then an empty queue", async () => {
    expect(await runner.heartbeat()).toMatchObject({
      worker_id: "Worker-0",
      status: "unknown",
      heartbeat_stats: { host: "runner-host", cpu_cores: 8 },
    });
    expect(await runner.iterUntilQueueEmpty()).toEqual([]);
    expect(py.exchanges.at(-1)!.answer).toMatchObject({ status: 200, text: "[]" });
  });

  it("a rollout claimed before any resources exist is skipped after a 200 null, without an exception", async () => {
    const early = await algorithm.enqueueRollout({ kind: "traced-float" });
    ids.early = early.rollout_id;
    expect(await runner.iterUntilQueueEmpty()).toEqual([early.rollout_id]);
    const lookup = py.exchanges.find((e) => e.method === "get_latest_resources")!;
    expect([lookup.request.url, lookup.answer.status, lookup.answer.text]).toEqual(["/v1/agl/resources/latest", 200, "null"]);
    expect(runner.errors).toEqual([`[Worker 0 | Rollout ${early.rollout_id}] Failed to fetch resources. Skipping.`]);
    expect(await algorithm.getLatestAttempt(early.rollout_id)).toMatchObject({ status: "preparing", worker_id: "Worker-0" });
  });

  it("runs a batch: OTLP spans while the agent runs, rewards, SpanCoreFields, SDK spans, a failed attempt retried", async () => {
    runner.errors.length = 0;
    const res = await algorithm.addResources({ main_llm: { resource_type: "llm", endpoint: "http://vllm:8000/v1", model: "qwen" } });
    const kinds = ["traced-float", "emitted-reward", "core-fields", "sdk-spans", "flaky"];
    const rollouts = await algorithm.enqueueManyRollouts(
      kinds.map((kind) => ({
        input: { kind },
        mode: "train" as const,
        ...(kind === "flaky" ? { config: { max_attempts: 2, retry_condition: ["failed" as const] } } : {}),
      })),
    );
    kinds.forEach((k, i) => (ids[k] = rollouts[i]!.rollout_id));
    expect(rollouts.every((r) => r.resources_id === res.resources_id)).toBe(true);

    const processed = await runner.iterUntilQueueEmpty();
    // The failed attempt went back to the queue and came out again as attempt 2.
    expect(processed).toEqual([...rollouts.map((r) => r.rollout_id), ids.flaky]);
    expect(runner.errors).toEqual([`[Worker 0 | Rollout ${ids.flaky}] Exception during rollout: Error: the environment crashed`]);
    await runner.heartbeat();

    const finished = await algorithm.waitForRollouts({ rollout_ids: rollouts.map((r) => r.rollout_id), timeout: 30 });
    expect(finished.map((r) => [r.input, r.status])).toEqual(kinds.map((kind) => [{ kind }, "succeeded"]));
    expect((await algorithm.queryAttempts(ids.flaky!)).items.map((a) => [a.sequence_id, a.status, a.worker_id])).toEqual([
      [1, "failed", "Worker-0"],
      [2, "succeeded", "Worker-0"],
    ]);
  });

  it("the requests of one rollout come in upstream's order", () => {
    const start = py.exchanges.findIndex(
      (e) => e.method === "dequeue_rollout" && (e.answer.json as { rollout_id: string }[])[0]?.rollout_id === ids["traced-float"],
    );
    const end = py.exchanges.findIndex((e, i) => i > start && e.method === "dequeue_rollout");
    expect(py.exchanges.slice(start, end).map((e) => e.method)).toEqual([
      "dequeue_rollout",
      "get_resources_by_id",
      "otlp_export", // openai.chat.completion ends first
      "otlp_export", // agent.run
      "get_next_span_sequence_id",
      "add_span",
      "update_attempt",
    ]);
    const core = py.exchanges.findIndex(
      (e) => e.method === "dequeue_rollout" && (e.answer.json as { rollout_id: string }[])[0]?.rollout_id === ids["core-fields"],
    );
    expect(py.exchanges.slice(core, core + 7).map((e) => [e.method, e.request.url.replace(/\/[a-z]{2}-[0-9a-f]+/g, "/{id}")])).toEqual([
      ["dequeue_rollout", "/v1/agl/queues/rollouts/dequeue"],
      ["get_resources_by_id", "/v1/agl/resources/{id}"],
      ["get_many_span_sequence_ids", "/v1/agl/spans/next"],
      ["get_many_span_sequence_ids", "/v1/agl/spans/next"],
      ["add_many_spans", "/v1/agl/spans"],
      ["add_many_spans", "/v1/agl/spans"],
      ["update_attempt", "/v1/agl/rollouts/{id}/attempts/{id}"],
    ]);
  });

  it("the algorithm reads back every span with its sequence id, parent, resource and reward", async () => {
    const spans = async (rid: string, attempt?: string): Promise<Span[]> =>
      (await algorithm.querySpans(rid, attempt ? { attempt_id: attempt } : {})).items;
    const traced = await spans(ids["traced-float"]!);
    expect(traced.map((s) => [s.sequence_id, s.name])).toEqual([
      [1, "openai.chat.completion"],
      [2, "agent.run"],
      [3, "agentlightning.annotation"],
    ]);
    expect(traced[0]).toMatchObject({
      parent_id: traced[1]!.span_id,
      status: { status_code: "OK" },
      events: [{ name: "first_token", attributes: { index: 0 } }],
    });
    expect(traced[0]!.resource.attributes).toMatchObject({
      "telemetry.sdk.language": "python",
      "agentlightning.rollout_id": ids["traced-float"],
      "service.name": "unknown_service",
    });
    expect(findFinalReward(traced)).toBe(0.5);
    const emitted = await spans(ids["emitted-reward"]!);
    expect([emitted.map((s) => s.sequence_id), findFinalReward(emitted)]).toEqual([[1], 1]);
    const core = await spans(ids["core-fields"]!);
    expect([core.map((s) => [s.sequence_id, s.name]), findFinalReward(core)]).toEqual([
      [
        [1, "tool.search"],
        [2, "agentlightning.annotation"],
      ],
      0.25,
    ]);
    const sdk = await spans(ids["sdk-spans"]!);
    expect(sdk.map((s) => [s.sequence_id, s.name])).toEqual([
      [1, "step"],
      [2, "workflow"],
    ]);
    expect(sdk[0]!.parent_id).toBe(sdk[1]!.span_id);
    expect(findFinalReward(await spans(ids.flaky!, "latest"))).toBe(1);
    expect(await spans(ids.early!)).toEqual([]);

    // What upstream's client reads back validates against its pydantic models (query_spans checks each item).
    for (const kind of ["traced-float", "emitted-reward", "core-fields", "sdk-spans", "flaky"]) await py.query_spans(ids[kind]!);
  });

  it("the worker shows its heartbeats, claims and final idle state", async () => {
    const w = await py.get_worker_by_id("Worker-0");
    expect(w).toMatchObject({ status: "idle", heartbeat_stats: { host: "runner-host" }, current_rollout_id: null });
    expect([w!.last_heartbeat_time, w!.last_dequeue_time, w!.last_idle_time, w!.last_busy_time].every((t) => typeof t === "number")).toBe(
      true,
    );
  });

  it("every answer had upstream's status; OTLP answers were empty protobuf", () => {
    const wrong = py.exchanges.filter((e) => e.answer.status !== upstreamStatus(e));
    expect(wrong.map((e) => `${e.method} ${e.request.url} -> ${e.answer.status} ${e.answer.text}`)).toEqual([]);
    const otlp = py.exchanges.filter((e) => e.method === "otlp_export");
    expect(otlp).toHaveLength(3);
    for (const e of otlp) {
      expect(e.request.headers).toMatchObject(OTLP_EXPORTER_HEADERS);
      // requests asked for gzip, so the empty ExportTraceServiceResponse comes gzipped; it decodes to zero bytes.
      expect([e.answer.status, e.answer.contentType, e.answer.json, e.answer.text]).toEqual([200, "application/x-protobuf", "gzip", ""]);
    }
    expect(py.exchanges.filter((e) => e.method !== "otlp_export").every((e) => e.answer.contentType.startsWith("application/json"))).toBe(
      true,
    );
  });
});

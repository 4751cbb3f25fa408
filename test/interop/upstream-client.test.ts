/**
 * Upstream's Python `LightningStoreClient` (v0.3.0) against our store server under Node, Deno and Bun:
 * every client method is replayed with the exact request Python sends (upstream-client.ts), and every
 * answer must have the status upstream's server gives and a shape its pydantic models accept
 * (upstream-models.ts). The servers run with `--token`; the replayed client sends the header a Python
 * user adds to the aiohttp session (docs/python-interop.md).
 */
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServerProcess, type ServerProcess } from "../server/processes.ts";
import { RUNTIMES } from "../runtimes.ts";
import { pyFloat } from "./python-json.ts";
import { AIOHTTP_HEADERS, UPSTREAM_CLIENT_METHODS, UpstreamStoreClient, type Exchange } from "./upstream-client.ts";
import { hexId, rewardSpan, spanFromCoreFields, spanFromOpenTelemetry } from "./upstream-spans.ts";

const TOKEN = "interop-token";

/** The status upstream's FastAPI routes answer with on success: 201 for the five creating routes, else 200. */
function upstreamStatus(e: Exchange): number {
  const path = e.request.url.split("?")[0]!.replace(/^\/v1\/agl/, "");
  const creates =
    e.request.method === "POST" && /^\/(rollouts|queues\/rollouts\/enqueue|rollouts\/[^/]+\/attempts|resources|spans)$/.test(path);
  return creates ? 201 : 200;
}

const nowSeconds = () => Date.now() / 1000;
const lastBody = (py: UpstreamStoreClient) => py.exchanges.at(-1)!.request.body;

describe.each(RUNTIMES)("upstream's Python LightningStoreClient against the %s server", (runtime) => {
  let server: ServerProcess;
  let py: UpstreamStoreClient;
  /** Ids shared by the steps below, which run in order on one store. */
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    server = await startServerProcess(runtime, ["--port", "0", "--db", "memory", "--log-level", "warning", "--token", TOKEN]);
    py = new UpstreamStoreClient(server.url, { authorization: `Bearer ${TOKEN}` });
  }, 90_000);
  afterAll(async () => {
    expect(await server.stop("SIGTERM")).toBe(0);
  });

  it("lookups on an empty store answer 200 null, so no Python lookup raises or logs a traceback (docs/departures.md#2)", async () => {
    expect(await py.health()).toEqual({ status: "ok" });
    expect(await py.statistics()).toMatchObject({ total_rollouts: 0, total_resources: 0 });
    expect(await py.get_latest_resources()).toBeNull();
    expect(await py.get_resources_by_id("rs-000000000000")).toBeNull();
    expect(await py.get_rollout_by_id("ro-000000000000")).toBeNull();
    expect(await py.get_latest_attempt("ro-000000000000")).toBeNull();
    expect(await py.get_worker_by_id("Worker-0")).toBeNull();
    const lookups = py.exchanges.slice(2);
    expect(lookups.map((e) => [e.request.url, e.answer.status, e.answer.text])).toEqual(lookups.map((e) => [e.request.url, 200, "null"]));
  });

  it("resources: add, update in place, query with yarl-encoded parameters, look up", async () => {
    const first = await py.add_resources({
      main_llm: {
        resource_type: "llm",
        endpoint: "http://llm:8000/v1",
        model: "qwen",
        sampling_parameters: { temperature: pyFloat(0.7), max_tokens: 100 },
      },
      system_prompt: { resource_type: "prompt_template", template: "You are {role}.", engine: "f-string" },
    });
    expect(lastBody(py)).toBe(
      '{"main_llm": {"resource_type": "llm", "endpoint": "http://llm:8000/v1", "model": "qwen", "api_key": null, "sampling_parameters": {"temperature": 0.7, "max_tokens": 100}}, ' +
        '"system_prompt": {"resource_type": "prompt_template", "template": "You are {role}.", "engine": "f-string"}}',
    );
    expect(first).toMatchObject({
      version: 1,
      resources: { main_llm: { model: "qwen", api_key: null }, system_prompt: { engine: "f-string" } },
    });
    expect(first.create_time).toBe(first.update_time);
    expect(Math.abs(first.create_time - nowSeconds())).toBeLessThan(600);
    const updated = await py.update_resources(first.resources_id, {
      main_llm: { resource_type: "proxy_llm", endpoint: "http://proxy/v1", model: "qwen" },
    });
    expect(updated).toMatchObject({ resources_id: first.resources_id, version: 2, create_time: first.create_time });
    // An id with characters yarl escapes differently in a path and in a query (update_resources of an unknown id inserts it).
    const odd = "rs-a b:c@d+e";
    expect(await py.update_resources(odd, {})).toMatchObject({ resources_id: odd, version: 1, resources: {} });
    expect(py.exchanges.at(-1)!.request.url).toBe("/v1/agl/resources/rs-a%20b:c@d+e");
    const second = await py.add_resources({ judge: { resource_type: "llm", endpoint: "http://judge/v1", model: "j" } });
    ids.latestResources = second.resources_id;

    const all = await py.query_resources();
    expect(py.exchanges.at(-1)!.request.url).toBe("/v1/agl/resources?limit=-1&offset=0");
    expect(all.items.map((r) => r.resources_id)).toEqual([first.resources_id, odd, second.resources_id]);
    expect(all.total).toBe(3);
    const sorted = await py.query_resources({ sort_by: "version", sort_order: "desc", resources_id_contains: "rs-" });
    expect(py.exchanges.at(-1)!.request.url).toBe(
      "/v1/agl/resources?limit=-1&offset=0&sort_by=version&sort_order=desc&resources_id_contains=rs-",
    );
    expect(sorted.items.map((r) => r.version)).toEqual([2, 1, 1]);
    expect((await py.query_resources({ resources_id: first.resources_id, limit: 1 })).items).toHaveLength(1);
    expect((await py.query_resources({ resources_id: odd })).items.map((r) => r.resources_id)).toEqual([odd]);
    expect(py.exchanges.at(-1)!.request.url).toBe("/v1/agl/resources?limit=-1&offset=0&resources_id=rs-a+b:c@d%2Be");
    expect(await py.get_resources_by_id(odd)).toMatchObject({ resources_id: odd });

    expect(await py.get_resources_by_id(first.resources_id)).toMatchObject({ version: 2 });
    expect(await py.get_latest_resources()).toMatchObject({ resources_id: second.resources_id });
  });

  it("rollouts: enqueue, enqueue many, dequeue with and without a worker, start, query, look up", async () => {
    const a = await py.enqueue_rollout(
      { question: "1+1" },
      { mode: "train", config: { timeout_seconds: 30, max_attempts: 2, retry_condition: ["failed"] }, metadata: { source: "py" } },
    );
    expect(lastBody(py)).toBe(
      '{"rollouts": [{"input": {"question": "1+1"}, "mode": "train", "resources_id": null, ' +
        '"config": {"timeout_seconds": 30.0, "unresponsive_seconds": null, "max_attempts": 2, "retry_condition": ["failed"]}, "metadata": {"source": "py"}}]}',
    );
    expect(a).toMatchObject({
      status: "queuing",
      mode: "train",
      resources_id: ids.latestResources,
      config: { timeout_seconds: 30, max_attempts: 2 },
      metadata: { source: "py" },
    });
    expect(a).not.toHaveProperty("attempt");
    const [b, c] = await py.enqueue_many_rollouts([{ input: 2 }, { input: 3, mode: "val" }]);
    expect(lastBody(py)).toBe(
      '{"rollouts": [{"input": 2, "mode": null, "resources_id": null, "config": null, "metadata": null}, {"input": 3, "mode": "val", "resources_id": null, "config": null, "metadata": null}]}',
    );
    const sent = py.exchanges.length;
    expect(await py.enqueue_many_rollouts([])).toEqual([]);
    expect(await py.dequeue_many_rollouts({ limit: 0 })).toEqual([]);
    expect(py.exchanges.length, "no request for an empty batch or limit 0").toBe(sent);

    const claimed = await py.dequeue_rollout("Worker-0");
    expect(lastBody(py)).toBe('{"limit": 1, "worker_id": "Worker-0"}');
    expect(claimed).toMatchObject({
      rollout_id: a.rollout_id,
      status: "preparing",
      attempt: { sequence_id: 1, status: "preparing", worker_id: "Worker-0" },
    });
    const many = await py.dequeue_many_rollouts({ limit: 2 });
    expect(lastBody(py)).toBe('{"limit": 2}');
    expect(many.map((r) => [r.rollout_id, r.attempt.worker_id])).toEqual([
      [b!.rollout_id, null],
      [c!.rollout_id, null],
    ]);
    expect(await py.dequeue_rollout("Worker-0")).toBeNull();

    const d = await py.start_rollout({ q: 4 }, { worker_id: "Worker-1" });
    expect(lastBody(py)).toBe(
      '{"input": {"q": 4}, "mode": null, "resources_id": null, "config": null, "metadata": null, "worker_id": "Worker-1"}',
    );
    expect(d).toMatchObject({ status: "preparing", attempt: { worker_id: "Worker-1", sequence_id: 1 } });
    const e = await py.enqueue_rollout(5);
    Object.assign(ids, {
      a: a.rollout_id,
      aAttempt: claimed!.attempt.attempt_id,
      b: b!.rollout_id,
      c: c!.rollout_id,
      d: d.rollout_id,
      e: e.rollout_id,
    });

    const plain = await py.get_rollout_by_id(e.rollout_id);
    expect(plain).not.toHaveProperty("attempt");
    expect(await py.get_rollout_by_id(a.rollout_id)).toMatchObject({ attempt: { attempt_id: claimed!.attempt.attempt_id } });

    const preparing = await py.query_rollouts({ status_in: ["preparing"], sort_by: "start_time", sort_order: "desc", limit: 2 });
    expect(lastBody(py)).toBe(
      '{"limit": 2, "offset": 0, "status_in": ["preparing"], "filter_logic": "and", "sort_by": "start_time", "sort_order": "desc"}',
    );
    expect([preparing.items.length, preparing.total, preparing.limit, preparing.offset]).toEqual([2, 4, 2, 0]);
    expect(preparing.items[0]).toMatchObject({ rollout_id: d.rollout_id });
    const queued = await py.query_rollouts({ status: ["queuing"] });
    expect(lastBody(py)).toBe('{"limit": -1, "offset": 0, "status_in": ["queuing"], "filter_logic": "and"}');
    expect(queued.items.map((r) => r.rollout_id)).toEqual([e.rollout_id]);
    const either = await py.query_rollouts({
      rollout_id_in: [a.rollout_id],
      rollout_id_contains: e.rollout_id.slice(3),
      filter_logic: "or",
    });
    expect(new Set(either.items.map((r) => r.rollout_id))).toEqual(new Set([a.rollout_id, e.rollout_id]));
    const everything = await py.query_rollouts();
    expect(everything.total).toBe(5);
  });

  it("attempts: start with and without a worker, query, update (status, heartbeat time, metadata), latest", async () => {
    const second = await py.start_attempt(ids.b!);
    expect(py.exchanges.at(-1)!.request).toMatchObject({ method: "POST", url: `/v1/agl/rollouts/${ids.b}/attempts` });
    expect(lastBody(py)).toBeUndefined();
    expect(second.attempt.sequence_id).toBe(2);
    const third = await py.start_attempt(ids.c!, "Worker-2");
    expect(lastBody(py)).toBe('{"worker_id": "Worker-2"}');
    expect(third.attempt).toMatchObject({ worker_id: "Worker-2", sequence_id: 2 });

    const attempts = await py.query_attempts(ids.b!);
    expect(lastBody(py)).toBe('{"limit": -1, "offset": 0, "sort_by": "sequence_id", "sort_order": "asc"}');
    expect(attempts.items.map((x) => x.sequence_id)).toEqual([1, 2]);
    await py.query_attempts(ids.b!, { sort_by: null });
    expect(lastBody(py)).toBe('{"limit": -1, "offset": 0}');
    expect((await py.query_attempts(ids.b!, { sort_order: "desc", limit: 1 })).items.map((x) => x.sequence_id)).toEqual([2]);
    expect(await py.get_latest_attempt(ids.b!)).toMatchObject({ attempt_id: second.attempt.attempt_id, sequence_id: 2 });

    const beat = Math.floor(nowSeconds());
    const running = await py.update_attempt(ids.a!, ids.aAttempt!, { status: "running", last_heartbeat_time: beat, metadata: { step: 1 } });
    expect(lastBody(py)).toBe(`{"status": "running", "last_heartbeat_time": ${beat}.0, "metadata": {"step": 1}}`);
    expect(running).toMatchObject({ status: "running", last_heartbeat_time: beat, metadata: { step: 1 }, end_time: null });
    const done = await py.update_attempt(ids.a!, "latest", { status: "succeeded" });
    expect(lastBody(py)).toBe('{"status": "succeeded"}');
    expect(done.end_time).toEqual(expect.any(Number));
    expect(await py.update_attempt(ids.b!, "latest", { worker_id: "Worker-2" })).toMatchObject({ worker_id: "Worker-2" });
    expect(await py.get_rollout_by_id(ids.a!)).toMatchObject({ status: "succeeded" });
  });

  it("spans: sequence ids, add_span (a duplicate answers 201 null), add_many_spans, add_otel_span, extra fields kept, query_spans", async () => {
    const d = (await py.get_rollout_by_id(ids.d!))!;
    const [rid, aid] = [d.rollout_id, d.attempt!.attempt_id];
    expect(await py.get_next_span_sequence_id(rid, aid)).toBe(1);
    expect(lastBody(py)).toBe(`{"rollout_id": "${rid}", "attempt_id": "${aid}"}`);
    const reward = rewardSpan({ rollout_id: rid, attempt_id: aid, sequence_id: 1, reward: 1, time: nowSeconds() });
    const stored = await py.add_span(reward);
    expect(lastBody(py)).toContain('"attributes": {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.0}');
    expect(stored).toMatchObject({
      sequence_id: 1,
      span_id: reward.span_id,
      name: "agentlightning.annotation",
      attributes: { "agentlightning.reward.0.value": 1 },
    });
    expect(await py.add_span(reward)).toBeNull();
    expect(py.exchanges.at(-1)!.answer).toMatchObject({ status: 201, text: "null" });

    expect(
      await py.get_many_span_sequence_ids([
        [rid, aid],
        [rid, aid],
      ]),
    ).toEqual([2, 3]);
    const core = [2, 3].map((seq) =>
      spanFromCoreFields({
        rollout_id: rid,
        attempt_id: aid,
        sequence_id: seq,
        name: `tool.${seq}`,
        attributes: { n: seq, tags: ["a", "b"] },
        time: nowSeconds(),
      }),
    );
    expect((await py.add_many_spans(core)).map((s) => s.sequence_id)).toEqual([2, 3]);

    const traceId = hexId(16);
    const start = BigInt(Date.now()) * 1_000_000n;
    const otel = await py.add_otel_span(rid, aid, (seq) =>
      spanFromOpenTelemetry({
        rollout_id: rid,
        attempt_id: aid,
        sequence_id: seq,
        name: "openai.chat",
        trace_id: traceId,
        span_id: hexId(8),
        parent_span_id: core[0]!.span_id as string,
        attributes: { "gen_ai.system": "openai", "gen_ai.usage.prompt_tokens": 12 },
        start_ns: start,
        end_ns: start + 5_000_000n,
        events: [{ name: "first_token", attributes: { index: 0 }, time_ns: start + 1_000_000n }],
      }),
    );
    expect(otel).toMatchObject({
      sequence_id: 4,
      parent_id: core[0]!.span_id,
      events: [{ name: "first_token" }],
      resource: { attributes: { "telemetry.sdk.language": "python" } },
    });

    const extra = {
      ...spanFromCoreFields({ rollout_id: rid, attempt_id: aid, sequence_id: 10, name: "custom", attributes: {}, time: nowSeconds() }),
      kind: "SpanKind.INTERNAL",
    };
    expect(await py.add_span(extra)).toMatchObject({ sequence_id: 10, kind: "SpanKind.INTERNAL" });
    expect(await py.get_next_span_sequence_id(rid, aid)).toBe(11);

    const spans = await py.query_spans(rid);
    expect(lastBody(py)).toBe(
      `{"rollout_id": "${rid}", "limit": -1, "offset": 0, "filter_logic": "and", "sort_by": "sequence_id", "sort_order": "asc"}`,
    );
    expect(spans.items.map((s) => s.sequence_id)).toEqual([1, 2, 3, 4, 10]);
    expect(spans.items[4]).toMatchObject({ kind: "SpanKind.INTERNAL" });
    expect(spans.items.every((s) => Math.abs(s.start_time! - nowSeconds()) < 600)).toBe(true);
    const rewards = await py.query_spans(rid, "latest", { name_contains: "annotation", sort_by: null });
    expect(lastBody(py)).toBe(
      `{"rollout_id": "${rid}", "limit": -1, "offset": 0, "attempt_id": "latest", "name_contains": "annotation", "filter_logic": "and"}`,
    );
    expect(rewards.items.map((s) => s.span_id)).toEqual([reward.span_id]);
    // A span is a heartbeat: the attempt and the rollout are running now.
    expect(await py.get_latest_attempt(rid)).toMatchObject({ status: "running" });
  });

  it("rollouts updated (given keys only, nulls kept) and waited for", async () => {
    const cancelled = await py.update_rollout(ids.c!, { status: "cancelled" });
    expect(lastBody(py)).toBe('{"status": "cancelled"}');
    expect(cancelled).toMatchObject({ status: "cancelled", end_time: expect.any(Number) });
    const edited = await py.update_rollout(ids.e!, { input: { q: 5 }, mode: null, config: { max_attempts: 3 }, metadata: { note: "x" } });
    expect(lastBody(py)).toBe(
      '{"input": {"q": 5}, "mode": null, "config": {"timeout_seconds": null, "unresponsive_seconds": null, "max_attempts": 3, "retry_condition": []}, "metadata": {"note": "x"}}',
    );
    expect(edited).toMatchObject({ input: { q: 5 }, mode: null, config: { max_attempts: 3 }, metadata: { note: "x" }, status: "queuing" });

    const finished = await py.wait_for_rollouts([ids.a!, ids.c!, ids.d!], 0.1);
    expect(lastBody(py)).toBe(`{"rollout_ids": ["${ids.a}", "${ids.c}", "${ids.d}"], "timeout": 0.1}`);
    expect(finished.map((r) => [r.rollout_id, r.status])).toEqual([
      [ids.a, "succeeded"],
      [ids.c, "cancelled"],
    ]);
    expect((await py.wait_for_rollouts([ids.a!], null)).map((r) => r.rollout_id)).toEqual([ids.a]);
    expect(lastBody(py)).toBe(`{"rollout_ids": ["${ids.a}"], "timeout": null}`);
  });

  it("workers: heartbeats with and without stats, query without limit/offset, look up", async () => {
    const stats = {
      timestamp: "2026-01-01T00:00:00",
      host: "gpu-3",
      cpu_usage_pct: pyFloat(12.5),
      mem_used_gb: pyFloat(3.21),
      disk_pct: pyFloat(40),
    };
    const w0 = await py.update_worker("Worker-0", stats);
    expect(lastBody(py)).toBe(
      '{"heartbeat_stats": {"timestamp": "2026-01-01T00:00:00", "host": "gpu-3", "cpu_usage_pct": 12.5, "mem_used_gb": 3.21, "disk_pct": 40.0}}',
    );
    expect(w0).toMatchObject({
      worker_id: "Worker-0",
      status: "idle",
      heartbeat_stats: { host: "gpu-3", disk_pct: 40 },
      last_heartbeat_time: expect.any(Number),
    });
    const w9 = await py.update_worker("Worker-9");
    expect(lastBody(py)).toBeUndefined();
    expect(py.exchanges.at(-1)!.request.headers["content-type"]).toBeUndefined();
    expect(w9).toMatchObject({ status: "unknown", heartbeat_stats: null });

    const some = await py.query_workers({ status_in: ["busy", "unknown"], worker_id_contains: "Worker" });
    expect(lastBody(py)).toBe('{"status_in": ["busy", "unknown"], "worker_id_contains": "Worker", "filter_logic": "and"}');
    expect(new Set(some.items.map((w) => w.worker_id))).toEqual(new Set(["Worker-1", "Worker-2", "Worker-9"]));
    const all = await py.query_workers({ sort_by: "worker_id" });
    expect(all.items.map((w) => w.worker_id)).toEqual(["Worker-0", "Worker-1", "Worker-2", "Worker-9"]);
    expect(await py.get_worker_by_id("Worker-0")).toMatchObject({ status: "idle", heartbeat_stats: { host: "gpu-3" } });
    expect(await py.statistics()).toMatchObject({
      total_rollouts: 5,
      total_attempts: 6,
      total_spans: 5,
      total_resources: 3,
      total_workers: 4,
    });
  });

  it("without the bearer token every route but /health answers 401 JSON", async () => {
    const get = (path: string) => request(`${server.url}/v1/agl${path}`, { headers: { ...AIOHTTP_HEADERS } });
    const denied = await get("/rollouts/ro-000000000000");
    expect(denied.statusCode).toBe(401);
    expect(await denied.body.json()).toMatchObject({ error_type: "Unauthorized" });
    const health = await get("/health");
    expect(health.statusCode).toBe(200);
    await health.body.dump();
  });

  it("every method of the client was replayed, each answer with upstream's status and JSON content type", () => {
    expect(UPSTREAM_CLIENT_METHODS.filter((m) => !py.called().has(m))).toEqual([]);
    const unexpected = py.exchanges.filter(
      (e) => e.answer.status !== upstreamStatus(e) || !e.answer.contentType.startsWith("application/json"),
    );
    expect(unexpected.map((e) => `${e.request.method} ${e.request.url} -> ${e.answer.status} ${e.answer.contentType}`)).toEqual([]);
    // aiohttp's headers on every request; a JSON content type exactly when there is a body.
    for (const e of py.exchanges) {
      expect(e.request.headers).toMatchObject({ ...AIOHTTP_HEADERS, authorization: `Bearer ${TOKEN}` });
      expect(e.request.headers["content-type"]).toBe(e.request.body === undefined ? undefined : "application/json");
    }
  });
});

/**
 * The dashboard's server side, in process: its files (types, ETags, CSP, no token), `dashboard: false`,
 * and the API routes added for it (rollout counts, `mode_in`, triplets, training runs, server health),
 * with their 4xx answers.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createStoreApp } from "../../src/server/index.ts";
import { parseStoreArgs } from "../../src/cli/store.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { spanFromAttributes } from "../../src/types/span.ts";
import { DASHBOARD_ASSETS } from "../../src/server/dashboard/assets.generated.ts";
import { TrainingRunIndex } from "../../src/server/dashboard/api.ts";
import { BookkeepingRollout } from "../../src/algorithm/bookkeeping.ts";

const TOKEN = "s3cret-dashboard-token";

describe("dashboard files", () => {
  const store = new InMemoryLightningStore();
  const app = createStoreApp(store, { token: TOKEN });
  afterAll(() => store.close());

  it("serves index.html at / without the token, with a strict CSP and no token in it", async () => {
    const res = await app.request("/");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(res.headers.get("content-security-policy")).toMatch(/script-src 'self' 'sha256-[A-Za-z0-9+/=]+'/);
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    const body = await res.text();
    expect(body).toContain('<div id="app">');
    expect(body).not.toContain(TOKEN);
  });

  it("serves every asset with its content type and ETag, and 304 when the ETag matches", async () => {
    const types: Record<string, string> = {};
    for (const name of Object.keys(DASHBOARD_ASSETS).filter((n) => n !== "index.html")) {
      const res = await app.request(`/dashboard/${name}`);
      expect(res.status, name).toBe(200);
      types[name] = res.headers.get("content-type")!;
      const again = await app.request(`/dashboard/${name}`, { headers: { "if-none-match": res.headers.get("etag")! } });
      expect(again.status, name).toBe(304);
      expect(await again.text()).toBe("");
    }
    expect(types).toMatchObject({
      "app.js": "text/javascript; charset=utf-8",
      "style.css": "text/css; charset=utf-8",
      "vendor/preact.mjs": "text/javascript; charset=utf-8",
      "vendor/uplot.mjs": "text/javascript; charset=utf-8",
    });
  });

  it("answers HEAD for the page, and 404 (not 401) for an unknown dashboard file", async () => {
    expect((await app.request("/", { method: "HEAD" })).status).toBe(200);
    expect((await app.request("/dashboard/nope.js")).status).toBe(401);
    const open = createStoreApp(store);
    const missing = await open.request("/dashboard/nope.js");
    expect(missing.status).toBe(404);
    expect((await open.request("/dashboard/index.html")).status).toBe(404);
  });

  it("keeps every API route behind the token", async () => {
    for (const path of ["/v1/agl/rollouts", "/v1/agl/statistics/rollouts", "/v1/agl/training/runs", "/v1/agl/server"]) {
      expect((await app.request(path)).status, path).toBe(401);
      expect((await app.request(path, { headers: { authorization: `Bearer ${TOKEN}` } })).status, path).toBe(200);
    }
  });

  it("is off with dashboard: false and with agl store --no-dashboard", async () => {
    const off = createStoreApp(store, { dashboard: false });
    expect((await off.request("/")).status).toBe(404);
    expect((await off.request("/dashboard/app.js")).status).toBe(404);
    // The API routes stay: other clients may use them.
    expect((await off.request("/v1/agl/statistics/rollouts")).status).toBe(200);
    expect(parseStoreArgs([]).dashboard).toBe(true);
    expect(parseStoreArgs(["--no-dashboard"]).dashboard).toBe(false);
  });
});

describe("dashboard API routes", () => {
  const store = new InMemoryLightningStore();
  const app = createStoreApp(store);
  const get = async (path: string) => {
    const res = await app.request(path);
    return { status: res.status, body: (await res.json()) as any };
  };
  let withSpans = "";
  let metricsRollout = "";

  beforeAll(async () => {
    await store.enqueueManyRollouts([
      { input: 1, mode: "train" },
      { input: 2, mode: "train" },
      { input: 3, mode: "val" },
      { input: 4, mode: null },
    ]);
    const [claimed] = await store.dequeueManyRollouts({ limit: 1, worker_id: "w1" });
    await store.updateAttempt(claimed!.rollout_id, claimed!.attempt.attempt_id, { status: "succeeded" });
    const r = await store.startRollout({ q: "hi" }, { mode: "val" });
    withSpans = r.rollout_id;
    const base = { rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, trace_id: "b".repeat(32) };
    await store.addManySpans([
      spanFromAttributes({ ...base, sequence_id: 1, span_id: "1", name: "agent", start_time: 1, end_time: 5 }),
      spanFromAttributes({
        ...base,
        sequence_id: 2,
        span_id: "2",
        parent_id: "1",
        name: "openai.chat.completion",
        start_time: 2,
        end_time: 3,
        attributes: {
          prompt_token_ids: [1, 2, 3],
          response_token_ids: [4],
          "gen_ai.prompt.0.role": "user",
          "gen_ai.prompt.0.content": "hi",
        },
      }),
      // What the policy server records for the same call (LlmProxyTraceToTriplet reads these).
      spanFromAttributes({
        ...base,
        sequence_id: 3,
        span_id: "p",
        parent_id: null,
        name: "litellm_request",
        start_time: 2,
        end_time: 3,
        attributes: { prompt_token_ids: [7, 8], response_token_ids: [9] },
      }),
      spanFromAttributes({
        ...base,
        sequence_id: 4,
        span_id: "3",
        parent_id: "1",
        name: "agentlightning.reward",
        start_time: 4,
        end_time: 4,
        attributes: { "agentlightning.reward.0.name": "r", "agentlightning.reward.0.value": 0.5 },
      }),
    ]);
    const m = await store.startRollout({ algorithm: "grpo" }, { metadata: { kind: "grpo-metrics" } });
    metricsRollout = m.rollout_id;
  });
  afterAll(() => store.close());

  it("GET /statistics/rollouts counts rollouts per status, within a mode filter", async () => {
    const all = await get("/v1/agl/statistics/rollouts");
    expect(all.status).toBe(200);
    expect(all.body.total).toBe(6);
    // The rollout with spans runs (its first span moved it on); the bookkeeping one is still preparing.
    expect(all.body.by_status).toEqual({ queuing: 3, preparing: 1, running: 1, succeeded: 1, failed: 0, cancelled: 0, requeuing: 0 });
    const val = await get("/v1/agl/statistics/rollouts?mode_in=val");
    expect(val.body).toMatchObject({ total: 2, by_status: { queuing: 1, running: 1 } });
    const trainOrVal = await get("/v1/agl/statistics/rollouts?mode_in=val&mode_in=train");
    expect(trainOrVal.body.total).toBe(4);
  });

  it("GET /rollouts takes mode_in (repeatable) with the other filters", async () => {
    const res = await get("/v1/agl/rollouts?mode_in=train&status_in=queuing");
    expect(res.body.items.map((r: { input: number }) => r.input)).toEqual([2]);
    expect((await get("/v1/agl/rollouts?mode_in=val")).body.total).toBe(2);
    const searched = await app.request("/v1/agl/rollouts/search", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ mode_in: ["train"], limit: 0 }),
    });
    expect(((await searched.json()) as { total: number }).total).toBe(2);
  });

  it("answers 400 with the issue path for bad filters", async () => {
    const bad = await get("/v1/agl/statistics/rollouts?mode_in=training");
    expect(bad.status).toBe(400);
    expect(bad.body.error_type).toBe("ValidationError");
    expect(bad.body.issues[0].path).toEqual(["mode_in", 0]);
    const unknown = await get("/v1/agl/statistics/rollouts?colour=red");
    expect(unknown.status).toBe(400);
    const badAdapter = await get(`/v1/agl/rollouts/${withSpans}/triplets?adapter=magic`);
    expect(badAdapter.status).toBe(400);
    expect(badAdapter.body.issues[0].path).toEqual(["adapter"]);
    const badMode = await get("/v1/agl/rollouts?mode_in=x");
    expect(badMode.status).toBe(400);
    expect(badMode.body.issues[0].path).toEqual(["mode_in", 0]);
  });

  it("GET /statistics/rewards gives each rollout's final reward, null without one, and refuses a bad list", async () => {
    const queued = (await store.queryRollouts({ status_in: ["queuing"], limit: 1 })).items[0]!.rollout_id;
    const res = await get(`/v1/agl/statistics/rewards?rollout_id_in=${withSpans}&rollout_id_in=${queued}&rollout_id_in=ro-nope`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ rewards: { [withSpans]: 0.5, [queued]: null, "ro-nope": null } });
    expect((await get("/v1/agl/statistics/rewards")).status).toBe(400);
    const tooMany = await get(`/v1/agl/statistics/rewards?${Array.from({ length: 201 }, (_, i) => `rollout_id_in=r${i}`).join("&")}`);
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.issues[0].path).toEqual(["rollout_id_in"]);
  });

  it("GET /rollouts/{id}/triplets runs the trace adapter on the server", async () => {
    const res = await get(`/v1/agl/rollouts/${withSpans}/triplets`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ adapter: "tracer", attempt_id: "latest", spans: 4, error: null });
    expect(res.body.triplets).toHaveLength(1);
    expect(res.body.triplets[0]).toMatchObject({ prompt: { token_ids: [1, 2, 3] }, response: { token_ids: [4] }, reward: 0.5 });
    // The proxy adapter reads the policy server's spans instead.
    const proxy = await get(`/v1/agl/rollouts/${withSpans}/triplets?adapter=proxy`);
    expect(proxy.body).toMatchObject({ adapter: "proxy", error: null });
    expect(proxy.body.triplets).toHaveLength(1);
    expect(proxy.body.triplets[0]).toMatchObject({ prompt: { token_ids: [7, 8] }, response: { token_ids: [9] }, reward: 0.5 });
    // Another attempt by id: this rollout has one, so an unknown attempt id has no spans.
    const other = await get(`/v1/agl/rollouts/${withSpans}/triplets?attempt_id=at-nope`);
    expect(other.body).toMatchObject({ attempt_id: "at-nope", spans: 0, triplets: [] });
    // No spans: no triplets; a trace the adapter refuses is reported, not a failed request.
    const empty = await get(`/v1/agl/rollouts/ro-unknown/triplets`);
    expect(empty.status).toBe(200);
    expect(empty.body.spans).toBe(0);
    expect(empty.body.triplets).toEqual([]);
  });

  it("GET /rollouts/{id}/triplets reports a trace the adapter refuses in `error`, with 200", async () => {
    const r = await store.startRollout({ q: "bad reward" });
    const base = { rollout_id: r.rollout_id, attempt_id: r.attempt.attempt_id, trace_id: "e".repeat(32) };
    await store.addManySpans([
      spanFromAttributes({
        ...base,
        sequence_id: 1,
        span_id: "1",
        name: "openai.chat.completion",
        start_time: 1,
        end_time: 2,
        attributes: { prompt_token_ids: [1], response_token_ids: [2] },
      }),
      spanFromAttributes({
        ...base,
        sequence_id: 2,
        span_id: "2",
        name: "agentlightning.reward",
        start_time: 3,
        end_time: 3,
        attributes: { "agentlightning.reward.0.name": "r", "agentlightning.reward.0.value": "lots" },
      }),
    ]);
    const res = await get(`/v1/agl/rollouts/${r.rollout_id}/triplets`);
    expect(res.status).toBe(200);
    expect(res.body.triplets).toEqual([]);
    expect(res.body.error).toMatch(/reward value must be a number/);
  });

  it("GET /training/runs lists the bookkeeping rollouts (metadata.kind ending in -metrics or -history), and finds new ones", async () => {
    const first = await get("/v1/agl/training/runs");
    expect(first.body.items.map((r: { rollout_id: string }) => r.rollout_id)).toEqual([metricsRollout]);
    expect(first.body.items[0]).toMatchObject({ kind: "grpo-metrics", status: "preparing", input: { algorithm: "grpo" } });
    const later = await store.startRollout({ algorithm: "apo" }, { metadata: { kind: "apo-history" } });
    await store.startRollout({ algorithm: "none" }, { metadata: { kind: "history-of-metrics-not" } });
    // Calls at the same time share one scan (and so agree).
    const [second, third] = await Promise.all([get("/v1/agl/training/runs"), get("/v1/agl/training/runs")]);
    expect(third.body).toEqual(second.body);
    expect(second.body.items.map((r: { kind: string }) => r.kind).sort()).toEqual(["apo-history", "grpo-metrics"]);
    expect(second.body.items.some((r: { rollout_id: string }) => r.rollout_id === later.rollout_id)).toBe(true);
  });

  it("lists the runs the algorithms' own bookkeeping rollouts start (GRPO, APO, SFT kinds)", async () => {
    const own = new InMemoryLightningStore();
    const runs = await Promise.all(
      ["grpo-metrics", "apo-history", "sft-metrics"].map((kind) => BookkeepingRollout.start(own, { algorithm: kind }, kind)),
    );
    await runs[0]!.record("grpo.step", { "grpo.step": 1, "grpo.reward": 0.5 });
    const listed = await new TrainingRunIndex(own).list();
    expect(listed.map((r) => r.kind).sort()).toEqual(["apo-history", "grpo-metrics", "sft-metrics"]);
    expect(new Set(listed.map((r) => r.rollout_id))).toEqual(new Set(runs.map((r) => r.rolloutId)));
    await own.close();
  });

  it("scans a store larger than one page once, even when asked twice at the same time", async () => {
    const big = new InMemoryLightningStore();
    await big.enqueueManyRollouts(Array.from({ length: 4_500 }, (_, i) => ({ input: i })));
    const run = await big.startRollout({ algorithm: "grpo" }, { metadata: { kind: "grpo-metrics" } });
    const index = new TrainingRunIndex(big);
    const [a, b] = await Promise.all([index.list(), index.list()]);
    expect(a.map((r) => r.rollout_id)).toEqual([run.rollout_id]);
    expect(b).toEqual(a);
    await big.close();
  });

  it("GET /server reports the runtime, uptime and the store's latency", async () => {
    const res = await get("/v1/agl/server");
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: "ok", runtime: expect.stringMatching(/^node /) });
    expect(res.body.uptime_seconds).toBeGreaterThanOrEqual(0);
    expect(res.body.store_latency_ms).toBeGreaterThanOrEqual(0);
    expect(typeof res.body.system).toBe("object");
    // Counted by the server's Prometheus counters: the 400s answered above are among them.
    expect(res.body.requests.total).toBeGreaterThan(10);
    expect(res.body.requests.client_errors).toBeGreaterThanOrEqual(4);
    expect(res.body.requests.server_errors).toBe(0);
    const quiet = createStoreApp(store, { metrics: false });
    expect(((await (await quiet.request("/v1/agl/server")).json()) as { requests: unknown }).requests).toBeNull();
  });
});

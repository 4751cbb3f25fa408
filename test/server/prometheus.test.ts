/**
 * The Prometheus exposition at upstream's path, read by a strict parser: the families and labels
 * upstream's Grafana dashboard queries, metrics written through the API in this process, and metrics
 * other processes push (bad pushes refused whole, with the field named).
 */
import { afterEach, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { MetricsRegistry, PrometheusMetricsBackend } from "../../src/metrics/index.ts";
import type { LogWriter, StoreAppOptions } from "../../src/server/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { parsePrometheusText, sampleValue, type Family } from "../metrics/prometheus-text.ts";
import { MAX_PUSHED_SERIES } from "../../src/server/routes/metrics.ts";
import { startInProcess, type InProcessServer } from "./in-process.ts";

let store: InMemoryLightningStore;
let server: InProcessServer;
let registry: MetricsRegistry;

async function start(options: StoreAppOptions = {}): Promise<void> {
  store = new InMemoryLightningStore({ scanDebounceSeconds: 0 });
  // A registry of this test's own, as the process's one is shared by every test in the file's worker.
  registry = new MetricsRegistry({ reservedPrefix: "agl_" });
  server = await startInProcess(store, { metricsRegistry: registry, ...options });
}
afterEach(async () => {
  await server.close();
  await store.close();
});

async function scrape(path = "/v1/agl/prometheus/", headers: Record<string, string> = {}): Promise<Map<string, Family>> {
  const res = await fetch(`${server.url}${path}`, { headers });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  return parsePrometheusText(await res.text());
}

const push = (body: unknown) =>
  fetch(`${server.url}/v1/agl/metrics/push`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

describe("GET /v1/agl/prometheus", () => {
  it("answers at upstream's scrape paths (its store server's, its exporter's), with and without the trailing slash, and at /metrics", async () => {
    await start();
    const paths = ["/v1/agl/prometheus/", "/v1/agl/prometheus", "/v1/prometheus/", "/v1/prometheus", "/metrics"];
    for (const path of paths) expect((await scrape(path)).get("agl_queue_depth")?.type).toBe("gauge");
  });

  it("has the families and labels upstream's Grafana dashboard reads", async () => {
    await start();
    const client = new LightningStoreClient(server.url);
    await client.enqueueRollout("a", { mode: "train" });
    await client.enqueueRollout("b");
    const a = (await client.dequeueRollout())!;
    const b = (await client.dequeueRollout())!;
    await client.updateAttempt(a.rollout_id, a.attempt.attempt_id, { status: "succeeded" });
    await client.updateAttempt(b.rollout_id, b.attempt.attempt_id, { status: "failed" });
    await client.close();

    // A finished rollout is counted once its change is stored (read back after the answer).
    await expect.poll(async () => sampleValue(await scrape(), "agl_rollouts_total", { status: "succeeded", mode: "train" })).toBe(1);
    const f = await scrape();
    expect(sampleValue(f, "agl_rollouts_total", { status: "failed", mode: "unknown" })).toBe(1);
    expect(sampleValue(f, "agl_rollouts_duration_count", { status: "succeeded", mode: "train" })).toBe(1);
    expect(f.get("agl_rollouts_duration")?.type).toBe("histogram");

    const labelsOf = (family: string, sample: string) =>
      new Set(
        f
          .get(family)!
          .samples.filter((s) => s.name === sample)
          .flatMap((s) => Object.keys(s.labels)),
      );
    // `sum by (method, path, status) (rate(agl_http_latency_count[15s]))` and the P50/P95/P99 of its buckets
    expect(f.get("agl_http_latency")?.type).toBe("histogram");
    expect(labelsOf("agl_http_latency", "agl_http_latency_count")).toEqual(new Set(["path", "method", "status"]));
    expect(sampleValue(f, "agl_http_latency_count", { path: "/v1/agl/queues/rollouts/dequeue", method: "POST", status: "200" })).toBe(2);
    expect(
      sampleValue(f, "agl_http_total", { path: "/v1/agl/rollouts/{rollout_id}/attempts/{attempt_id}", method: "POST", status: "200" }),
    ).toBe(2);
    // `sum by (method, status) (rate(agl_store_latency_count{status!="OK"}[15s]))`
    expect(f.get("agl_store_latency")?.type).toBe("histogram");
    expect(labelsOf("agl_store_latency", "agl_store_latency_count")).toEqual(new Set(["method", "store_pubmeth", "status"]));
    expect(sampleValue(f, "agl_store_total", { method: "updateAttempt", store_pubmeth: "updateAttempt", status: "OK" })).toBe(2);
    // `sum by (status) (rate(agl_rollouts_duration_count[15s]))`, `sum by (mode) (...)`
    expect(labelsOf("agl_rollouts_duration", "agl_rollouts_duration_bucket")).toEqual(new Set(["status", "mode", "le"]));
  });

  it("holds what this process writes through the metrics API, with its labels", async () => {
    await start();
    const metrics = new PrometheusMetricsBackend(registry);
    metrics.registerCounter("agent.tool_calls", ["tool", "status"]);
    metrics.registerHistogram("algorithm.step_seconds", ["phase"], [0.1, 1, 10]);
    metrics.registerGauge("algorithm.learning_rate");
    metrics.incCounter("agent.tool_calls", 2, { tool: "search", status: "ok" });
    metrics.observeHistogram("algorithm.step_seconds", 0.5, { phase: "update" });
    metrics.setGauge("algorithm.learning_rate", 1e-6);
    const f = await scrape();
    expect(f.get("agent_tool_calls_total")?.type).toBe("counter");
    expect(sampleValue(f, "agent_tool_calls_total", { tool: "search", status: "ok" })).toBe(2);
    expect(sampleValue(f, "algorithm_step_seconds_bucket", { phase: "update", le: "1" })).toBe(1);
    expect(sampleValue(f, "algorithm_learning_rate")).toBe(1e-6);
  });

  it("needs the token like every other route", async () => {
    await start({ token: "s3cret" });
    expect((await fetch(`${server.url}/v1/agl/prometheus/`)).status).toBe(401);
    expect((await scrape("/v1/agl/prometheus/", { authorization: "Bearer s3cret" })).has("agl_http_total")).toBe(true);
  });

  it("adds up what its peers hold (other workers); a peer that registered a name otherwise is left out, with a warning", async () => {
    const peer = (labelNames: string[], labels: Record<string, string>, amount: number) => {
      const shared = new MetricsRegistry();
      shared.registerCounter("agent.tool_calls", labelNames);
      shared.incCounter("agent.tool_calls", amount, labels);
      const own = new MetricsRegistry();
      own.registerCounter("agl.http.total", ["path", "method", "status"]);
      own.incCounter("agl.http.total", 10, { path: "/v1/agl/health", method: "GET", status: "200" });
      return { own: own.snapshot(), shared: shared.snapshot() };
    };
    const warnings: string[] = [];
    const log: LogWriter = { debug() {}, info() {}, error() {}, warning: (m) => void warnings.push(m) };
    let served = false;
    const metricsPeers = {
      serve: () => void (served = true),
      gather: async () => [peer(["tool"], { tool: "calc" }, 2), peer(["kind"], { kind: "x" }, 5)],
    };
    await start({ metricsPeers, log });
    new PrometheusMetricsBackend(registry).registerCounter("agent.tool_calls", ["tool"]);
    registry.incCounter("agent.tool_calls", 1, { tool: "calc" });
    await fetch(`${server.url}/v1/agl/health`);
    const f = await scrape();
    expect(served).toBe(true);
    expect(sampleValue(f, "agent_tool_calls_total", { tool: "calc" })).toBe(3);
    // Both peers' own series count; only the second one's pushed metrics conflict.
    expect(sampleValue(f, "agl_http_total", { path: "/v1/agl/health", method: "GET", status: "200" })).toBe(21);
    expect(warnings).toEqual([expect.stringMatching(/left out of this scrape: .*registered as a counter with labels \[tool\]/)]);
  });

  it("is absent with metrics: false", async () => {
    await start({ metrics: false });
    expect((await fetch(`${server.url}/v1/agl/prometheus/`)).status).toBe(404);
    expect((await push({ source: "x", metrics: [] })).status).toBe(404);
  });
});

describe("POST /v1/agl/metrics/push", () => {
  const counter = (value: number, labels: Record<string, string> = { tool: "calc" }) => ({
    name: "agent.tool_calls",
    type: "counter",
    label_names: ["tool"],
    samples: [{ labels, value }],
  });

  it("adds another process's increments to the exposition; a push of this process's own registry is already there", async () => {
    await start();
    const answer = async (res: Promise<Response>) => [(await res).status, await (await res).json()];
    expect(await answer(push({ source: "runner-1", metrics: [counter(2)] }))).toEqual([200, { applied: true }]);
    expect(await answer(push({ source: "runner-2", metrics: [counter(3)] }))).toEqual([200, { applied: true }]);
    expect(sampleValue(await scrape(), "agent_tool_calls_total", { tool: "calc" })).toBe(5);
    expect(await answer(push({ source: registry.source, metrics: [counter(100)] }))).toEqual([200, { applied: false }]);
    expect(sampleValue(await scrape(), "agent_tool_calls_total", { tool: "calc" })).toBe(5);
  });

  it("refuses a bad push whole, naming the field, and keeps what it had", async () => {
    await start();
    await push({ source: "runner-1", metrics: [counter(2)] });
    const before = registry.render();
    const cases: [unknown, number, RegExp, (string | number)[]][] = [
      [{ source: "r", metrics: [counter(1), counter(-1)] }, 400, /too_small|>=0/, ["metrics", 1, "samples", 0, "value"]],
      [
        { source: "r", metrics: [counter(1), counter(1, { tool: "x", other: "y" })] },
        400,
        /has no label 'other'/,
        ["metrics", 1, "samples", 0, "labels", "other"],
      ],
      [
        { source: "r", metrics: [counter(1), { ...counter(1), label_names: ["kind"] }] },
        409,
        /registered as a counter with labels \[tool\]/,
        [],
      ],
      [{ source: "r", metrics: [{ ...counter(1), name: "agl.http.total" }] }, 400, /store server's own/, ["metrics", 0, "name"]],
      [{ source: "r", metrics: [counter(1)], extra: 1 }, 400, /extra/, []],
    ];
    for (const [body, status, detail, path] of cases) {
      const res = await push(body);
      const answer = (await res.json()) as { detail: string; issues?: { path: (string | number)[] }[] };
      expect([res.status, answer.detail]).toEqual([status, expect.stringMatching(detail)]);
      if (path.length) expect(answer.issues?.[0]?.path).toEqual(path);
    }
    expect(registry.render()).toBe(before);
  });

  it("refuses a push past the server's series cap whole, and takes one that fills it", async () => {
    await start();
    await push({ source: "runner-1", metrics: [counter(2)] });
    const many = (n: number, from = 0) => ({
      ...counter(1),
      samples: Array.from({ length: n }, (_, i) => ({ labels: { tool: `t${from + i}` }, value: 1 })),
    });
    const refused = async (body: unknown, path: (string | number)[], detail: RegExp) => {
      const res = await push(body);
      const answer = (await res.json()) as { detail: string; issues?: { path: (string | number)[] }[] };
      expect([res.status, answer.detail, answer.issues?.[0]?.path]).toEqual([400, expect.stringMatching(detail), path]);
    };
    // One metric's samples are capped by the body's schema, all series by the server's registry.
    await refused({ source: "r", metrics: [many(MAX_PUSHED_SERIES + 1)] }, ["metrics", 0, "samples"], /10000|too_big/);
    await refused({ source: "r", metrics: [many(MAX_PUSHED_SERIES)] }, ["metrics"], /10001 series; .* at most 10000/);
    const before = registry.render();
    expect(registry.read("agent.tool_calls")).toHaveLength(1);
    expect((await push({ source: "r", metrics: [many(MAX_PUSHED_SERIES - 1)] })).status).toBe(200);
    expect(registry.read("agent.tool_calls")).toHaveLength(MAX_PUSHED_SERIES);
    expect(registry.render()).not.toBe(before);
    // Full: a push that only adds to existing series still counts, one with a new series does not.
    expect((await push({ source: "r", metrics: [counter(1, { tool: "t0" })] })).status).toBe(200);
    await refused({ source: "r", metrics: [counter(1, { tool: "new" })] }, ["metrics"], /10001 series/);
    expect(sampleValue(parsePrometheusText(registry.render()), "agent_tool_calls_total", { tool: "t0" })).toBe(2);
  });
});

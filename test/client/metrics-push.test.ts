/**
 * The store client sends its registry's changes to the server's exposition: after its requests, at most
 * once per interval, and when it closes; kept for later while the server is away, not sent at all to a
 * server without the route (Agent Lightning's own), whose client behaviour stays as it was.
 */
import { afterEach, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { MetricsRegistry, PrometheusMetricsBackend } from "../../src/metrics/index.ts";
import { captureLogs } from "../../src/platform/log.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { startUpstreamShapedServer } from "../interop/upstream-server.ts";
import { parsePrometheusText, sampleValue } from "../metrics/prometheus-text.ts";
import { startInProcess, type InProcessServer } from "../server/in-process.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let store: InMemoryLightningStore;
let server: InProcessServer;
let served: MetricsRegistry;
const logs = captureLogs();
afterEach(async () => {
  await server?.close();
  await store?.close();
  logs.records.length = 0;
});

async function start(): Promise<void> {
  store = new InMemoryLightningStore();
  served = new MetricsRegistry({ reservedPrefix: "agl_" });
  server = await startInProcess(store, { metricsRegistry: served });
}

/** The registry of "another process": the client's own, apart from the server's. */
function agentRegistry(): MetricsRegistry {
  const r = new MetricsRegistry();
  r.registerCounter("agent.tool_calls", ["tool"]);
  return r;
}

const calls = async () =>
  sampleValue(parsePrometheusText(await (await fetch(`${server.url}/v1/agl/prometheus/`)).text()), "agent_tool_calls_total", {
    tool: "calc",
  });

describe("LightningStoreClient sends metrics", () => {
  it("after a request, at most once per interval, and the rest when it closes", async () => {
    await start();
    const r = agentRegistry();
    const client = new LightningStoreClient(server.url, { metrics: r, metricsPushInterval: 0.05 });
    r.incCounter("agent.tool_calls", 2, { tool: "calc" });
    await client.statistics();
    await expect.poll(calls).toBe(2);
    // Written with no request since: nothing nudges a send (an idle client keeps no timer) ...
    r.incCounter("agent.tool_calls", 1, { tool: "calc" });
    await sleep(200);
    expect(await calls()).toBe(2);
    // ... until the client closes.
    await client.close();
    expect(await calls()).toBe(3);
    expect(logs.records.filter((l) => l.level !== "debug")).toEqual([]);
  });

  it("keeps what it could not send while the server is away and sends it with the next push", async () => {
    await start();
    const r = agentRegistry();
    let refuse = 1;
    const flaky: typeof fetch = async (input, init) => {
      if (String(input).endsWith("/metrics/push") && refuse-- > 0) throw new TypeError("fetch failed");
      return fetch(input, init);
    };
    const client = new LightningStoreClient(server.url, { metrics: r, metricsPushInterval: 0.05, fetch: flaky, retryDelays: [] });
    r.incCounter("agent.tool_calls", 2, { tool: "calc" });
    await client.statistics();
    await expect.poll(() => logs.text()).toMatch(/metrics not sent yet, kept for the next push: StoreConnectionError/);
    r.incCounter("agent.tool_calls", 1, { tool: "calc" });
    await expect.poll(calls).toBe(3);
    await client.close();
    expect(await calls()).toBe(3);
  });

  it("to Agent Lightning's own server: one try, one warning, then none; its other calls are unchanged", async () => {
    const upstream = await startUpstreamShapedServer();
    try {
      const r = agentRegistry();
      const client = new LightningStoreClient(upstream.url, { metrics: r, metricsPushInterval: 0.02 });
      r.incCounter("agent.tool_calls", 1, { tool: "calc" });
      await client.enqueueRollout({ q: 1 });
      await expect.poll(() => upstream.counts["POST /v1/agl/metrics/push"]).toBe(1);
      r.incCounter("agent.tool_calls", 1, { tool: "calc" });
      await client.enqueueRollout({ q: 2 });
      await sleep(100);
      await client.close();
      expect(upstream.counts["POST /v1/agl/metrics/push"]).toBe(1);
      expect(upstream.counts["POST /v1/agl/queues/rollouts/enqueue"]).toBe(2);
      const warnings = logs.records.filter((l) => l.level === "warning").map((l) => l.message);
      expect(warnings).toEqual([
        expect.stringMatching(
          /^the store server takes no metrics \(StoreHttpError: POST \/metrics\/push: Not Found\): this process's metrics stay in it \(agent.tool_calls\)$/,
        ),
      ]);
    } finally {
      await upstream.close();
    }
  });

  it("a push the server refuses is dropped, said once, and does not stop later ones", async () => {
    await start();
    served.registerCounter("agent.tool_calls", ["kind"]);
    const r = agentRegistry();
    r.registerCounter("agent.other");
    const client = new LightningStoreClient(server.url, { metrics: r, metricsPushInterval: 0.02 });
    r.incCounter("agent.tool_calls", 1, { tool: "calc" });
    await client.statistics();
    await expect.poll(() => logs.text()).toMatch(/refused this process's metrics \(agent.tool_calls\); they are dropped: ConflictError/);
    r.incCounter("agent.other", 4);
    await client.close();
    expect(served.read("agent.other")).toEqual([{ labels: {}, value: 4, count: null }]);
  });

  it("sends this process's registry by default, nothing with metrics: false", async () => {
    await start();
    const metrics = new PrometheusMetricsBackend();
    metrics.registerCounter("agent.tool_calls", ["tool"]);
    metrics.incCounter("agent.tool_calls", 1, { tool: "calc" });
    const requests: string[] = [];
    const client = new LightningStoreClient(server.url, {
      metrics: false,
      fetch: (input, init) => (requests.push(String(input)), fetch(input, init)),
    });
    await client.statistics();
    await client.close();
    expect(requests.map((u) => new URL(u).pathname)).toEqual(["/v1/agl/statistics"]);
    const sending = new LightningStoreClient(server.url);
    await sending.close();
    expect(await calls()).toBe(1);
  });
});

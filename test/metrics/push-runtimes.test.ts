/**
 * Metrics written in another process reach the store server's exposition: an agent process under Node,
 * Deno and Bun writes through `PrometheusMetricsBackend` and its store client sends them when it closes.
 */
import { afterAll, describe, expect, it } from "vitest";
import { MetricsRegistry } from "../../src/metrics/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { RUNTIMES, runReport } from "../runtimes.ts";
import { startInProcess } from "../server/in-process.ts";
import { parsePrometheusText, sampleValue } from "./prometheus-text.ts";

const store = new InMemoryLightningStore();
const registry = new MetricsRegistry({ reservedPrefix: "agl_" });
const server = await startInProcess(store, { metricsRegistry: registry });
afterAll(async () => {
  await server.close();
  await store.close();
});

describe("metrics from an agent process", () => {
  for (const runtime of RUNTIMES) {
    it(`${runtime}: what it writes through the API is in the server's exposition once its client closes`, async () => {
      const report = await runReport<{ runtime: string }>(runtime, "test/metrics/push-cross-runtime.ts", {
        args: [server.url],
        timeout: 120_000,
      });
      expect(report.runtime).toBe(runtime);
      const f = parsePrometheusText(await (await fetch(`${server.url}/v1/agl/prometheus/`)).text());
      expect(sampleValue(f, "agent_tool_calls_total", { tool: "calc", runtime })).toBe(3);
      expect(sampleValue(f, "agent_tool_seconds_bucket", { runtime, le: "1" })).toBe(1);
      expect(sampleValue(f, "agent_last_reward", { runtime })).toBe(0.75);
    }, 150_000);
  }
});

/**
 * An algorithm's metrics reach both the Prometheus exposition and the dashboard's Training page: the run
 * is listed, and the page's own series builder (with its default span names) charts each series
 * against the `step` gauge.
 */
import { afterEach, describe, expect, it } from "vitest";
import { TrainingMetrics } from "../../src/algorithm/index.ts";
import { MetricsRegistry, PrometheusMetricsBackend } from "../../src/metrics/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { ValidationError } from "../../src/types/index.ts";
// @ts-expect-error: a plain browser ES module without type declarations (the Training page itself)
import { DEFAULT_PATTERNS, patternsOf, seriesOf } from "../../src/server/dashboard/web/pages/training.js";
import { parsePrometheusText, sampleValue } from "../metrics/prometheus-text.ts";
import { startInProcess, type InProcessServer } from "../server/in-process.ts";

let store: InMemoryLightningStore;
let server: InProcessServer;
afterEach(async () => {
  await server?.close();
  await store?.close();
});

describe("TrainingMetrics", () => {
  it("writes to the exposition, and each flush is one point on the Training page", async () => {
    store = new InMemoryLightningStore();
    const registry = new MetricsRegistry({ reservedPrefix: "agl_" });
    server = await startInProcess(store, { metricsRegistry: registry });
    const metrics = await TrainingMetrics.start(store, {
      kind: "myalgo-metrics",
      input: { lr: 0.1 },
      backend: new PrometheusMetricsBackend(registry),
    });
    metrics.registerGauge("step");
    metrics.registerGauge("train.loss", ["phase"]);
    metrics.registerCounter("train.rollouts");
    metrics.registerHistogram("train.reward", [], [0, 0.5, 1]);

    for (const [step, rewards] of [
      [1, [0, 1]],
      [2, [1, 1, 0.5]],
    ] as const) {
      metrics.setGauge("step", step);
      metrics.setGauge("train.loss", 1 / step, { phase: "policy" });
      metrics.incCounter("train.rollouts", rewards.length);
      for (const r of rewards) metrics.observeHistogram("train.reward", r);
      await metrics.flush();
    }
    await metrics.flush(); // nothing written since: no point
    metrics.setGauge("step", 3);
    metrics.setGauge("train.loss", 0.25, { phase: "policy" });
    await metrics.close();

    const f = parsePrometheusText(await (await fetch(`${server.url}/v1/agl/prometheus/`)).text());
    expect(sampleValue(f, "train_rollouts_total")).toBe(5);
    expect(sampleValue(f, "train_reward_count")).toBe(5);
    expect(sampleValue(f, "train_loss", { phase: "policy" })).toBe(0.25);

    const runs = (await (await fetch(`${server.url}/v1/agl/training/runs`)).json()) as {
      items: { rollout_id: string; kind: string; status: string }[];
    };
    expect(runs.items).toEqual([expect.objectContaining({ rollout_id: metrics.rolloutId, kind: "myalgo-metrics", status: "succeeded" })]);
    const spans = (await (await fetch(`${server.url}/v1/agl/spans?rollout_id=${metrics.rolloutId}`)).json()) as { items: unknown[] };
    const groups = seriesOf(spans.items, patternsOf(DEFAULT_PATTERNS));
    expect(groups).toHaveLength(1);
    const [g] = groups;
    expect([g.name, g.xAxis, g.xs]).toEqual(["metrics", "step", [1, 2, 3]]);
    expect(Object.fromEntries(g.metrics.map((m: { key: string; ys: unknown[] }) => [m.key, m.ys]))).toEqual({
      "train.reward.mean": [0.5, 2.5 / 3, null],
      "train.reward.count": [2, 3, null],
      "train.rollouts": [2, 5, 5],
      "train.loss{phase=policy}": [1, 0.5, 0.25],
    });
  });

  it("a kind the Training page would not list, and a write the backend refuses, are errors that keep nothing", async () => {
    store = new InMemoryLightningStore();
    await expect(TrainingMetrics.start(store, { kind: "mine" })).rejects.toThrow(ValidationError);
    const metrics = await TrainingMetrics.start(store);
    expect(() => metrics.registerCounter("agl.mine")).toThrow(/store server's own/);
    metrics.registerGauge("g", ["k"]);
    expect(() => metrics.setGauge("g", 1)).toThrow(/needs label 'k'/);
    await metrics.flush();
    expect((await store.querySpans(metrics.rolloutId)).items).toEqual([]);
  });
});

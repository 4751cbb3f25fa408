/** The built-in algorithms' progress spans as Prometheus gauges (src/algorithm/progress-gauges.ts). */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { calcTabAgent } from "../../examples/tab/agents.ts";
import { CHECKPOINT } from "../../examples/tab/build.ts";
import { runTab } from "../../examples/tab/loop.ts";
import { gaugeName, ProgressGauges } from "../../src/algorithm/progress-gauges.ts";
import { TrainingMetrics } from "../../src/algorithm/training-metrics.ts";
import { MetricsRegistry, processMetrics } from "../../src/metrics/registry.ts";
import { captureLogs } from "../../src/platform/log.ts";
import { createStoreApp } from "../../src/server/app.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";

const gaugeOf = (registry: MetricsRegistry, name: string, run: string): number | undefined =>
  registry.read(name).find((s) => s.labels.run === run)?.value;

describe("progress gauges", () => {
  it("name a gauge after the span and the attribute, without the algorithm's prefix twice", () => {
    expect(gaugeName("grpo.step", "grpo.reward")).toBe("grpo_step_reward");
    expect(gaugeName("ppo.step", "critic/score/mean")).toBe("ppo_step_critic_score_mean");
    expect(gaugeName("apo.round", "apo.best-score")).toBe("apo_round_best_score");
    expect(gaugeName("sft.validation", "step")).toBe("sft_validation_step");
  });

  it("set one gauge per number or boolean of a span, labelled with the run; strings are left out", () => {
    const registry = new MetricsRegistry();
    const gauges = new ProgressGauges(registry, "ro-1");
    gauges.set("grpo.step", { "grpo.step": 3, "grpo.reward": 0.25, "grpo.changed": true, "grpo.note": "x" });
    gauges.set("grpo.step", { "grpo.step": 4, "grpo.reward": 0.5, "grpo.changed": false });
    expect(gaugeOf(registry, "grpo_step_step", "ro-1")).toBe(4);
    expect(gaugeOf(registry, "grpo_step_reward", "ro-1")).toBe(0.5);
    expect(gaugeOf(registry, "grpo_step_changed", "ro-1")).toBe(0);
    expect(registry.definitions().map((d) => d.name)).not.toContain("grpo_step_note");
    new ProgressGauges(registry, "ro-2").set("grpo.step", { "grpo.reward": 0.75 });
    expect(gaugeOf(registry, "grpo_step_reward", "ro-1")).toBe(0.5);
    expect(gaugeOf(registry, "grpo_step_reward", "ro-2")).toBe(0.75);
  });

  it("a name the process already uses for another metric is skipped with a warning, and the others are still set", () => {
    const registry = new MetricsRegistry();
    registry.registerCounter("grpo_step_reward", ["phase"]);
    const logs = captureLogs();
    try {
      const gauges = new ProgressGauges(registry, "ro-1");
      gauges.set("grpo.step", { "grpo.reward": 0.5, "grpo.kl": 0.01 });
      gauges.set("grpo.step", { "grpo.reward": 0.6, "grpo.kl": 0.02 });
      expect(gaugeOf(registry, "grpo_step_kl", "ro-1")).toBe(0.02);
      const warned = logs.records.filter((r) => r.level === "warning" && r.message.includes("grpo_step_reward"));
      expect(warned).toHaveLength(1);
      expect(warned[0].message).toMatch(/"grpo.reward" is not exported as the gauge grpo_step_reward: .*counter/);
    } finally {
      logs.stop();
    }
  });

  it("two attributes that read alike keep the first one's gauge", () => {
    const registry = new MetricsRegistry();
    new ProgressGauges(registry, "ro-1").set("ppo.step", { "critic/score/mean": 1, critic_score_mean: 2 });
    expect(gaugeOf(registry, "ppo_step_critic_score_mean", "ro-1")).toBe(1);
  });

  it("TrainingMetrics' points are its own metrics, not exported a second time as gauges", async () => {
    const store = new InMemoryLightningStore();
    const registry = new MetricsRegistry();
    const metrics = await TrainingMetrics.start(store, { kind: "mine-metrics", backend: registry });
    metrics.registerGauge("step");
    metrics.setGauge("step", 1);
    await metrics.close();
    expect(registry.definitions().map((d) => d.name)).toEqual(["step"]);
    expect(processMetrics.definitions().some((d) => d.name.startsWith("metrics_"))).toBe(false);
  });

  it("a GRPO run's steps and validations are on the store server's /metrics, labelled with its metrics rollout", async () => {
    const r = await runTab({
      agent: calcTabAgent(new Uint8Array(readFileSync(CHECKPOINT))),
      backend: "cpu",
      steps: 2,
      batch: 2,
      n: 4,
      valTasks: 4,
      valEvery: 1,
      runners: 2,
    });
    const runs = (await r.store.queryRollouts({})).items.filter((x) => (x.metadata as { kind?: string })?.kind === "grpo-metrics");
    expect(runs).toHaveLength(1);
    const run = runs[0].rollout_id;
    const last = r.reports.filter((x) => x.kind === "step").at(-1)!;
    const val = r.reports.filter((x) => x.kind === "validation").at(-1)!;
    expect(gaugeOf(processMetrics, "grpo_step_step", run)).toBe(2);
    expect(gaugeOf(processMetrics, "grpo_step_reward", run)).toBe(last.reward);
    expect(gaugeOf(processMetrics, "grpo_step_kl", run)).toBe(last.kl);
    expect(gaugeOf(processMetrics, "grpo_validation_accuracy", run)).toBe(val.accuracy);
    const text = await (await createStoreApp(r.store).request("/metrics")).text();
    expect(text).toContain("# TYPE grpo_step_reward gauge");
    expect(text).toMatch(new RegExp(`^grpo_step_reward\\{run="${run}"\\} `, "m"));
    // verl's names too
    expect(text).toMatch(new RegExp(`^grpo_step_training_reward\\{run="${run}"\\} `, "m"));
  }, 120_000);
});

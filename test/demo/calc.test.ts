/**
 * A shortened run of the calc demo (examples/calc/train.ts): GRPO from the committed SFT checkpoint,
 * through the real stack (runners, the openai-client agent, the policy server, the embedded libSQL
 * store, the Wasm core, the CPU trainer). It asserts that the training reward goes up, that the
 * policy version moves with every update, and that the metrics reached the store.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { trainCalc } from "../../examples/calc/train.ts";
import { openStore } from "../../src/store/index.ts";
import { slope, tasksWithSignal } from "./calc-signal.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("calc demo, shortened", () => {
  it("raises the training reward with GRPO and records every step in the store", async () => {
    const out = await mkdtemp(join(tmpdir(), "calc-demo-"));
    dirs.push(out);
    const trainSet = await tasksWithSignal(4);
    const r = await trainCalc({
      steps: 8,
      batch: 4,
      n: 8,
      lr: 3e-3,
      valEvery: 0,
      valTasks: 20,
      out,
      backend: "cpu",
      progress: false,
      seed: 1,
      trainSet,
    });
    const steps = r.reports.filter((x) => x.kind === "step");
    expect(steps).toHaveLength(8);
    const rewards = steps.map((s) => s.reward);
    console.log(`[calc demo, shortened] step rewards: ${rewards.map((x) => x.toFixed(3)).join(" ")}`);
    expect(slope(rewards)).toBeGreaterThan(0);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    expect(mean(rewards.slice(-3))).toBeGreaterThan(mean(rewards.slice(0, 3)));
    // every step that trained published a new policy version
    const versions = steps.map((s) => s.version);
    expect(versions[versions.length - 1]).toBe(steps.filter((s) => !s.skipped).length);
    // rows of all-equal-reward groups are left out of the update
    for (const s of steps) expect(s.trained_rows).toBeCloseTo(s.rows * (1 - s.zero_variance_group_share), 6);
    expect((await readFile(r.svgPath, "utf8")).startsWith("<svg")).toBe(true);

    const store = await openStore(`file:${out}/store.db`);
    try {
      const metrics = (await store.queryRollouts({})).items.filter((x) => (x.metadata as Record<string, unknown>)?.kind === "grpo-metrics");
      expect(metrics).toHaveLength(1);
      const spans = (await store.querySpans(metrics[0].rollout_id)).items;
      expect(spans.filter((s) => s.name === "grpo.step").map((s) => s.attributes["grpo.reward"])).toEqual(rewards);
      expect(spans.filter((s) => s.name === "grpo.validation")).toHaveLength(2);
    } finally {
      await store.close();
    }
  }, 900_000);
});

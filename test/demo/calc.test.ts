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
import { MAX_ANSWER_TOKENS } from "../../examples/calc/agent.ts";
import { promptIds } from "../../examples/calc/sft.ts";
import { reward, trainTasks, type CalcTask } from "../../examples/calc/tasks.ts";
import { trainCalc } from "../../examples/calc/train.ts";
import { loadCheckpoint } from "../../src/model/index.ts";
import { cpuGenerationEngine } from "../../src/proxy/generation.ts";
import { openStore } from "../../src/store/index.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const slope = (ys: number[]): number => {
  const n = ys.length,
    mx = (n - 1) / 2,
    my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0,
    den = 0;
  ys.forEach((y, x) => {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  });
  return num / den;
};

/**
 * Training problems with a learning signal for the starting checkpoint: its sampled success rate
 * (8 samples at temperature 1) is neither 0 nor 1, so GRPO groups have reward variance.
 */
async function tasksWithSignal(count: number): Promise<CalcTask[]> {
  const { config, params } = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
  const picked: CalcTask[] = [];
  for (const t of trainTasks(200, 5)) {
    const gens = await cpuGenerationEngine.generate(
      config,
      params,
      Array.from({ length: 8 }, (_, i) => ({ prompt: promptIds(t), maxTokens: MAX_ANSWER_TOKENS, temperature: 1, seed: 100 + i })),
    );
    const rate = gens.reduce((a, g) => a + reward(t, g.text), 0) / gens.length;
    if (rate >= 0.25 && rate <= 0.75) picked.push(t);
    if (picked.length === count) return picked;
  }
  throw new Error(`only ${picked.length} of 200 problems have a success rate in [0.25, 0.75]`);
}

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

/** Calc problems the SFT checkpoint sometimes solves: what a short GRPO run can learn from. */
import { MAX_ANSWER_TOKENS } from "../../examples/calc/agent.ts";
import { promptIds } from "../../examples/calc/sft.ts";
import { reward, trainTasks, type CalcTask } from "../../examples/calc/tasks.ts";
import { loadCheckpoint } from "../../src/model/index.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";

/**
 * Training problems with a learning signal for the starting checkpoint: its sampled success rate
 * (8 samples at temperature 1) is neither 0 nor 1, so GRPO groups have reward variance.
 */
export async function tasksWithSignal(count: number): Promise<CalcTask[]> {
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

/** Least-squares slope of ys over 0, 1, 2, ... */
export const slope = (ys: number[]): number => {
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

/**
 * A shortened run of the Calc-X demo (examples/calc-x/train.ts): `agl train` with GRPO on the committed
 * tool-calling model, through the real stack (runners, the multi-turn agent with the calculator over stdio
 * MCP, the policy server, the embedded libSQL store, one trajectory row per rollout, the CPU trainer).
 * It asserts that the training reward goes up on problems the model sometimes solves, and that the
 * store holds what the demo's statistics are read from.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runEpisodes } from "../../examples/calc-x/sft.ts";
import { trainTasks } from "../../examples/calc-x/tasks.ts";
import { CALC_X_COMMAND, trainCalcX } from "../../examples/calc-x/train.ts";
import type { CalcXTask } from "../../examples/calc-x/types.ts";
import { FlagError } from "../../src/cli/flags.ts";
import { parseScriptArgs } from "../../src/cli/script-options.ts";
import { loadPretrained } from "../../src/model/index.ts";
import { slope } from "./calc-signal.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const SAMPLES = 8;

/** Training problems the committed model solves in 2 to 6 of 8 samples at temperature 1: groups with reward variance. */
async function tasksWithSignal(count: number): Promise<CalcXTask[]> {
  const m = await loadPretrained("examples/calc-x/model");
  const model = { config: m.config, params: m.weights, tokenizer: m.tokenizer! };
  const candidates = trainTasks(48, 5);
  const repeated = candidates.flatMap((t) => Array.from({ length: SAMPLES }, () => t));
  const episodes = await runEpisodes(model, repeated, undefined, { temperature: 1, seed: 7 });
  const picked = candidates.filter((_, k) => {
    const wins = episodes.slice(k * SAMPLES, (k + 1) * SAMPLES).reduce((a, e) => a + e.reward, 0);
    return wins >= 2 && wins <= 6;
  });
  if (picked.length < count) throw new Error(`only ${picked.length} of ${candidates.length} problems have a success rate in [2/8, 6/8]`);
  return picked.slice(0, count);
}

describe("Calc-X demo, shortened", () => {
  it("raises the training reward of the multi-turn MCP agent and leaves its statistics in the store", async () => {
    const out = await mkdtemp(join(tmpdir(), "calc-x-demo-"));
    dirs.push(out);
    const trainSet = await tasksWithSignal(4);
    const r = await trainCalcX({
      steps: 8,
      batch: 4,
      group: 8,
      lr: 3e-3,
      temperature: 1,
      valTasks: 10,
      runners: 4,
      seed: 1,
      out,
      trainSet,
    });
    expect(r.code).toBe(0);
    const reports = (await readFile(join(out, "run", "metrics.jsonl"), "utf8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { kind: string; reward: number; rows: number; trained_rows: number });
    const steps = reports.filter((x) => x.kind === "step");
    expect(steps).toHaveLength(8);
    const rewards = steps.map((s) => s.reward);
    console.log(`[Calc-X demo, shortened] step rewards: ${rewards.map((x) => x.toFixed(3)).join(" ")}`);
    expect(slope(rewards)).toBeGreaterThan(0);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    expect(mean(rewards.slice(-3))).toBeGreaterThan(mean(rewards.slice(0, 3)));
    // trajectory level: one row per rollout (4 tasks x 8 samples), and one more for each rollout where a
    // sampled reply, rendered back into the next prompt, tokenizes differently (the chain breaks there)
    for (const s of steps) {
      expect(s.rows).toBeGreaterThanOrEqual(32);
      expect(s.rows).toBeLessThan(40);
    }

    // the before/after statistics come from the validation rollouts' reward and calc_x annotation spans
    for (const s of [r.before!, r.after!]) {
      expect(s.rollouts).toBe(10);
      expect(s.turnsPerRollout).toBeGreaterThanOrEqual(1);
      expect(s.turnsPerRollout).toBeLessThanOrEqual(4);
      expect(s.toolCallsPerRollout).toBeGreaterThan(0);
      expect(s.parsedShare).toBeGreaterThan(0);
      expect(s.parsedShare).toBeLessThanOrEqual(1);
    }
    expect((await readFile(join(out, "run", "reward-curve.svg"), "utf8")).startsWith("<svg")).toBe(true);
  }, 900_000);

  it("parses its command line with the agl flag parser: help, defaults, and errors that name the flag", () => {
    const parse = (argv: string[]) => parseScriptArgs(CALC_X_COMMAND, argv);
    expect(parse(["--help"]).help).toBe(true);
    expect(parse(["--steps", "30", "--level", "transition", "--full-finetune"]).options).toEqual({
      steps: 30,
      level: "transition",
      fullFinetune: true,
    });
    expect(() => parse(["--level", "turn"])).toThrow(FlagError);
    expect(() => parse(["--steps", "0"])).toThrow(/--steps/);
    expect(() => parse(["--stpes", "3"])).toThrow(/--stpes/);
  });
});

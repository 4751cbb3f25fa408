/**
 * The calc demo (examples/calc/train.ts) with more of the PPO family's estimators, RLOO and REINFORCE++,
 * through the real stack: from the committed SFT checkpoint, seeded, a few steps each. It asserts that
 * the training reward goes up, that every step's loss is finite and its update taken, and that the
 * generations dump holds each step's rows. GAE, with the demo's critic, runs a few steps of its own: the
 * critic trains (its weights leave the checkpoint's, its loss stays finite), every row trains the actor, and
 * the last checkpoint holds the critic's state.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { trainCalc } from "../../examples/calc/train.ts";
import { loadCheckpoint } from "../../src/model/index.ts";
import { loadValueCheckpoint } from "../../src/model/value-checkpoint.ts";
import { valueParamsFromPolicy } from "../../src/model/value-params.ts";
import { slope, tasksWithSignal } from "./calc-signal.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

describe("calc demo with the PPO family's estimators", () => {
  for (const estimator of ["rloo", "reinforce_plus_plus"] as const) {
    it(`${estimator}: the training reward goes up, losses stay finite, each step is dumped`, async () => {
      const out = await mkdtemp(join(tmpdir(), `calc-${estimator}-`));
      dirs.push(out);
      const r = await trainCalc({
        estimator,
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
        trainSet: await tasksWithSignal(4),
        rolloutDataDir: `${out}/generations`,
      });
      const steps = r.reports.filter((x) => x.kind === "step");
      expect(steps).toHaveLength(8);
      const rewards = steps.map((s) => s.reward);
      console.log(
        `[calc ${estimator}] step rewards: ${rewards.map((x) => x.toFixed(3)).join(" ")}; losses: ${steps.map((s) => s.loss.toFixed(3)).join(" ")}`,
      );
      expect(slope(rewards)).toBeGreaterThan(0);
      expect(mean(rewards.slice(-3))).toBeGreaterThan(mean(rewards.slice(0, 3)));
      for (const s of steps) {
        expect(Number.isFinite(s.loss) && Number.isFinite(s.metrics["actor/pg_loss"])).toBe(true);
        // a whitened advantage has mean 0, so REINFORCE++'s token-mean loss starts near 0: its gradient does not
        expect(s.grad_norm).toBeGreaterThan(0);
        expect(s.skipped).toBe(false);
        expect(s.metrics["critic/score/mean"]).toBeCloseTo(s.reward, 6);
        const lines = (await readFile(`${out}/generations/${s.step}.jsonl`, "utf8")).trimEnd().split("\n");
        expect(lines).toHaveLength(s.rows);
        expect(lines.map((l) => JSON.parse(l)).filter((l) => l.trained)).toHaveLength(s.trained_rows);
      }
      // REINFORCE++ whitens over the batch: tied groups keep a non-zero advantage and train; RLOO leaves them out
      if (estimator === "reinforce_plus_plus") for (const s of steps) expect(s.trained_rows).toBe(s.rows);
      else for (const s of steps) expect(s.trained_rows).toBeCloseTo(s.rows * (1 - s.zero_variance_group_share), 6);
    }, 900_000);
  }

  it("gae: the critic starts from the checkpoint and trains beside the actor", async () => {
    const out = await mkdtemp(join(tmpdir(), "calc-gae-"));
    dirs.push(out);
    const r = await trainCalc({
      estimator: "gae",
      criticLr: 1e-3,
      steps: 3,
      batch: 2,
      n: 4,
      valEvery: 0,
      valTasks: 4,
      out,
      backend: "cpu",
      progress: false,
      seed: 1,
      trainSet: await tasksWithSignal(2),
    });
    const steps = r.reports.filter((x) => x.kind === "step");
    expect(steps).toHaveLength(3);
    for (const s of steps) {
      const m = s.metrics;
      console.log(
        `[calc gae] step ${s.step}: vf_loss ${m["critic/vf_loss"].toFixed(4)} values mean ${m["critic/values/mean"].toFixed(4)} critic grad ${m["critic/grad_norm"].toFixed(4)}`,
      );
      expect(Number.isFinite(m["critic/vf_loss"])).toBe(true);
      expect(m["critic/grad_norm"]).toBeGreaterThan(0);
      // GAE's advantages are the returns less the critic's values, whitened: no row is tied at zero
      expect(s.trained_rows).toBe(s.rows);
      expect(s.skipped).toBe(false);
    }
    // the critic's values move as it trains (a critic that never stepped would give the same values each step)
    expect(steps[2].metrics["critic/values/mean"]).not.toBeCloseTo(steps[0].metrics["critic/values/mean"], 4);
    const { config, params } = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
    const start = valueParamsFromPolicy(config, params, 1);
    expect(r.criticParams).toHaveLength(start.length);
    let moved = 0;
    for (let i = 0; i < start.length; i++) if (r.criticParams![i] !== start[i]) moved++;
    expect(moved / start.length).toBeGreaterThan(0.5);
    // the last checkpoint holds the critic beside the policy
    const saved = await loadValueCheckpoint(join(out, "checkpoints/step-3/critic"));
    expect(saved.params).toEqual(r.criticParams);
    expect(saved.optimizer.step).toBe(3);
  }, 120_000);
});

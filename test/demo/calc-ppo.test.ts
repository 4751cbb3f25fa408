/**
 * The calc demo (examples/calc/train.ts) with two more of the PPO family's estimators, RLOO and
 * REINFORCE++, through the real stack: from the committed SFT checkpoint, seeded, a few steps each. It
 * asserts that the training reward goes up, that every step's loss is finite and its update taken, and
 * that the generations dump holds each step's rows.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { trainCalc } from "../../examples/calc/train.ts";
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
});

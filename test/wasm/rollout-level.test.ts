import { describe, expect, it } from "vitest";
import {
  computeRolloutLevelAdvantage,
  loadWasmCoreSync,
  referenceKernels,
  wasmKernels,
  type RepresentativeBatch,
} from "../../src/wasm/index.ts";

const f32 = (xs: number[]) => Float32Array.from(xs);

describe("rollout-level advantage (docs/training.md#advantage-estimators)", () => {
  for (const k of [referenceKernels, wasmKernels(loadWasmCoreSync())]) {
    describe(k.name, () => {
      const base = () => ({
        mask: f32([1, 1, 0, 1, 0, 0, 1, 1, 1]),
        rewards: f32([1, 0, 0, 1, 0, 0, 3, 0, 0]),
        B: 3,
        T: 3,
        rolloutIds: ["r1", "r1", "r2"],
        dataIds: ["data-1", "data-1", "data-1"],
      });
      // the fake estimator of the upstream test: +2 / -1 advantages, +3 / -2 returns
      const fake = (seen: RepresentativeBatch[]) => (b: RepresentativeBatch) => {
        seen.push(b);
        const adv = new Float32Array(b.B * b.T),
          ret = new Float32Array(b.B * b.T);
        for (let i = 0; i < b.B; i++)
          for (let t = 0; t < b.T; t++) {
            adv[i * b.T + t] = (i === 0 ? 2 : -1) * b.mask[i * b.T + t];
            ret[i * b.T + t] = (i === 0 ? 3 : -2) * b.mask[i * b.T + t];
          }
        return { advantages: adv, returns: ret };
      };

      it("runs the estimator on one row per rollout and broadcasts its scalar", () => {
        const seen: RepresentativeBatch[] = [];
        const out = computeRolloutLevelAdvantage(k, base(), fake(seen));
        expect(seen[0].rolloutIds).toEqual(["r1", "r2"]);
        expect(seen[0].uids).toEqual(["data-1", "data-1"]);
        expect(Array.from(out.advantages)).toEqual([2, 2, 0, 2, 0, 0, -1, -1, -1]);
        expect(Array.from(out.returns!)).toEqual([3, 3, 0, 3, 0, 0, -2, -2, -2]);
        expect(out.metrics).toEqual({
          "training/rollout_level_advantage/n_rows": 3,
          "training/rollout_level_advantage/n_rollouts": 2,
          "training/rollout_level_advantage/n_multi_row_rollouts": 1,
          "training/rollout_level_advantage/max_rows_per_rollout": 2,
        });
      });

      it("rejects rows of one rollout with different rewards, token-varying advantages, missing ids", () => {
        expect(() => computeRolloutLevelAdvantage(k, { ...base(), rewards: f32([1, 0, 0, 2, 0, 0, 3, 0, 0]) }, fake([]))).toThrow(
          /same scalar token_level_rewards/,
        );
        const varying = () => ({ advantages: f32([1, 2, 0, 1, 1, 1]) });
        expect(() => computeRolloutLevelAdvantage(k, base(), varying)).toThrow(/scalar outcome-style advantages/);
        expect(() => computeRolloutLevelAdvantage(k, { ...base(), rolloutIds: null }, fake([]))).toThrow(/rollout_id_list/);
        expect(() => computeRolloutLevelAdvantage(k, { ...base(), dataIds: null }, fake([]))).toThrow(/uid/);
      });

      it("works with a real estimator (GRPO over the representatives)", () => {
        const out = computeRolloutLevelAdvantage(k, { ...base(), rolloutIds: ["a", "a", "b"] }, (b) =>
          k.grpo({ ...b, groups: new Int32Array(b.B) }),
        );
        // representatives score 1 and 3 in one group: +-0.7071 (std of [1,3] = sqrt(2))
        const a = Array.from(out.advantages);
        expect(a[0]).toBeCloseTo(-1 / Math.SQRT2, 5);
        expect(a[3]).toBeCloseTo(-1 / Math.SQRT2, 5);
        expect(a[6]).toBeCloseTo(1 / Math.SQRT2, 5);
        expect(a[2] === 0).toBe(true); // masked out (may be -0)
      });
    });
  }
});

describe("normalizeAdvantagesByRollout, per-rollout normalisation (docs/training.md#advantage-estimators)", () => {
  it("gives each rollout the same masked mass 1/rows", async () => {
    const { normalizeAdvantagesByRollout } = await import("../../src/wasm/index.ts");
    const mask = f32([1, 1, 0, 1, 0, 0, 1, 1, 1]);
    const out = normalizeAdvantagesByRollout(new Float32Array(9).fill(1), mask, 3, 3, ["A", "A", "B"], 3);
    const mass = (rows: number[]) => rows.reduce((s, i) => s + [0, 1, 2].reduce((a, t) => a + out[i * 3 + t] * mask[i * 3 + t], 0), 0);
    expect(mass([0, 1])).toBeCloseTo(1 / 3, 6);
    expect(mass([2])).toBeCloseTo(1 / 3, 6);
    expect(() => normalizeAdvantagesByRollout(new Float32Array(9), mask, 3, 3, ["A"], 3)).toThrow(/rollout_ids length/);
    expect(() => normalizeAdvantagesByRollout(new Float32Array(9), mask, 3, 3, ["A", "A", "B"], 0)).toThrow(/num_trained_rows/);
  });
});

import { describe, expect, it } from "vitest";
import { loadWasmCoreSync, referenceKernels as ref, wasmKernels } from "../../src/wasm/index.ts";
import type { GroupedInput, KlKind } from "../../src/wasm/index.ts";
import { expectClose, randomFloats, randomGroups, randomMask, randomRewards, rng } from "./helpers.ts";

const wasm = wasmKernels(loadWasmCoreSync());
const CASES = 300;

/** Random shapes including empty batches, zero-width rows and single tokens. */
function randomBatch(seed: number): GroupedInput & { values: Float32Array; baselines: Float32Array } {
  const r = rng(seed);
  const B = r.pick([0, 1, 2, 3, r.int(1, 40)]);
  const T = r.pick([0, 1, 3, 4, 5, r.int(1, 70)]);
  const mask = randomMask(r, B, T);
  return {
    B,
    T,
    mask,
    rewards: randomRewards(r, B, T, mask),
    groups: randomGroups(r, B),
    values: randomFloats(r, B * T, -1, 1),
    baselines: randomFloats(r, B, -1, 1),
  };
}

/** Both throw the same way, or both return close values. */
function same<T>(name: string, f: () => T, g: () => T, cmp: (a: T, b: T) => void): void {
  let ea: unknown, eb: unknown, a: T | undefined, b: T | undefined;
  try {
    a = f();
  } catch (e) {
    ea = e;
  }
  try {
    b = g();
  } catch (e) {
    eb = e;
  }
  if (ea || eb) {
    expect((ea as Error | undefined)?.message, name).toBe((eb as Error | undefined)?.message);
    return;
  }
  cmp(a as T, b as T);
}

describe("Wasm advantage kernels equal the plain-TS reference on random inputs", () => {
  const cmpOut = (a: { advantages: Float32Array; returns: Float32Array }, b: typeof a) => {
    expectClose(a.advantages, b.advantages, "advantages");
    expectClose(a.returns, b.returns, "returns");
  };
  for (const [name, run] of [
    ["grpo", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.grpo(x)],
    ["grpo without std", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.grpo(x, false)],
    ["rloo", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.rloo(x)],
    ["opo", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.opo(x)],
    ["gpg", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.gpg(x)],
    ["reinforce++ baseline", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.reinforcePlusPlusBaseline(x)],
    ["gae", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.gae(x, 0.99, 0.95)],
    ["reinforce++", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.reinforcePlusPlus(x, 0.9)],
    ["remax", (k: typeof ref, x: ReturnType<typeof randomBatch>) => k.remax(x)],
  ] as const) {
    it(name, () => {
      let compared = 0;
      for (let s = 0; s < CASES; s++) {
        const x = randomBatch(1000 + s);
        same(
          `${name} seed ${s}`,
          () => run(wasm, x),
          () => run(ref, x),
          (a, b) => {
            cmpOut(a, b);
            compared++;
          },
        );
      }
      expect(compared).toBeGreaterThan(CASES / 3); // most cases are valid, not just matching errors
    });
  }

  it("grpo_passk, with and without std, on groups of two rows or more (and the same error for a group of one)", () => {
    let compared = 0;
    for (let s = 0; s < CASES; s++) {
      const x = randomBatch(3000 + s);
      // pair every row with another of its group, except in a few cases that keep a singleton
      if (s % 10 !== 0) x.groups = Int32Array.from(x.groups, (_, i) => i >> 1).map((g, i) => (i === x.B - 1 && x.B % 2 ? g - 1 : g));
      if (x.B === 1 && s % 10 !== 0) continue;
      for (const norm of [true, false])
        same(
          `grpo_passk seed ${s}`,
          () => wasm.grpoPassk(x, norm),
          () => ref.grpoPassk(x, norm),
          (a, b) => {
            cmpOut(a, b);
            compared++;
          },
        );
    }
    expect(compared).toBeGreaterThan(CASES);
    const one = { ...randomBatch(7), B: 3, T: 1, rewards: Float32Array.from([1, 0, 1]), mask: Float32Array.from([1, 1, 1]) };
    for (const k of [wasm, ref]) expect(() => k.grpoPassk({ ...one, groups: Int32Array.from([0, 1, 0]) })).toThrow(/group 1 has 1/);
  });

  it("masked whitening, with and without zeroing the padding", () => {
    for (let s = 0; s < CASES; s++) {
      const r = rng(5000 + s);
      const n = r.int(0, 90);
      const x = randomFloats(r, n, -3, 3);
      const m = randomMask(r, 1, n);
      const zero = r.bool();
      same(
        `whiten ${s}`,
        () => wasm.maskedWhiten(x, m, zero),
        () => ref.maskedWhiten(x, m, zero),
        (a, b) => expectClose(a, b),
      );
    }
  });

  it("KL penalties k1, abs, k2, k3 and the in-reward penalty", () => {
    for (let s = 0; s < CASES; s++) {
      const r = rng(7000 + s);
      const B = r.int(0, 9),
        T = r.int(0, 37);
      const logp = randomFloats(r, B * T, -30, 0),
        refp = randomFloats(r, B * T, -30, 0);
      const kind = r.pick(["k1", "abs", "k2", "k3"] as KlKind[]);
      expectClose(wasm.klPenalty(logp, refp, kind), ref.klPenalty(logp, refp, kind), kind);
      const mask = randomMask(r, B, T),
        scores = randomRewards(r, B, T, mask);
      const a = wasm.applyKlPenalty({ scores, logp, ref: refp, mask, B, T }, kind, 0.05);
      const b = ref.applyKlPenalty({ scores, logp, ref: refp, mask, B, T }, kind, 0.05);
      expectClose(a.rewards, b.rewards, "rewards");
      expectClose([a.currentKl], [b.currentKl], "current_kl");
    }
  });

  it("rollout-level helpers: row sums, row scalars, broadcast", () => {
    for (let s = 0; s < CASES; s++) {
      const r = rng(9000 + s);
      const B = r.int(0, 12),
        T = r.int(0, 20);
      const mask = randomMask(r, B, T);
      const x = r.bool() ? randomFloats(r, B * T, -1, 1) : new Float32Array(B * T).fill(r.float(-1, 1));
      expectClose(wasm.rowSums(x, B, T), ref.rowSums(x, B, T), "rowSums");
      const a = wasm.rowScalars(x, mask, B, T),
        b = ref.rowScalars(x, mask, B, T);
      expectClose(a.first, b.first, "first");
      expect(Array.from(a.status)).toEqual(Array.from(b.status));
      const K = r.int(1, 5);
      const scalars = randomFloats(r, K, -2, 2);
      const idx = Int32Array.from({ length: B }, () => r.int(0, K - 1));
      expectClose(wasm.broadcastScalars(scalars, idx, mask, B, T), ref.broadcastScalars(scalars, idx, mask, B, T), "broadcast");
    }
  });

  it("an output of one call can be the input of the next (no overwrite while placing)", () => {
    const x = randomBatch(42);
    const adv = wasm.grpo(x).advantages; // a view over Wasm memory
    const chained = wasm.maskedWhiten(adv, x.mask, true);
    const expected = ref.maskedWhiten(ref.grpo(x).advantages, x.mask, true);
    expectClose(chained, expected);
  });
});

describe("worked numbers of the estimators (docs/training.md#advantage-estimators)", () => {
  for (const k of [ref, wasm]) {
    describe(k.name, () => {
      const f32 = (xs: number[]) => Float32Array.from(xs);
      it("GAE example", () => {
        const out = k.gae({ rewards: f32([0, 0, 1]), values: f32([0.5, 0.6, 0.7]), mask: f32([1, 1, 1]), B: 1, T: 3 }, 1, 0.95);
        expect(Array.from(out.returns).map((v) => +v.toFixed(5))).toEqual([0.96575, 0.985, 1]);
        const w = Array.from(out.advantages);
        [0.991344, 0.017092, -1.008436].forEach((e, i) => expect(w[i]).toBeCloseTo(e, 5));
      });
      it("GRPO group [1,0,1,0] and a singleton", () => {
        const rewards = f32([1, 0, 1, 0, 0.5]);
        const out = k.grpo({ rewards, mask: f32([1, 1, 1, 1, 1]), groups: Int32Array.from([0, 0, 0, 0, 1]), B: 5, T: 1 });
        const a = Array.from(out.advantages);
        [0.8660239, -0.8660239, 0.8660239, -0.8660239, 0.4999995].forEach((e, i) => expect(a[i]).toBeCloseTo(e, 6));
        const dr = k.grpo({ rewards, mask: f32([1, 1, 1, 1, 0]), groups: Int32Array.from([0, 0, 0, 0, 1]), B: 5, T: 1 }, false);
        expect(Array.from(dr.advantages)).toEqual([0.5, -0.5, 0.5, -0.5, 0]);
      });
      it("RLOO", () => {
        const out = k.rloo({ rewards: f32([1, 0, 1, 0]), mask: f32([1, 1, 1, 1]), groups: new Int32Array(4), B: 4, T: 1 });
        Array.from(out.advantages).forEach((v, i) => expect(v).toBeCloseTo(i % 2 ? -0.666667 : 0.666667, 5));
      });
      it("REINFORCE++ baseline: score − group mean, whitened", () => {
        // scores [1, 0 | 0.5, 0.5] (groups of two, T = 2): minus the group means 0.5 and 0.5 → [0.5, −0.5, 0, 0]
        // on both tokens of each row: mean 0, unbiased variance (4 · 0.25) / 7 = 1/7, so ±0.5 · √7 = ±1.322876
        const out = k.reinforcePlusPlusBaseline({
          rewards: f32([0, 1, 0, 0, 0, 0.5, 0, 0.5]),
          mask: f32([1, 1, 1, 1, 1, 1, 1, 1]),
          groups: Int32Array.from([0, 0, 1, 1]),
          B: 4,
          T: 2,
        });
        [1.322876, 1.322876, -1.322876, -1.322876, 0, 0, 0, 0].forEach((e, i) => expect(out.advantages[i]).toBeCloseTo(e, 5));
      });
      it("OPO: baseline = length-weighted group mean", () => {
        // rows (T = 3): scores 1, 0, 1 in one group with 3, 1, 2 response tokens; a singleton with score 0.5
        // baseline = (3·1 + 1·0 + 2·1) / (3 + 1 + 2) = 5/6; advantages 1 − 5/6 = 1/6, 0 − 5/6 = −5/6, 1/6; singleton: 0.5 − 0
        const out = k.opo({
          rewards: f32([0, 0, 1, 0, 0, 0, 0, 1, 0, 0.5, 0, 0]),
          mask: f32([1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0]),
          groups: Int32Array.from([0, 0, 0, 1]),
          B: 4,
          T: 3,
        });
        [1 / 6, 1 / 6, 1 / 6, -5 / 6, 0, 0, 1 / 6, 1 / 6, 0, 0.5, 0, 0].forEach((e, i) => expect(out.advantages[i]).toBeCloseTo(e, 6));
      });
      it("GPG: α · (score − group mean), α = rows / non-zero scores", () => {
        // scores [1, 0, 1, 0] in one group (mean 0.5) and a singleton 0.5 (mean 0): 5 rows, 3 non-zero, α = 5/3
        // advantages ±5/3 · 0.5 = ±0.833333; the singleton 5/3 · 0.5 = 0.833333
        const out = k.gpg({
          rewards: f32([1, 0, 1, 0, 0.5]),
          mask: f32([1, 1, 1, 1, 1]),
          groups: Int32Array.from([0, 0, 0, 0, 1]),
          B: 5,
          T: 1,
        });
        [5 / 6, -5 / 6, 5 / 6, -5 / 6, 5 / 6].forEach((e, i) => expect(out.advantages[i]).toBeCloseTo(e, 6));
      });
      it("grpo_passk: only the best row, max − second max", () => {
        // scores [0.2, 1, 0.5, 0.7]: best row 1, second best 0.7, difference 0.3; group mean 0.6,
        // unbiased std sqrt((0.16 + 0.16 + 0.01 + 0.01) / 3) = 0.336650; 0.3 / (0.336650 + 1e-6) = 0.891130
        const x = { rewards: f32([0.2, 1, 0.5, 0.7]), mask: f32([1, 1, 1, 1]), groups: new Int32Array(4), B: 4, T: 1 };
        [0, 0.89113, 0, 0].forEach((e, i) => expect(k.grpoPassk(x).advantages[i]).toBeCloseTo(e, 5));
        [0, 0.3, 0, 0].forEach((e, i) => expect(k.grpoPassk(x, false).advantages[i]).toBeCloseTo(e, 6));
        // a tie at the top: max − second max = 1 − 1 = 0 for every row
        expect(Array.from(k.grpoPassk({ ...x, rewards: f32([1, 0, 1, 0]) }).advantages)).toEqual([0, 0, 0, 0]);
      });
      it("REINFORCE++", () => {
        const out = k.reinforcePlusPlus({ rewards: f32([0, 0, 1, 0, 0, 0.5, 0, 0]), mask: f32([1, 1, 1, 0, 1, 1, 0, 0]), B: 2, T: 4 }, 0.9);
        [0.81, 0.9, 1, 0, 0.45, 0.5, 0, 0].forEach((e, i) => expect(out.returns[i]).toBeCloseTo(e, 6));
        [0.318779, 0.686601, 1.095293, 0, -1.152509, -0.948164, 0, 0].forEach((e, i) => expect(out.advantages[i]).toBeCloseTo(e, 5));
      });
      it("ReMax", () => {
        const out = k.remax({ rewards: f32([0, 0, 1, 0]), mask: f32([1, 1, 1, 0]), baselines: f32([0.4]), B: 1, T: 4 });
        expect(Array.from(out.returns)).toEqual([1, 1, 1, 0]);
        [0.6, 0.6, 0.6, 0].forEach((e, i) => expect(out.advantages[i]).toBeCloseTo(e, 6));
      });
      it("KL kinds", () => {
        const got = (["k1", "abs", "k2", "k3"] as const).map((kind) => k.klPenalty(f32([-1]), f32([-1.5]), kind)[0]);
        [0.5, 0.5, 0.125, 0.1065307].forEach((e, i) => expect(got[i]).toBeCloseTo(e, 6));
      });
    });
  }
});

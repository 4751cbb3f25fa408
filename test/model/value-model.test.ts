import { describe, expect, it } from "vitest";
import { paramLayout } from "../../src/model/config.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { aggLoss } from "../../src/model/ppo-loss.ts";
import { forward } from "../../src/model/reference/model.ts";
import { valueHeadBackward, valueHeadForward } from "../../src/model/reference/value-head.ts";
import { positionGradients, responseValues, valueBackward, valueForward } from "../../src/model/reference/value-model.ts";
import type { LossAggMode } from "../../src/model/train-types.ts";
import { valueLoss } from "../../src/model/value-loss.ts";
import {
  decoderConfig,
  initValueParams,
  VALUE_HEAD_BIAS,
  VALUE_HEAD_WEIGHT,
  valueLayout,
  valueParamCount,
  valueParamsFromPolicy,
} from "../../src/model/value-params.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { dot, maxScaledErr, numericGrad, randInt, randn, randomInput, sampleIndices, tinyConfig } from "./helpers.ts";

const MODES: LossAggMode[] = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"];

describe("verl's clipped value loss", () => {
  // ε = 0.5. Token 0: v = 1 is clipped to old + ε = 0.7 and the clipped error is the larger (1.69 > 1):
  // chosen, and flat in v (the clip is active), so no gradient. Token 1: v = 0 inside the band, both
  // terms 1: torch's max splits the equal gradients, -2 in all. Token 2: v = 2 clipped to 0.5, but the
  // unclipped error is the larger (4 > 0.25): gradient 2 (v - R) = 4. Token 3 is masked out.
  const input = {
    rows: 1,
    cols: 4,
    values: [1, 0, 2, 5],
    returns: [2, 1, 0, 0],
    oldValues: [0.2, 0.1, 0, 0],
    responseMask: [1, 1, 1, 0],
  };

  it("matches a hand-worked case (token-mean and seq-mean-token-sum)", () => {
    const r = valueLoss(input, { cliprangeValue: 0.5 });
    expect(r.vf_loss).toBeCloseTo((0.5 * (1.69 + 1 + 4)) / 3, 7);
    expect(r.vf_clipfrac).toBeCloseTo(1 / 3, 7);
    expect(r.vpred_mean).toBeCloseTo(1, 7);
    expect(Array.from(r.dValues).map((x) => +x.toFixed(7))).toEqual([0, +(-1 / 3).toFixed(7), +(2 / 3).toFixed(7), 0]);
    const seq = valueLoss(input, { cliprangeValue: 0.5, lossAggMode: "seq-mean-token-sum" });
    expect(seq.vf_loss).toBeCloseTo(0.5 * 6.69, 7);
    expect(Array.from(seq.dValues, (x) => x + 0)).toEqual([0, -1, 2, 0]);
  });

  it("defaults to verl's cliprange_value 0.5 and rejects a negative or missing-number range", () => {
    expect(valueLoss(input).vf_loss).toBe(valueLoss(input, { cliprangeValue: 0.5 }).vf_loss);
    expect(() => valueLoss(input, { cliprangeValue: -0.1 })).toThrow(ValidationError);
    expect(() => valueLoss(input, { cliprangeValue: Number.NaN })).toThrow(/cliprange_value/);
    expect(() => valueLoss({ ...input, returns: [1, 2] })).toThrow(/returns has 2 elements/);
  });

  it("a wide clip range is plain 0.5 * agg((v - R)^2) in every aggregation mode", () => {
    const rng = new Rng(3);
    const rows = 3;
    const cols = 5;
    const values = randn(rng, rows * cols);
    const returns = randn(rng, rows * cols);
    const mask = Array.from({ length: rows * cols }, (_, k) => (k % 7 === 3 ? 0 : 1));
    for (const mode of MODES) {
      const r = valueLoss(
        { rows, cols, values, returns, oldValues: values, responseMask: mask },
        { cliprangeValue: 1e9, lossAggMode: mode },
      );
      const sq = values.map((v, k) => (v - returns[k]) ** 2);
      expect(r.vf_loss).toBeCloseTo(0.5 * aggLoss(sq, mask, rows, cols, mode), 10);
      expect(r.vf_clipfrac).toBe(0);
    }
  });

  it.each(MODES)("its gradient matches finite differences (%s)", (mode) => {
    const rng = new Rng(11);
    const rows = 3;
    const cols = 6;
    const n = rows * cols;
    const oldValues = randn(rng, n);
    // values inside, above and below the band; returns on either side
    const values = oldValues.map((o, k) => o + [0.1, 0.9, -0.8, -0.2, 1.5, 0.3][k % 6]);
    const returns = randn(rng, n, 2);
    const responseMask = Array.from({ length: n }, (_, k) => (k % 5 === 4 ? 0 : 1));
    const f = (): number =>
      valueLoss({ rows, cols, values, returns, oldValues, responseMask }, { cliprangeValue: 0.5, lossAggMode: mode }).vf_loss;
    const r = valueLoss({ rows, cols, values, returns, oldValues, responseMask }, { cliprangeValue: 0.5, lossAggMode: mode });
    expect(r.vf_clipfrac).toBeGreaterThan(0);
    const numeric = numericGrad(f, values, 1e-6);
    for (let k = 0; k < n; k++) expect(r.dValues[k]).toBeCloseTo(numeric[k], 6);
  });
});

describe("the value head", () => {
  it("computes h · w + b per row, and its backward matches finite differences", () => {
    const rng = new Rng(5);
    const rows = 4;
    const d = 6;
    const h = randn(rng, rows * d);
    const w = randn(rng, d);
    const b = 0.3;
    const v = valueHeadForward(h, w, b, rows, d);
    expect(v).toBeInstanceOf(Float64Array);
    expect(v[2]).toBeCloseTo(dot(h.subarray(2 * d, 3 * d), w) + b, 12);
    const dv = randn(rng, rows);
    const g = valueHeadBackward(h, w, dv, rows, d);
    const loss = (bias = b): number => dot(valueHeadForward(h, w, bias, rows, d), dv);
    const numH = numericGrad(() => loss(), h);
    const numW = numericGrad(() => loss(), w);
    for (let i = 0; i < h.length; i++) expect(g.dh[i]).toBeCloseTo(numH[i], 8);
    for (let i = 0; i < d; i++) expect(g.dw[i]).toBeCloseTo(numW[i], 8);
    expect(g.db).toBeCloseTo((loss(b + 1e-6) - loss(b - 1e-6)) / 2e-6, 8);
  });
});

describe("the critic's parameters", () => {
  it("are the decoder's without the LM head, then value_head.weight [d, 1] and value_head.bias [1]", () => {
    const c = tinyConfig(new Rng(1));
    const layout = valueLayout(c);
    const names = layout.map((s) => s.name);
    expect(names).not.toContain("lm_head");
    expect(names.slice(0, -2)).toEqual(
      paramLayout(c)
        .map((s) => s.name)
        .filter((n) => n !== "lm_head"),
    );
    expect(layout.slice(-2).map((s) => [s.name, s.shape])).toEqual([
      [VALUE_HEAD_WEIGHT, [c.d_model, 1]],
      [VALUE_HEAD_BIAS, [1]],
    ]);
    const last = layout[layout.length - 1];
    expect(last.offset + last.size).toBe(valueParamCount(c));
  });

  it("start from a policy's decoder (flat or by name) with a fresh head: N(0, 0.02) weight, zero bias", () => {
    const c = tinyConfig(new Rng(2));
    const policy = initParams(c, 9);
    const critic = valueParamsFromPolicy(c, policy, 4);
    const views = Object.fromEntries(paramLayout(c).map((s) => [s.name, policy.subarray(s.offset, s.offset + s.size)]));
    for (const s of valueLayout(c).slice(0, -2)) expect(critic.subarray(s.offset, s.offset + s.size)).toEqual(views[s.name]);
    const { lm_head: _dropped, ...byName } = views;
    expect(valueParamsFromPolicy(c, byName as Record<string, Float32Array>, 4)).toEqual(critic);
    const head = critic.subarray(valueLayout(c).at(-2)!.offset);
    expect(head[head.length - 1]).toBe(0);
    const w = Array.from(head.subarray(0, -1));
    expect(w.some((x) => x !== 0)).toBe(true);
    expect(Math.max(...w.map(Math.abs))).toBeLessThan(0.2);
    // the head's stream is not the decoder's (a same-seed init starts with the same normals)
    expect(initValueParams(c, 9).subarray(0, c.d_model)).toEqual(policy.subarray(0, c.d_model));
    expect(Array.from(initValueParams(c, 9).subarray(-c.d_model - 1, -1))).not.toEqual(Array.from(policy.subarray(0, c.d_model)));
    expect(() => valueParamsFromPolicy(c, policy.subarray(1))).toThrow(ValidationError);
  });
});

describe("the critic's forward and backward", () => {
  it("reads response token t's value at column P - 1 + t: the state before the token (verl's values[:, -R-1:-1])", () => {
    const perPosition = Float64Array.from({ length: 2 * 7 }, (_, k) => k);
    // P = 3, R = 4: row 0 reads columns 2..5, row 1 columns 9..12
    expect(Array.from(responseValues(perPosition, 2, 3, 4))).toEqual([2, 3, 4, 5, 9, 10, 11, 12]);
    expect(Array.from(positionGradients([1, 2, 3, 4, 5, 6, 7, 8], 2, 3, 4))).toEqual([0, 0, 1, 2, 3, 4, 0, 0, 0, 5, 6, 7, 8, 0]);

    // so V(s_t) does not see token t, and does see every token before it
    const rng = new Rng(8);
    const c = tinyConfig(rng);
    const params = initValueParams(c, 1);
    const P = 3;
    const R = 4;
    const input = randomInput(rng, c.vocab_size, 1, P + R);
    input.attentionMask.fill(1);
    input.positionIds.set([0, 1, 2, 3, 4, 5, 6]);
    const before = responseValues(valueForward(c, params, input).values, 1, P, R);
    const changed = { ...input, inputIds: input.inputIds.slice() };
    changed.inputIds[P + 2] = (changed.inputIds[P + 2] + 1) % c.vocab_size; // response token 2
    const after = responseValues(valueForward(c, params, changed).values, 1, P, R);
    expect(Array.from(after.subarray(0, 3))).toEqual(Array.from(before.subarray(0, 3)));
    expect(after[3]).not.toBe(before[3]);
  });

  it.each([
    [31, {}],
    [32, { tie_embeddings: true }],
    [33, { qkv_bias: true }],
    [34, { qk_norm: true }],
  ])("every parameter's gradient matches finite differences (seed %i, %o)", (seed, extra) => {
    const rng = new Rng(seed);
    const c = tinyConfig(rng, extra);
    // larger, random weights than the init (norm weights around 1), so every path carries a visible gradient
    const params = randn(rng, valueParamCount(c), 0.4);
    for (const s of valueLayout(c))
      if (s.shape.length === 1 && s.name !== VALUE_HEAD_BIAS) for (let i = s.offset; i < s.offset + s.size; i++) params[i] += 1;
    const B = randInt(rng, 1, 3);
    const T = randInt(rng, 4, 7);
    const input = randomInput(rng, c.vocab_size, B, T);
    const dv = randn(rng, B * T);
    const loss = (): number => dot(valueForward(c, params, input).values, dv);
    const fwd = valueForward(c, params, input);
    const grads = valueBackward(c, params, fwd.cache, dv);
    expect(grads).toBeInstanceOf(Float64Array);
    for (const spec of valueLayout(c)) {
      const idx = sampleIndices(rng, spec.size, 6).map((i) => i + spec.offset);
      const numeric = numericGrad(loss, params, 1e-5, idx);
      expect(maxScaledErr(grads, numeric, idx), spec.name).toBeLessThan(1e-6);
    }
  });

  it("the decoder under the head is the policy's: same hidden states as the LM's forward", () => {
    const rng = new Rng(40);
    const c = tinyConfig(rng);
    const policy = initParams(c, 3);
    const critic = valueParamsFromPolicy(c, policy, 1);
    const input = randomInput(rng, c.vocab_size, 2, 5);
    const a = valueForward(c, critic, input).cache.hFinal;
    const views = Object.fromEntries(paramLayout(decoderConfig(c)).map((s) => [s.name, critic.subarray(s.offset, s.offset + s.size)]));
    expect(Object.keys(views)).not.toContain("lm_head");
    expect(Array.from(a)).toEqual(Array.from(forward(c, policy, input).cache.hFinal));
  });
});

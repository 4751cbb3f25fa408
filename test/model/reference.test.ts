import { describe, expect, it } from "vitest";
import { paramCount, paramLayout, parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { backward, forward } from "../../src/model/reference/model.ts";
import { dot, maxScaledErr, numericGrad, randInt, randn, randomInput, sampleIndices, tinyConfig as randomTinyConfig } from "./helpers.ts";

function tinyConfig(rng: Rng, tie: boolean): ModelConfig {
  return randomTinyConfig(rng, { tie_embeddings: tie });
}

describe("reference model", () => {
  it("lays out parameters in the documented order with matching counts", () => {
    const c = parseModelConfig({
      vocab_size: 10,
      d_model: 8,
      n_layers: 2,
      n_heads: 4,
      n_kv_heads: 2,
      d_ff: 12,
      max_seq_len: 8,
      rope_theta: 1e4,
      norm_eps: 1e-5,
      tie_embeddings: false,
    });
    const names = paramLayout(c).map((s) => s.name);
    expect(names.slice(0, 10)).toEqual([
      "tok_embeddings",
      "layers.0.attn_norm",
      "layers.0.wq",
      "layers.0.wk",
      "layers.0.wv",
      "layers.0.wo",
      "layers.0.ffn_norm",
      "layers.0.w_gate",
      "layers.0.w_up",
      "layers.0.w_down",
    ]);
    expect(names.slice(-2)).toEqual(["norm", "lm_head"]);
    const layer = 8 + 8 * 8 + 8 * 4 * 2 + 8 * 8 + 8 + 3 * 8 * 12;
    expect(paramCount(c)).toBe(10 * 8 + 2 * layer + 8 + 8 * 10);
    expect(paramCount({ ...c, tie_embeddings: true })).toBe(10 * 8 + 2 * layer + 8);
  });

  it("rejects configs whose heads do not divide", () => {
    expect(() =>
      parseModelConfig({
        vocab_size: 10,
        d_model: 8,
        n_layers: 1,
        n_heads: 3,
        n_kv_heads: 1,
        d_ff: 4,
        max_seq_len: 8,
        rope_theta: 1e4,
        norm_eps: 1e-5,
        tie_embeddings: true,
      }),
    ).toThrow(/n_heads/);
  });

  it("log-probs are 0 at t = 0, normalised, and entropies non-negative", () => {
    const rng = new Rng(5);
    const c = tinyConfig(rng, true);
    const params = initParams(c, 1);
    const input = randomInput(rng, c.vocab_size, 2, 6);
    const { logprob, entropy, logits } = forward(c, params, input);
    for (let b = 0; b < 2; b++) {
      expect(logprob[b * 6]).toBe(0);
      expect(entropy[b * 6]).toBe(0);
    }
    // logprob[b,t] is log softmax of logits row (b, t-1) at input_ids[b, t]
    const V = c.vocab_size;
    const row = logits.subarray(3 * V, 4 * V);
    const lse = Math.log(Array.from(row).reduce((a, z) => a + Math.exp(z), 0));
    expect(logprob[4]).toBeCloseTo(row[input.inputIds[4]] - lse, 5);
    for (let i = 0; i < entropy.length; i++) expect(entropy[i]).toBeGreaterThanOrEqual(0);
  });

  it("a real token's outputs do not depend on padding tokens or on later tokens", () => {
    const rng = new Rng(6);
    const c = tinyConfig(rng, true);
    const params = initParams(c, 2);
    const input = randomInput(rng, c.vocab_size, 1, 7);
    input.attentionMask.set([0, 0, 1, 1, 1, 1, 1]);
    const base = forward(c, params, input).logprob;
    const changed = { ...input, inputIds: input.inputIds.slice() };
    changed.inputIds[0] = (changed.inputIds[0] + 1) % c.vocab_size; // a padding token
    changed.inputIds[6] = (changed.inputIds[6] + 1) % c.vocab_size; // the last token
    const after = forward(c, params, changed).logprob;
    for (let t = 3; t < 6; t++) expect(after[t]).toBe(base[t]);
  });

  it("float32 and float64 runs agree closely (the trainer runs in float32)", () => {
    const rng = new Rng(7);
    const c = tinyConfig(rng, false);
    const p32 = initParams(c, 4).map((x) => x * 10);
    const input = randomInput(rng, c.vocab_size, 2, 7);
    const a = forward(c, p32, input);
    const b = forward(c, Float64Array.from(p32), input);
    expect(a.logprob).toBeInstanceOf(Float32Array);
    expect(b.logprob).toBeInstanceOf(Float64Array);
    for (let i = 0; i < a.logprob.length; i++) expect(Math.abs(a.logprob[i] - b.logprob[i])).toBeLessThan(1e-5);
    const g = randn(rng, 14);
    const ga = backward(c, p32, a.cache, g, g);
    const gb = backward(c, Float64Array.from(p32), b.cache, g, g);
    let worst = 0;
    let scale = 0;
    for (let i = 0; i < ga.length; i++) {
      worst = Math.max(worst, Math.abs(ga[i] - gb[i]));
      scale = Math.max(scale, Math.abs(gb[i]));
    }
    expect(worst / scale).toBeLessThan(1e-5);
  });

  it.each([
    [21, true],
    [22, false],
    [23, true],
  ])("backward matches finite differences for every tensor (seed %i, tied %s)", (seed, tie) => {
    const rng = new Rng(seed);
    const c = tinyConfig(rng, tie);
    // Larger, random weights than the init (norm weights too), so every path carries a visible gradient.
    const params = randn(rng, paramCount(c), 0.4);
    for (const s of paramLayout(c)) if (s.shape.length === 1) for (let i = s.offset; i < s.offset + s.size; i++) params[i] += 1;
    const B = randInt(rng, 1, 3);
    const T = randInt(rng, 4, 7);
    const input = randomInput(rng, c.vocab_size, B, T);
    const gl = randn(rng, B * T);
    const ge = randn(rng, B * T);
    const loss = (): number => {
      const o = forward(c, params, input);
      return dot(o.logprob, gl) + dot(o.entropy, ge);
    };
    const fwd = forward(c, params, input);
    const grads = backward(c, params, fwd.cache, gl, ge);
    for (const spec of paramLayout(c)) {
      const idx = sampleIndices(rng, spec.size, 6).map((i) => i + spec.offset);
      const numeric = numericGrad(loss, params, 1e-5, idx);
      expect(maxScaledErr(grads, numeric, idx), spec.name).toBeLessThan(1e-6);
    }
  });

  it.each([
    [31, true, 0.6],
    [32, false, 1.7],
  ])(
    "temperature: log-probs and entropies of the logits / T, and a backward that matches finite differences (seed %i, tied %s, T %f)",
    (seed, tie, T) => {
      const rng = new Rng(seed);
      const c = tinyConfig(rng, tie);
      const params = randn(rng, paramCount(c), 0.4);
      for (const s of paramLayout(c)) if (s.shape.length === 1) for (let i = s.offset; i < s.offset + s.size; i++) params[i] += 1;
      const B = 2;
      const L = 5;
      const input = randomInput(rng, c.vocab_size, B, L);
      const plain = forward(c, params, input);
      const hot = forward(c, params, input, { temperature: T });
      expect(Array.from(forward(c, params, input, { temperature: 1 }).logprob)).toEqual(Array.from(plain.logprob));
      // by hand: log-softmax and entropy of the plain logits divided by T
      const V = c.vocab_size;
      for (let b = 0; b < B; b++)
        for (let t = 1; t < L; t++) {
          const row = (b * L + t - 1) * V;
          const z = Array.from(plain.logits.subarray(row, row + V), (x) => x / T);
          const mx = Math.max(...z);
          const lse = mx + Math.log(z.reduce((a, x) => a + Math.exp(x - mx), 0));
          const target = input.inputIds[b * L + t];
          expect(hot.logprob[b * L + t]).toBeCloseTo(z[target] - lse, 10);
          expect(hot.entropy[b * L + t]).toBeCloseTo(-z.reduce((a, x) => a + Math.exp(x - lse) * (x - lse), 0), 10);
        }
      expect(Math.abs(hot.logprob[1] - plain.logprob[1])).toBeGreaterThan(1e-3);
      const gl = randn(rng, B * L);
      const ge = randn(rng, B * L);
      const loss = (): number => {
        const o = forward(c, params, input, { temperature: T });
        return dot(o.logprob, gl) + dot(o.entropy, ge);
      };
      const grads = backward(c, params, hot.cache, gl, ge);
      for (const spec of paramLayout(c)) {
        const idx = sampleIndices(rng, spec.size, 6).map((i) => i + spec.offset);
        const numeric = numericGrad(loss, params, 1e-5, idx);
        expect(maxScaledErr(grads, numeric, idx), spec.name).toBeLessThan(1e-6);
      }
    },
  );
});

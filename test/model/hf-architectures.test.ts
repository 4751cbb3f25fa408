// The reference engine on the Hugging Face architecture features: q/k/v bias (Qwen2), per-head q/k
// RMSNorm and an explicit head_dim (Qwen3), llama3 RoPE scaling (Llama 3.1/3.2), weights by name.
import { describe, expect, it } from "vitest";
import { batchFromTokens } from "../../src/model/batch.ts";
import { paramCount, paramLayout, parseModelConfig, ropeInvFreq, type ModelConfig } from "../../src/model/config.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { CpuDecoder, generate } from "../../src/model/generate.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { paramViews } from "../../src/model/params.ts";
import { backward, forward, prefillForward, sequenceInput } from "../../src/model/reference/model.ts";
import * as ops from "../../src/model/reference/ops.ts";
import { dot, maxScaledErr, numericGrad, randInt, randn, randomInput, sampleIndices } from "./helpers.ts";

type Features = { bias?: boolean; qkNorm?: boolean; headDim?: number; llama3?: boolean; kvHeads?: number };

function hfConfig(rng: Rng, f: Features, tie = false): ModelConfig {
  const kv = f.kvHeads ?? randInt(rng, 1, 2);
  const heads = 2 * kv;
  return parseModelConfig({
    vocab_size: randInt(rng, 7, 13),
    d_model: 8,
    n_layers: 2,
    n_heads: heads,
    n_kv_heads: kv,
    d_ff: randInt(rng, 3, 7),
    max_seq_len: 32,
    rope_theta: 10000,
    norm_eps: 1e-6,
    tie_embeddings: tie,
    head_dim: f.headDim,
    qkv_bias: f.bias,
    qk_norm: f.qkNorm,
    rope_scaling: f.llama3
      ? { rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8 }
      : null,
  });
}

/** Weights larger than the init, norms (and biases) around 1, so every path carries a visible gradient. */
function randomParams(rng: Rng, c: ModelConfig): Float64Array {
  const params = randn(rng, paramCount(c), 0.4);
  for (const s of paramLayout(c)) if (s.shape.length === 1) for (let i = s.offset; i < s.offset + s.size; i++) params[i] += 1;
  return params;
}

const FEATURES: Array<[string, Features]> = [
  ["qkv bias", { bias: true }],
  ["qk-norm + head_dim 4 != d/heads", { qkNorm: true, headDim: 4 }],
  ["llama3 rope scaling", { llama3: true }],
  ["everything", { bias: true, qkNorm: true, headDim: 6, llama3: true }],
];

describe("reference engine: Hugging Face architecture features", () => {
  it("lays out bias and qk-norm tensors after wv, before wo", () => {
    const c = hfConfig(new Rng(1), { bias: true, qkNorm: true, headDim: 4 });
    const names = paramLayout(c)
      .map((s) => s.name)
      .filter((n) => n.startsWith("layers.0."));
    expect(names).toEqual(
      ["attn_norm", "wq", "wk", "wv", "bq", "bk", "bv", "q_norm", "k_norm", "wo", "ffn_norm", "w_gate", "w_up", "w_down"].map(
        (n) => `layers.0.${n}`,
      ),
    );
    const shapes = Object.fromEntries(paramLayout(c).map((s) => [s.name, s.shape]));
    expect(shapes["layers.0.wq"]).toEqual([8, c.n_heads * 4]);
    expect(shapes["layers.0.q_norm"]).toEqual([4]);
    expect(shapes["layers.0.bk"]).toEqual([c.n_kv_heads * 4]);
  });

  it.each(FEATURES)("backward matches finite differences for every tensor (%s)", (_name, f) => {
    const rng = new Rng(31);
    const c = hfConfig(rng, f);
    const params = randomParams(rng, c);
    const B = 2;
    const T = randInt(rng, 4, 6);
    const input = randomInput(rng, c.vocab_size, B, T);
    // positions beyond the llama3 original context, so the scaled bands are exercised
    if (f.llama3) for (let i = 0; i < input.positionIds.length; i++) input.positionIds[i] += 9;
    const gl = randn(rng, B * T);
    const ge = randn(rng, B * T);
    const loss = (): number => {
      const o = forward(c, params, input);
      return dot(o.logprob, gl) + dot(o.entropy, ge);
    };
    const grads = backward(c, params, forward(c, params, input).cache, gl, ge);
    for (const spec of paramLayout(c)) {
      const idx = sampleIndices(rng, spec.size, 6).map((i) => i + spec.offset);
      expect(maxScaledErr(grads, numericGrad(loss, params, 1e-5, idx), idx), spec.name).toBeLessThan(1e-6);
    }
  });

  it("zero biases give the bias-free model's logits", () => {
    const rng = new Rng(5);
    const plain = hfConfig(rng, {});
    const biased = { ...plain, qkv_bias: true };
    const p = initParams(plain, 3);
    const views = paramViews(plain, p);
    const withBias: Record<string, Float32Array> = {};
    for (const s of paramLayout(biased)) withBias[s.name] = views[s.name] ?? new Float32Array(s.size);
    const input = randomInput(rng, plain.vocab_size, 2, 5);
    expect(Array.from(forward(biased, withBias, input).logits)).toEqual(Array.from(forward(plain, p, input).logits));
  });

  it("weights by name give the flat buffer's logits, and a missing or unknown tensor is named", () => {
    const rng = new Rng(6);
    const c = hfConfig(rng, { bias: true, qkNorm: true, headDim: 4 });
    const flat = initParams(c, 4);
    const byName: Record<string, Float32Array> = {};
    for (const s of paramLayout(c)) byName[s.name] = flat.slice(s.offset, s.offset + s.size);
    const input = randomInput(rng, c.vocab_size, 1, 6);
    expect(Array.from(forward(c, byName, input).logits)).toEqual(Array.from(forward(c, flat, input).logits));
    const { "layers.1.k_norm": _dropped, ...missing } = byName;
    expect(() => forward(c, missing, input)).toThrow(/layers\.1\.k_norm/);
    expect(() => forward(c, { ...byName, "layers.0.extra": new Float32Array(1) }, input)).toThrow(/layers\.0\.extra/);
    expect(() => forward(c, { ...byName, norm: new Float32Array(2) }, input)).toThrow(/norm has 2 elements/);
  });

  it("KV-cached decode gives the full forward's logits at every step (bias + qk-norm + head_dim + GQA + llama3)", () => {
    const rng = new Rng(7);
    // 4 query heads on 2 kv heads, head_dim 6 != 8/4, original context 8 so positions 8+ are scaled
    const c = hfConfig(rng, { bias: true, qkNorm: true, headDim: 6, llama3: true, kvHeads: 2 });
    expect([c.n_heads, c.n_kv_heads]).toEqual([4, 2]);
    const f32 = Float32Array.from(randomParams(rng, c));
    const prompt = [1, 4, 2, 6, 3, 5, 0, 2, 1, 3];
    const steps = 8;
    const out = generate(c, f32, prompt, { maxTokens: steps, temperature: 0, stop: [] });
    expect(out.tokens).toHaveLength(steps);
    const seq = [...prompt, ...out.tokens];
    const full = forward(c, f32, sequenceInput(seq));
    const V = c.vocab_size;
    const row = (t: number): Float32Array => full.logits.subarray(t * V, (t + 1) * V);
    // the decoder's logits after the prompt and after each fed token equal the full forward's rows
    const decoder = new CpuDecoder(c, f32, seq.length);
    const got = [decoder.prefill(prompt), ...out.tokens.map((tok) => decoder.step(tok))];
    expect(decoder.length).toBe(seq.length);
    got.forEach((logits, i) => {
      const want = row(prompt.length - 1 + i);
      expect(logits).toHaveLength(V);
      for (let j = 0; j < V; j++) expect(Math.abs(logits[j] - want[j]), `step ${i} token ${j}`).toBeLessThan(1e-5);
    });
    // generate's greedy tokens and log-probs are those of the full forward
    out.tokens.forEach((tok, i) => {
      const t = prompt.length + i;
      expect(full.logprob[t]).toBeCloseTo(out.logprobs[i], 5);
      expect(Array.from(row(t - 1)).indexOf(Math.max(...row(t - 1)))).toBe(tok);
    });
  });

  it("prefill keeps only the last row's logits and each layer's rotated keys and values", () => {
    const rng = new Rng(9);
    const c = hfConfig(rng, { bias: true, qkNorm: true, headDim: 6, llama3: true, kvHeads: 1 });
    const f32 = Float32Array.from(randomParams(rng, c));
    const prompt = [3, 1, 4, 1, 5, 2, 6, 5, 3, 5];
    const pre = prefillForward(c, f32, prompt);
    const full = forward(c, f32, sequenceInput(prompt));
    const L = prompt.length;
    expect(Array.from(pre.logits)).toEqual(Array.from(full.logits.subarray((L - 1) * c.vocab_size)));
    expect(pre.keys).toHaveLength(c.n_layers);
    for (let l = 0; l < c.n_layers; l++) {
      expect(pre.keys[l]).toHaveLength(L * c.n_kv_heads * 6);
      expect(Array.from(pre.keys[l])).toEqual(Array.from(full.cache.layers[l].kr));
      expect(Array.from(pre.values[l])).toEqual(Array.from(full.cache.layers[l].v));
    }
    expect(Object.keys(pre).sort()).toEqual(["keys", "logits", "values"]);
  });

  it("attention without kept probabilities gives the same output and an empty probs array", () => {
    const rng = new Rng(10);
    const dims = { batch: 2, seq: 5, heads: 4, kvHeads: 2, headDim: 6 };
    const q = Float32Array.from(randn(rng, 2 * 5 * 4 * 6));
    const k = Float32Array.from(randn(rng, 2 * 5 * 2 * 6));
    const v = Float32Array.from(randn(rng, 2 * 5 * 2 * 6));
    const mask = randomInput(rng, 4, 2, 5).attentionMask;
    const kept = ops.attention(q, k, v, mask, dims);
    const lean = ops.attention(q, k, v, mask, dims, false);
    expect(kept.probs).toHaveLength(2 * 4 * 5 * 5);
    expect(lean.probs).toHaveLength(0);
    expect(Array.from(lean.out)).toEqual(Array.from(kept.out));
  });

  it("the KV cache is sized for the request, not max_seq_len, and refuses to overflow", () => {
    const rng = new Rng(11);
    // a max_seq_len whose cache could not even be allocated: generation works because it never is
    const c = { ...hfConfig(rng, { qkNorm: true, headDim: 4 }), max_seq_len: 2 ** 31 };
    const f32 = Float32Array.from(randomParams(rng, c));
    const out = generate(c, f32, [1, 2, 3], { maxTokens: 5, temperature: 0, stop: [] });
    expect(out.tokens).toHaveLength(5);
    const small = { ...c, max_seq_len: 32 };
    expect(out.tokens).toEqual(generate(small, f32, [1, 2, 3], { maxTokens: 5, temperature: 0, stop: [] }).tokens);
    const decoder = new CpuDecoder(c, f32, 4);
    decoder.prefill([1, 2, 3]);
    decoder.step(out.tokens[0]);
    expect(() => decoder.step(out.tokens[1])).toThrow(/needs 5 positions, the KV cache holds 4/);
    expect(() => new CpuDecoder(c, f32, 4).prefill([1, 2, 3, 4, 5])).toThrow(/KV cache holds 4/);
    expect(() => decoder.prefill([1])).toThrow(/empty KV cache/);
  });

  it("backward from weights by name returns the flat buffer's gradients, in layout order", () => {
    const rng = new Rng(12);
    const c = hfConfig(rng, { bias: true, qkNorm: true, headDim: 4, llama3: true });
    const flat = randomParams(rng, c);
    const byName = Object.fromEntries(paramLayout(c).map((s) => [s.name, flat.slice(s.offset, s.offset + s.size)]));
    const input = randomInput(rng, c.vocab_size, 2, 5);
    const gl = randn(rng, 10);
    const ge = randn(rng, 10);
    const a = backward(c, flat, forward(c, flat, input).cache, gl, ge);
    const b = backward(c, byName, forward(c, byName, input).cache, gl, ge);
    expect(b).toBeInstanceOf(Float64Array);
    expect(b).toHaveLength(paramCount(c));
    expect(Array.from(b)).toEqual(Array.from(a));
  });

  it("the CPU trainer starts from weights by name as from the flat buffer", async () => {
    const rng = new Rng(13);
    const c = hfConfig(rng, { bias: true, qkNorm: true, headDim: 4 });
    const flat = Float32Array.from(randomParams(rng, c));
    const byName = Object.fromEntries(paramLayout(c).map((s) => [s.name, flat.slice(s.offset, s.offset + s.size)]));
    const rows = [
      { prompt: [1, 2, 3], response: [4, 5] },
      { prompt: [2], response: [6, 1, 0] },
    ];
    const batch = batchFromTokens(rows, { padId: 0 });
    const a = new CpuTrainer({ config: c, params: flat, lr: 1e-2 });
    const b = new CpuTrainer({ config: c, params: byName, lr: 1e-2 });
    const old = (await a.logProbs(batch)).log_probs;
    expect(Array.from((await b.logProbs(batch)).log_probs)).toEqual(Array.from(old));
    const adv = Float32Array.from({ length: old.length }, (_, i) => (i % 2 ? 1 : -1));
    await a.policyStep(batch, adv, old);
    await b.policyStep(batch, adv, old);
    const pa = (await a.getState()).params;
    expect(Array.from((await b.getState()).params)).toEqual(Array.from(pa));
    expect(Array.from(pa)).not.toEqual(Array.from(flat));
    // the trainer owns a copy: the caller's tensors are untouched
    const bq = paramLayout(c).find((s) => s.name === "layers.0.bq")!;
    expect(Array.from(byName[bq.name])).toEqual(Array.from(flat.subarray(bq.offset, bq.offset + bq.size)));
    const { "layers.0.q_norm": _gone, ...missing } = byName;
    expect(() => new CpuTrainer({ config: c, params: missing })).toThrow(/layers\.0\.q_norm/);
  });

  it("greedy generation from weights by name equals the flat buffer's", () => {
    const rng = new Rng(8);
    const c = hfConfig(rng, { qkNorm: true, headDim: 4 }, true);
    const flat = Float32Array.from(randomParams(rng, c));
    const byName = Object.fromEntries(paramLayout(c).map((s) => [s.name, flat.slice(s.offset, s.offset + s.size)]));
    const a = generate(c, flat, [2, 3, 1], { maxTokens: 10, temperature: 0, stop: [] });
    const b = generate(c, byName, [2, 3, 1], { maxTokens: 10, temperature: 0, stop: [] });
    expect(b.tokens).toEqual(a.tokens);
  });

  it("llama3 RoPE frequencies follow Hugging Face's rule at Llama 3.2's numbers", () => {
    const scaling = {
      rope_type: "llama3" as const,
      factor: 32,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 8192,
    };
    const got = ropeInvFreq(64, 500000, scaling);
    // Independent computation: the three wavelength bands written out directly.
    let low = 0;
    let mid = 0;
    let high = 0;
    for (let i = 0; i < 32; i++) {
      const base = 1 / 500000 ** ((2 * i) / 64);
      const wavelength = (2 * Math.PI) / base;
      let want: number;
      if (wavelength < 8192 / 4) {
        want = base;
        high++;
      } else if (wavelength > 8192 / 1) {
        want = base / 32;
        low++;
      } else {
        const smooth = (8192 / wavelength - 1) / (4 - 1);
        want = (1 - smooth) * (base / 32) + smooth * base;
        mid++;
      }
      expect(got[i]).toBeCloseTo(want, 15);
      expect(Math.abs(got[i] - want) / want).toBeLessThan(1e-12);
    }
    expect(low).toBeGreaterThan(0);
    expect(mid).toBeGreaterThan(0);
    expect(high).toBeGreaterThan(0);
    expect(Array.from(ropeInvFreq(64, 500000))).toEqual(Array.from({ length: 32 }, (_, i) => 500000 ** ((-2 * i) / 64)));
  });

  it("rejects an odd head_dim and a d_model not divisible by heads without head_dim", () => {
    const base = {
      vocab_size: 8,
      d_model: 6,
      n_layers: 1,
      n_heads: 4,
      n_kv_heads: 2,
      d_ff: 4,
      max_seq_len: 8,
      rope_theta: 1e4,
      norm_eps: 1e-6,
      tie_embeddings: true,
    };
    expect(() => parseModelConfig(base)).toThrow(/n_heads/);
    expect(parseModelConfig({ ...base, head_dim: 4 }).head_dim).toBe(4);
    expect(() => parseModelConfig({ ...base, head_dim: 3 })).toThrow(/head_dim/);
  });
});

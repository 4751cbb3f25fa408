// The reference engine on the Hugging Face architecture features: q/k/v bias (Qwen2), per-head q/k
// RMSNorm and an explicit head_dim (Qwen3), llama3 RoPE scaling (Llama 3.1/3.2), weights by name.
import { describe, expect, it } from "vitest";
import { paramCount, paramLayout, parseModelConfig, ropeInvFreq, type ModelConfig } from "../../src/model/config.ts";
import { generate } from "../../src/model/generate.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { paramViews } from "../../src/model/params.ts";
import { backward, forward, prefillForward, sequenceInput } from "../../src/model/reference.ts";
import { dot, maxScaledErr, numericGrad, randInt, randn, randomInput, sampleIndices } from "./helpers.ts";

type Features = { bias?: boolean; qkNorm?: boolean; headDim?: number; llama3?: boolean };

function hfConfig(rng: Rng, f: Features, tie = false): ModelConfig {
  const kv = randInt(rng, 1, 2);
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

  it("KV-cached decode equals the full forward, prefill computes the last row only", () => {
    const rng = new Rng(7);
    const c = hfConfig(rng, { bias: true, qkNorm: true, headDim: 6, llama3: true });
    const p = randomParams(rng, c);
    const f32 = Float32Array.from(p);
    const prompt = [1, 4, 2, 6, 3, 5, 0, 2, 1, 3];
    const out = generate(c, f32, prompt, { maxTokens: 8, temperature: 0, stop: [] });
    expect(out.tokens).toHaveLength(8);
    // Replay the whole sequence through the full forward: each greedy token is the argmax there, and
    // the log-probs agree.
    const seq = [...prompt, ...out.tokens];
    const full = forward(c, f32, sequenceInput(seq));
    out.tokens.forEach((tok, i) => {
      const t = prompt.length + i;
      expect(full.logprob[t]).toBeCloseTo(out.logprobs[i], 4);
      const row = full.logits.subarray((t - 1) * c.vocab_size, t * c.vocab_size);
      expect(row.indexOf(Math.max(...row))).toBe(tok);
    });
    const pre = prefillForward(c, f32, prompt);
    expect(pre.logits).toHaveLength(c.vocab_size);
    const last = full.logits.subarray((prompt.length - 1) * c.vocab_size, prompt.length * c.vocab_size);
    for (let j = 0; j < c.vocab_size; j++) expect(pre.logits[j]).toBeCloseTo(last[j], 5);
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

// LoRA in the reference engine: step 0 (lora_b zero) is the base model exactly, the adapter's backward
// matches finite differences for every targeted projection (with biases, qk-norm, GQA, tied and untied),
// and generation with an adapter equals the full forward with it.
import { describe, expect, it } from "vitest";
import { paramCount, paramLayout, parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { generate } from "../../src/model/generate.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { initLora, LORA_TARGETS, loraLayout, loraParamCount, parseLoraConfig, type LoraConfig } from "../../src/model/lora.ts";
import { backward, backwardLora, forward, sequenceInput } from "../../src/model/reference/model.ts";
import { dot, maxScaledErr, numericGrad, randInt, randn, randomInput, sampleIndices } from "./helpers.ts";

function model(rng: Rng, extra: Partial<ModelConfig>): ModelConfig {
  return parseModelConfig({
    vocab_size: randInt(rng, 7, 11),
    d_model: 8,
    n_layers: 2,
    n_heads: 4,
    n_kv_heads: 2,
    d_ff: randInt(rng, 5, 9),
    max_seq_len: 16,
    rope_theta: 10000,
    norm_eps: 1e-6,
    tie_embeddings: false,
    ...extra,
  });
}

const ALL: LoraConfig = parseLoraConfig({ r: 3, alpha: 6, targetModules: [...LORA_TARGETS] });

describe("LoRA (reference engine)", () => {
  it("lays out lora_a [in, r] and lora_b [r, out] per targeted projection, in PEFT target order", () => {
    const m = model(new Rng(1), { head_dim: 4 });
    const c = parseLoraConfig({ r: 2, alpha: 4, targetModules: ["v_proj", "q_proj", "down_proj"] });
    const layout = loraLayout(m, c).filter((s) => s.name.startsWith("layers.0."));
    expect(layout.map((s) => [s.name, s.shape])).toEqual([
      ["layers.0.wq.lora_a", [8, 2]],
      ["layers.0.wq.lora_b", [2, 16]],
      ["layers.0.wv.lora_a", [8, 2]],
      ["layers.0.wv.lora_b", [2, 8]],
      ["layers.0.w_down.lora_a", [m.d_ff, 2]],
      ["layers.0.w_down.lora_b", [2, 8]],
    ]);
    expect(() => parseLoraConfig({ r: 0, alpha: 1, targetModules: ["q_proj"] })).toThrow(/r/);
    expect(() => parseLoraConfig({ r: 1, alpha: 1, targetModules: ["attn"] })).toThrow(/targetModules/);
  });

  it("starts as the base model exactly: lora_b is zero, lora_a within ±1/sqrt(in)", () => {
    const rng = new Rng(2);
    const m = model(rng, { qkv_bias: true });
    const base = initParams(m, 3);
    const adapter = initLora(m, ALL, 4);
    for (const s of loraLayout(m, ALL)) {
      const v = adapter.subarray(s.offset, s.offset + s.size);
      if (s.name.endsWith("lora_b")) expect(v.every((x) => x === 0)).toBe(true);
      else {
        expect(v.some((x) => x !== 0)).toBe(true);
        expect(Math.max(...v.map(Math.abs))).toBeLessThanOrEqual(1 / Math.sqrt(s.shape[0]));
      }
    }
    const input = randomInput(rng, m.vocab_size, 2, 6);
    const plain = forward(m, base, input);
    const adapted = forward(m, base, input, { lora: { config: ALL, params: adapter } });
    expect(Array.from(adapted.logits)).toEqual(Array.from(plain.logits));
  });

  it.each([
    ["Llama-like, untied", {}],
    ["Qwen2-like: biases, tied", { qkv_bias: true, tie_embeddings: true }],
    ["Qwen3-like: qk-norm, head_dim 4", { qk_norm: true, head_dim: 4 }],
  ] as Array<[string, Partial<ModelConfig>]>)("adapter gradients match finite differences (%s)", (_name, extra) => {
    const rng = new Rng(11);
    const m = model(rng, extra);
    const base = randn(rng, paramCount(m), 0.4);
    for (const s of paramLayout(m)) if (s.shape.length === 1) for (let i = s.offset; i < s.offset + s.size; i++) base[i] += 1;
    const adapter = randn(rng, loraParamCount(m, ALL), 0.3); // lora_b nonzero so every path carries gradient
    const lora = { config: ALL, params: adapter };
    const input = randomInput(rng, m.vocab_size, 2, randInt(rng, 4, 6));
    const B = input.n;
    const T = input.inputIds.length / B;
    const gl = randn(rng, B * T);
    const ge = randn(rng, B * T);
    const loss = (): number => {
      const o = forward(m, base, input, { lora });
      return dot(o.logprob, gl) + dot(o.entropy, ge);
    };
    const out = forward(m, base, input, { lora });
    const grads = backwardLora(m, base, out.cache, gl, ge);
    expect(grads).toHaveLength(loraParamCount(m, ALL));
    for (const spec of loraLayout(m, ALL)) {
      const idx = sampleIndices(rng, spec.size, 4).map((i) => i + spec.offset);
      expect(maxScaledErr(grads, numericGrad(loss, adapter, 1e-5, idx), idx), spec.name).toBeLessThan(1e-6);
    }
    // The base's own gradients with the adapter in the path, too (spot-checked on a few tensors).
    const baseGrads = backward(m, base, out.cache, gl, ge);
    for (const spec of paramLayout(m).filter((s) => /layers\.0\.(wq|w_up|attn_norm)$|^tok_embeddings$/.test(s.name))) {
      const idx = sampleIndices(rng, spec.size, 4).map((i) => i + spec.offset);
      expect(maxScaledErr(baseGrads, numericGrad(loss, base, 1e-5, idx), idx), spec.name).toBeLessThan(1e-6);
    }
  });

  it("refuses an adapter of the wrong size or a cache without one", () => {
    const rng = new Rng(5);
    const m = model(rng, {});
    const base = initParams(m, 1);
    const input = randomInput(rng, m.vocab_size, 1, 4);
    expect(() => forward(m, base, input, { lora: { config: ALL, params: new Float32Array(3) } })).toThrow(/adapter buffer has 3 elements/);
    const out = forward(m, base, input);
    expect(() => backwardLora(m, base, out.cache, new Float64Array(4), new Float64Array(4))).toThrow(/without an adapter/);
  });

  it("generation with an adapter equals the full forward with it (KV cache included)", () => {
    const rng = new Rng(6);
    const m = model(rng, { qk_norm: true, head_dim: 4, qkv_bias: true });
    const base = initParams(m, 2);
    const adapter = Float32Array.from(randn(rng, loraParamCount(m, ALL), 0.5));
    const lora = { config: ALL, params: adapter };
    const prompt = [1, 2, 3, 4];
    const g = generate(m, base, prompt, { maxTokens: 6, temperature: 0, stop: [], lora });
    const plain = generate(m, base, prompt, { maxTokens: 6, temperature: 0, stop: [] });
    const full = forward(m, base, sequenceInput([...prompt, ...g.tokens]), { lora });
    g.tokens.forEach((tok, i) => {
      const t = prompt.length + i;
      expect(full.logprob[t]).toBeCloseTo(g.logprobs[i], 4);
      const row = full.logits.subarray((t - 1) * m.vocab_size, t * m.vocab_size);
      expect(row.indexOf(Math.max(...row))).toBe(tok);
    });
    expect(g.logprobs).not.toEqual(plain.logprobs);
  });
});

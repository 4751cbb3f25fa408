/**
 * The whole model on the Wasm ops backend (src/cpu/wasm-ops.ts) against the plain-TS reference: the same
 * float32 parameters and batch, forward (log-probs, entropy) and backward (every parameter's gradient, and
 * an adapter's), on the `tiny` preset and on a small config with every optional feature (qkv bias, qk-norm,
 * untied head, llama3 RoPE scaling). The ops differ only in f32 rounding (src/cpu/README.md), so the
 * model agrees to f32 noise: log-probs within 2e-5 absolute, gradients within 1e-4 of each tensor's scale.
 */
import { describe, expect, it } from "vitest";
import { paramLayout, parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { loraParamCount, parseLoraConfig } from "../../src/model/lora.ts";
import { presetConfig } from "../../src/model/presets.ts";
import { CpuDecoder } from "../../src/model/generate.ts";
import { backward, backwardLora, forward } from "../../src/model/reference/model.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { instantiateCpuCore } from "../../src/cpu/kernels/index.ts";
import { randn, randomInput } from "../model/helpers.ts";

const wasm = new WasmOps(instantiateCpuCore());

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** Per tensor: max |a - b| / max |b| (the tensor's scale). */
function expectGradsClose(config: ModelConfig, got: Float32Array, want: Float32Array, layout = paramLayout(config)): void {
  for (const s of layout) {
    const a = got.subarray(s.offset, s.offset + s.size);
    const b = want.subarray(s.offset, s.offset + s.size);
    let scale = 0;
    for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
    expect(maxAbsDiff(a, b) / Math.max(scale, 1e-30), s.name).toBeLessThan(1e-4);
  }
}

const full = parseModelConfig({
  vocab_size: 61,
  d_model: 36,
  n_layers: 2,
  n_heads: 6,
  n_kv_heads: 2,
  d_ff: 50,
  max_seq_len: 32,
  rope_theta: 500000,
  norm_eps: 1e-6,
  tie_embeddings: false,
  qkv_bias: true,
  qk_norm: true,
  rope_scaling: { rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16 },
});

describe("the model on the Wasm ops backend agrees with the reference", () => {
  for (const [name, config, B, T] of [
    ["tiny preset", parseModelConfig(presetConfig("tiny")), 3, 21],
    ["qkv bias, qk-norm, untied head, llama3 RoPE", full, 2, 17],
  ] as const) {
    it(`${name}: forward and backward`, () => {
      const rng = new Rng(5);
      const params = initParams(config, 3);
      const input = randomInput(rng, config.vocab_size, B, T);
      const dlp = Float32Array.from(randn(rng, B * T));
      const dent = Float32Array.from(randn(rng, B * T, 0.1));
      const want = forward(config, params, input);
      const got = forward(config, params, input, { ops: wasm });
      expect(got.cache.ops).toBe(wasm);
      const lpDiff = maxAbsDiff(got.logprob, want.logprob);
      expect(lpDiff).toBeGreaterThan(0); // f32 vs f64 sums: not bit-identical, so the Wasm path did run
      expect(lpDiff).toBeLessThan(2e-5);
      expect(maxAbsDiff(got.entropy, want.entropy)).toBeLessThan(2e-5);
      expectGradsClose(config, backward(config, params, got.cache, dlp, dent), backward(config, params, want.cache, dlp, dent));
    });
  }

  it("with a LoRA adapter: the adapter's gradients", () => {
    const config = parseModelConfig(presetConfig("tiny"));
    const rng = new Rng(6);
    const params = initParams(config, 4);
    const loraConfig = parseLoraConfig({ r: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "up_proj", "down_proj"] });
    const lora = { config: loraConfig, params: Float32Array.from(randn(rng, loraParamCount(config, loraConfig), 0.05)) };
    const input = randomInput(rng, config.vocab_size, 2, 19);
    const dlp = Float32Array.from(randn(rng, 2 * 19));
    const dent = new Float32Array(2 * 19);
    const want = forward(config, params, input, { lora });
    const got = forward(config, params, input, { lora, ops: wasm });
    expect(maxAbsDiff(got.logprob, want.logprob)).toBeLessThan(2e-5);
    const gl = backwardLora(config, params, got.cache, dlp, dent);
    const wl = backwardLora(config, params, want.cache, dlp, dent);
    let scale = 0;
    for (const v of wl) scale = Math.max(scale, Math.abs(v));
    expect(maxAbsDiff(gl, wl) / scale).toBeLessThan(1e-4);
  });
});

describe("KV-cache decoding on the Wasm ops backend", () => {
  it("prefill and each step give the reference's logits to f32 noise", () => {
    const config = parseModelConfig(presetConfig("tiny"));
    const params = initParams(config, 7);
    const prompt = [1, 5, 9, 33, 70, 2];
    const want = new CpuDecoder(config, params, 12);
    const got = new CpuDecoder(config, params, 12, undefined, wasm);
    expect(maxAbsDiff(got.prefill(prompt), want.prefill(prompt))).toBeLessThan(1e-4);
    for (const token of [3, 8, 100, 7, 7]) expect(maxAbsDiff(got.step(token), want.step(token))).toBeLessThan(1e-4);
  });
});

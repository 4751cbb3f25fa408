/**
 * The fused decode step and prefill (assembly/cpu/decode.ts via src/cpu/fused-decode.ts): one Wasm call
 * per token, one per prompt. On random small configs with odd sizes and each model feature on and off (GQA, head_dim, qkv bias,
 * qk-norm, llama3 RoPE scaling, untied head, a LoRA adapter), its logits are the per-op Wasm path's bits and
 * the reference decoder's to f32 noise; generation gives the same tokens for a seed; a pool of 2 threads
 * gives the bits of 1, where it fuses and where it falls back to the per-op path; a decoder whose tensors
 * are not resident falls back too; disposing frees its workspace.
 */
import { afterAll, describe, expect, it } from "vitest";
import { parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { CpuPool } from "../../src/cpu/pool.ts";
import { CpuDecoder, generate } from "../../src/model/generate.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { initLora, parseLoraConfig, type LoraConfig } from "../../src/model/lora.ts";
import { opsWithout, type ModelOps } from "../../src/model/model-ops.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { instantiateCpuCore } from "../../src/cpu/kernels/index.ts";

const core = instantiateCpuCore();
const fused = new WasmOps(core);
/** The same backend without its fused step: the per-op path. */
const perOp: ModelOps = opsWithout(new WasmOps(instantiateCpuCore()), "decodeStepper");

const pools: CpuPool[] = [];
afterAll(() => {
  for (const p of pools) p.close();
});

interface Features {
  gqa: boolean;
  headDim: boolean;
  bias: boolean;
  qkNorm: boolean;
  scaling: boolean;
  untied: boolean;
  lora: boolean;
}

/** A small config with odd sizes (head_dim 6 when given: not a multiple of 4, so the one-key attention paths run). */
function configOf(f: Features, seed: number): ModelConfig {
  const rng = new Rng(seed);
  const pick = (lo: number, hi: number) => lo + Math.floor(rng.uniform() * (hi - lo + 1));
  const kv = f.gqa ? 2 : 3;
  const heads = f.gqa ? 6 : 3;
  const hd = f.headDim ? 6 : 8;
  return parseModelConfig({
    vocab_size: 2 * pick(20, 40) + 1,
    d_model: f.headDim ? 2 * pick(6, 10) + 1 : heads * hd,
    n_layers: pick(1, 3),
    n_heads: heads,
    n_kv_heads: kv,
    d_ff: 2 * pick(10, 20) + 1,
    max_seq_len: 40,
    rope_theta: 10000,
    norm_eps: 1e-5,
    tie_embeddings: !f.untied,
    ...(f.headDim ? { head_dim: hd } : {}),
    ...(f.bias ? { qkv_bias: true } : {}),
    ...(f.qkNorm ? { qk_norm: true } : {}),
    ...(f.scaling
      ? { rope_scaling: { rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8 } }
      : {}),
  });
}

const LORA: LoraConfig = parseLoraConfig({
  r: 3,
  alpha: 6,
  targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
});

/** Random base weights (biases and norm weights too, so that each matters) and, if asked, an adapter with B != 0. */
function weights(config: ModelConfig, seed: number, lora: boolean) {
  const params = initParams(config, seed);
  const rng = new Rng(seed + 100);
  for (let i = 0; i < params.length; i++) params[i] += rng.normal() * 0.05;
  if (!lora) return { params };
  const p = initLora(config, LORA, seed);
  for (let i = 0; i < p.length; i++) if (p[i] === 0) p[i] = rng.normal() * 0.1;
  return { params, lora: { config: LORA, params: p } };
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** Prefill then steps; the prefill's logits and every step's. */
function decode(config: ModelConfig, w: ReturnType<typeof weights>, ops: ModelOps | undefined, prompt: number[], tokens: number[]) {
  const d = new CpuDecoder(config, w.params, prompt.length + tokens.length, w.lora, ops);
  try {
    const first = d.prefill(prompt);
    return { fused: d.fused, steps: [first, ...tokens.map((t) => d.step(t))] };
  } finally {
    d.dispose();
  }
}

const FEATURES: (keyof Features)[] = ["gqa", "headDim", "bias", "qkNorm", "scaling", "untied", "lora"];
const none: Features = { gqa: false, headDim: false, bias: false, qkNorm: false, scaling: false, untied: false, lora: false };
const cases: [string, Features][] = [
  ["no optional feature", none],
  ...FEATURES.map((k): [string, Features] => [`${k} only`, { ...none, [k]: true }]),
  ["every feature", { gqa: true, headDim: true, bias: true, qkNorm: true, scaling: true, untied: true, lora: true }],
];

describe("the fused decode step", () => {
  for (const [i, [label, f]] of cases.entries()) {
    it(`${label}: the per-op Wasm path's bits, the reference's logits to f32 noise`, () => {
      const config = configOf(f, 11 + i);
      const w = weights(config, 5 + i, f.lora);
      const rng = new Rng(i);
      const tok = () => Math.floor(rng.uniform() * config.vocab_size);
      const prompt = Array.from({ length: 5 }, tok);
      const tokens = Array.from({ length: 13 }, tok);
      const got = decode(config, w, fused, prompt, tokens);
      const ops = decode(config, w, perOp, prompt, tokens);
      const ref = decode(config, w, undefined, prompt, tokens);
      expect(got.fused).toBe(true);
      expect(ops.fused).toBe(false);
      for (const [s, logits] of got.steps.entries()) {
        expect(logits.length).toBe(config.vocab_size);
        expect(Array.from(logits), `step ${s}`).toEqual(Array.from(ops.steps[s]));
        let scale = 0;
        for (const v of ref.steps[s]) scale = Math.max(scale, Math.abs(v));
        expect(maxAbsDiff(logits, ref.steps[s]) / scale, `step ${s}`).toBeLessThan(1e-5);
      }
    });
  }

  it("gives the same tokens for a seed as the per-op path (sampled), and the reference's greedy tokens", () => {
    const config = configOf({ ...none, gqa: true, bias: true, qkNorm: true }, 3);
    const w = weights(config, 9, true);
    const sampled = { maxTokens: 20, temperature: 1, topP: 0.95, seed: 17, stop: [], lora: w.lora };
    const a = generate(config, w.params, [1, 2, 3], { ...sampled, ops: fused });
    const b = generate(config, w.params, [1, 2, 3], { ...sampled, ops: perOp });
    const again = generate(config, w.params, [1, 2, 3], { ...sampled, ops: fused });
    expect(a.tokens.length).toBe(20);
    expect(a).toEqual(b);
    expect(again).toEqual(a);
    const greedy = { ...sampled, temperature: 0 };
    const g = generate(config, w.params, [4, 5], { ...greedy, ops: fused });
    const r = generate(config, w.params, [4, 5], greedy);
    expect(g.tokens).toEqual(r.tokens);
    expect(maxAbsDiff(g.logprobs, r.logprobs)).toBeLessThan(1e-4);
  });

  it("a pool of 2 threads gives the bits of 1: fused on a small model, per op where the pool would split", {
    timeout: 60_000,
  }, async () => {
    const pool = await CpuPool.create(2);
    pools.push(pool);
    const two = new WasmOps(pool);
    const small = configOf({ ...none, gqa: true, lora: true }, 4);
    // d * d_ff = 128 * 2048 multiply-adds per token reach the size from which the façade splits a GEMM
    const large = parseModelConfig({ ...small, vocab_size: 70, d_model: 128, n_heads: 4, n_kv_heads: 2, d_ff: 2048, n_layers: 1 });
    // fused steps, but a 9-token prompt's 9 * 128 * 384 reaches it: the per-op prefill on 2 threads
    const mid = parseModelConfig({ ...large, d_ff: 384 });
    for (const [config, fusedOnTwo, promptLength] of [
      [small, true, 2],
      [large, false, 2],
      [mid, true, 9],
    ] as const) {
      const w = weights(config, 2, true);
      const tokens = [7, 1, 9, 3, 3, 0];
      const prompt = Array.from({ length: promptLength }, (_, i) => (5 + 3 * i) % config.vocab_size);
      const one = decode(config, w, fused, prompt, tokens);
      const got = decode(config, w, two, prompt, tokens);
      expect(one.fused).toBe(true);
      expect(got.fused).toBe(fusedOnTwo);
      for (const [s, logits] of got.steps.entries()) expect(Array.from(logits)).toEqual(Array.from(one.steps[s]));
    }
  });

  it("falls back to the per-op path when the tensors are not resident", () => {
    const config = configOf(none, 8);
    const w = weights(config, 1, false);
    // a backend without residency: every op copies its inputs
    const copying = opsWithout(new WasmOps(instantiateCpuCore()), "resident");
    const want = decode(config, w, fused, [3, 4], [5, 6, 7]);
    const got = decode(config, w, copying, [3, 4], [5, 6, 7]);
    expect(got.fused).toBe(false);
    got.steps.forEach((logits, s) => expect(Array.from(logits)).toEqual(Array.from(want.steps[s])));
  });

  it("frees its workspace on dispose, keeps logits apart between steps and rejects bad tokens", () => {
    const config = configOf(none, 9);
    const w = weights(config, 3, false);
    const before = core.mark;
    const d = new CpuDecoder(config, w.params, 4, undefined, fused);
    expect(d.fused).toBe(true);
    d.prefill([1]);
    const first = d.step(2);
    const copy = Float32Array.from(first);
    d.step(3);
    expect(Array.from(first)).toEqual(Array.from(copy));
    expect(() => d.step(config.vocab_size)).toThrow(ValidationError);
    const e = new CpuDecoder(config, w.params, 4, undefined, fused);
    expect(() => e.prefill([1, -2])).toThrow(/token id -2/);
    e.dispose();
    expect(() => d.step(1.5)).toThrow(/token id 1.5/);
    d.step(4);
    expect(() => d.step(5)).toThrow(/KV cache holds 4/);
    d.dispose();
    expect(core.mark).toBe(before);
  });
});

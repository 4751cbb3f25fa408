import { parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import type { Rng } from "../../src/model/init.ts";
import type { ModelInput } from "../../src/model/reference/model.ts";

/** Float64 array of normals with the given std. */
export function randn(rng: Rng, n: number, std = 1): Float64Array {
  const a = new Float64Array(n);
  for (let i = 0; i < n; i++) a[i] = rng.normal() * std;
  return a;
}

/** Random integer in [lo, hi]. */
export function randInt(rng: Rng, lo: number, hi: number): number {
  return lo + (rng.nextU32() % (hi - lo + 1));
}

export function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/**
 * Central finite difference of the scalar `f()` with respect to every element of `x` (perturbed in
 * place and restored). `indices` limits the check to some elements.
 */
export function numericGrad(f: () => number, x: Float64Array, h = 1e-5, indices?: number[]): Float64Array {
  const g = new Float64Array(x.length);
  const idx = indices ?? Array.from({ length: x.length }, (_, i) => i);
  for (const i of idx) {
    const orig = x[i];
    x[i] = orig + h;
    const up = f();
    x[i] = orig - h;
    const down = f();
    x[i] = orig;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/** Largest |a - b| / max(1, |b|) over `indices` (all when absent). */
export function maxRelErr(a: ArrayLike<number>, b: ArrayLike<number>, indices?: number[]): number {
  let worst = 0;
  const idx = indices ?? Array.from({ length: a.length }, (_, i) => i);
  for (const i of idx) worst = Math.max(worst, Math.abs(a[i] - b[i]) / Math.max(1, Math.abs(b[i])));
  return worst;
}

/** A few random distinct indices in [0, n). */
export function sampleIndices(rng: Rng, n: number, count: number): number[] {
  if (count >= n) return Array.from({ length: n }, (_, i) => i);
  const set = new Set<number>();
  while (set.size < count) set.add(rng.nextU32() % n);
  return [...set];
}

/** Largest |a - b| over `indices`, divided by the largest |b| there: scale-free, so tiny gradients are checked too. */
export function maxScaledErr(a: ArrayLike<number>, b: ArrayLike<number>, indices: number[]): number {
  let err = 0;
  let scale = 0;
  for (const i of indices) {
    err = Math.max(err, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return err / Math.max(scale, 1e-12);
}

/** A random left-padded batch with verl position ids (max(cumsum(mask) - 1, 0)). */
export function randomInput(rng: Rng, vocab: number, B: number, T: number): ModelInput {
  const input_ids = new Int32Array(B * T);
  const attention_mask = new Int32Array(B * T);
  const position_ids = new Int32Array(B * T);
  for (let b = 0; b < B; b++) {
    const pad = randInt(rng, 0, Math.max(0, T - 3));
    let c = 0;
    for (let t = 0; t < T; t++) {
      const real = t >= pad ? 1 : 0;
      attention_mask[b * T + t] = real;
      input_ids[b * T + t] = real ? randInt(rng, 0, vocab - 1) : 0;
      c += real;
      position_ids[b * T + t] = Math.max(c - 1, 0);
    }
  }
  return { n: B, inputIds: input_ids, attentionMask: attention_mask, positionIds: position_ids };
}

/** A random tiny config (2 layers, a few heads, vocab 5..11) for gradient checks; `extra` overrides fields. */
export function tinyConfig(rng: Rng, extra: Partial<ModelConfig> = {}): ModelConfig {
  const kv = randInt(rng, 1, 2);
  const heads = kv * randInt(rng, 1, 2);
  const hd = 2 * randInt(rng, 1, 2);
  return parseModelConfig({
    vocab_size: randInt(rng, 5, 11),
    d_model: heads * hd,
    n_layers: 2,
    n_heads: heads,
    n_kv_heads: kv,
    d_ff: randInt(rng, 3, 9),
    max_seq_len: 16,
    rope_theta: 10000,
    norm_eps: 1e-5,
    tie_embeddings: false,
    ...extra,
  });
}

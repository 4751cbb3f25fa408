/**
 * The policy model's configuration and parameter layout: the contract shared by the CPU reference
 * (`src/model/reference/`) and the WebGPU trainer (`src/gpu/`). Both sides follow it exactly.
 *
 * Config: `{ vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, max_seq_len, rope_theta, norm_eps,
 * tie_embeddings }`, snake_case because it is stored as JSON in checkpoint metadata, plus the optional
 * fields Hugging Face architectures need (absent in our own presets, so old checkpoints stay valid):
 * - `head_dim`: explicit head size (Qwen3: 128 with d_model 1024 and 16 heads); default `d_model / n_heads`.
 * - `qkv_bias`: q, k and v projections carry a bias (Qwen2); default false.
 * - `qk_norm`: per-head RMSNorm on q and k after their projections, before RoPE (Qwen3); default false.
 * - `rope_scaling`: `{ rope_type: "llama3", factor, low_freq_factor, high_freq_factor,
 *   original_max_position_embeddings }` (Llama 3.1/3.2) or null for plain RoPE.
 * `n_heads % n_kv_heads == 0`; head_dim is even.
 *
 * Parameters: a flat, ordered list of named float32 tensors, row-major ({@link paramLayout} gives names,
 * shapes and offsets into one flat buffer). Every linear weight is stored `[in, out]` and applied as
 * `y = x @ W` (no transposes at apply time):
 * - `tok_embeddings` [vocab, d]
 * - per layer l: `layers.{l}.attn_norm` [d], `layers.{l}.wq` [d, n_heads*hd], `layers.{l}.wk` [d, n_kv*hd],
 *   `layers.{l}.wv` [d, n_kv*hd], then with `qkv_bias` `layers.{l}.bq` [n_heads*hd], `layers.{l}.bk` [n_kv*hd],
 *   `layers.{l}.bv` [n_kv*hd], then with `qk_norm` `layers.{l}.q_norm` [hd], `layers.{l}.k_norm` [hd], then
 *   `layers.{l}.wo` [n_heads*hd, d], `layers.{l}.ffn_norm` [d],
 *   `layers.{l}.w_gate` [d, d_ff], `layers.{l}.w_up` [d, d_ff], `layers.{l}.w_down` [d_ff, d]
 * - `norm` [d]
 * - `lm_head` [d, vocab] only when not tied; tied: `logits = h @ tok_embeddings^T`.
 *
 * Forward (per row of the batch; N = B*T token rows):
 * - RMSNorm: `y = x * 1/sqrt(mean(x^2) + eps) * w`.
 * - Projections: `q = h @ wq (+ bq)`, `k = h @ wk (+ bk)`, `v = h @ wv (+ bv)`; with `qk_norm`, each head
 *   of q (and of k) is RMS-normalised over its hd values with the shared weight `q_norm` (`k_norm`), same eps.
 * - RoPE, HF "rotate_half" style: for each head, the pairs (i, i + hd/2), i < hd/2, are rotated by
 *   `angle = position * inv_freq_i`, `inv_freq_i = rope_theta^(-2i/hd)` (llama3 scaling rescales the
 *   low frequencies, see {@link ropeInvFreq}): `y_i = x_i cos - x_{i+hd/2} sin`,
 *   `y_{i+hd/2} = x_{i+hd/2} cos + x_i sin`. The position is the batch's `position_ids[b,t]`.
 *   Applied to q and k after their projections (and qk-norm).
 * - Attention: causal, scale 1/sqrt(hd), grouped-query: query head h reads kv head
 *   `floor(h / (n_heads / n_kv_heads))`. Key j is visible to query i iff `j == i` or
 *   (`j < i` and `attention_mask[j] == 1`). So real rows see exactly the real keys up to themselves,
 *   and padded rows (whose outputs never reach the loss) always see at least themselves and stay finite.
 * - MLP, SwiGLU: `down(silu(x @ w_gate) * (x @ w_up))`, `silu(z) = z * sigmoid(z)`.
 * - Pre-norm residual blocks: `x += wo(attn(rope(q), rope(k), v))` on `attn_norm(x)`, then
 *   `x += mlp(ffn_norm(x))`; final `norm`, then the lm head.
 *
 * Log-probs: `logprob[b,t] = log_softmax(logits[b,t-1])[input_ids[b,t]]` for t >= 1 (the token at t is
 * predicted from position t-1); `entropy[b,t]` is the entropy of that same distribution
 * (`logsumexp(z) - sum softmax(z) z`). Both are 0 at t = 0. Outputs are [B, T].
 *
 * Init (`init.ts`): seeded, deterministic; N(0, 0.02) for matrices (embeddings included),
 * ones for norms, output projections (`wo`, `w_down`) scaled by 1/sqrt(2*n_layers).
 */
import { z } from "zod";
import { parseOrThrow, ValidationError } from "../types/errors.ts";

/** Llama 3.1/3.2 RoPE scaling, as in Hugging Face's `rope_scaling` (fields renamed to nothing: same names). */
export const RopeScalingSchema = z.object({
  rope_type: z.literal("llama3"),
  factor: z.number().positive(),
  low_freq_factor: z.number().positive(),
  high_freq_factor: z.number().positive(),
  original_max_position_embeddings: z.int().positive(),
});
export type RopeScaling = z.infer<typeof RopeScalingSchema>;

export const ModelConfigSchema = z
  .object({
    vocab_size: z.int().positive(),
    d_model: z.int().positive(),
    n_layers: z.int().positive(),
    n_heads: z.int().positive(),
    n_kv_heads: z.int().positive(),
    d_ff: z.int().positive(),
    max_seq_len: z.int().positive(),
    rope_theta: z.number().positive(),
    norm_eps: z.number().positive(),
    tie_embeddings: z.boolean(),
    head_dim: z.int().positive().optional(),
    qkv_bias: z.boolean().optional(),
    qk_norm: z.boolean().optional(),
    rope_scaling: RopeScalingSchema.nullable().optional(),
  })
  .superRefine((c, ctx) => {
    if (c.head_dim === undefined && c.d_model % c.n_heads !== 0)
      ctx.addIssue({ code: "custom", path: ["n_heads"], message: "d_model must be divisible by n_heads (or head_dim given)" });
    else if ((c.head_dim ?? c.d_model / c.n_heads) % 2 !== 0)
      ctx.addIssue({
        code: "custom",
        path: [c.head_dim === undefined ? "n_heads" : "head_dim"],
        message: "head_dim must be even (RoPE pairs)",
      });
    if (c.rope_scaling && c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
      ctx.addIssue({ code: "custom", path: ["rope_scaling", "high_freq_factor"], message: "high_freq_factor must exceed low_freq_factor" });
    if (c.n_heads % c.n_kv_heads !== 0)
      ctx.addIssue({ code: "custom", path: ["n_kv_heads"], message: "n_heads must be divisible by n_kv_heads" });
  });

export type ModelConfig = z.infer<typeof ModelConfigSchema>;

/** Validates a config (from user code or checkpoint metadata); throws ValidationError with the field path. */
export function parseModelConfig(value: unknown): ModelConfig {
  return parseOrThrow(ModelConfigSchema, value, "model config");
}

export function headDim(c: ModelConfig): number {
  return c.head_dim ?? c.d_model / c.n_heads;
}

/**
 * RoPE inverse frequencies `inv_freq_i = rope_theta^(-2i/hd)`, i < hd/2, computed in double precision.
 * With llama3 scaling (Hugging Face's rule for Llama 3.1/3.2): wavelengths `2π/inv_freq` longer than
 * `original_max_position_embeddings / low_freq_factor` are divided by `factor`, those shorter than
 * `original / high_freq_factor` are kept, and those between are blended with
 * `s = (original / wavelength - low) / (high - low)`: `(1 - s) * inv / factor + s * inv`.
 */
export function ropeInvFreq(hd: number, theta: number, scaling?: RopeScaling | null): Float64Array {
  const half = hd / 2;
  const f = new Float64Array(half);
  for (let i = 0; i < half; i++) f[i] = Math.pow(theta, (-2 * i) / hd);
  if (!scaling) return f;
  const { factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: original } = scaling;
  const lowWavelen = original / low;
  const highWavelen = original / high;
  for (let i = 0; i < half; i++) {
    const wavelen = (2 * Math.PI) / f[i];
    if (wavelen > lowWavelen) f[i] /= factor;
    else if (wavelen >= highWavelen) {
      const s = (original / wavelen - low) / (high - low);
      f[i] = ((1 - s) * f[i]) / factor + s * f[i];
    }
  }
  return f;
}

/** The model's own RoPE frequencies (head size, theta and scaling from the config). */
export function modelRopeInvFreq(c: ModelConfig): Float64Array {
  return ropeInvFreq(headDim(c), c.rope_theta, c.rope_scaling);
}

/** One tensor of the layout: its name, shape, element count and offset (in elements) in the flat buffer. */
export interface ParamSpec {
  name: string;
  shape: number[];
  size: number;
  offset: number;
}

/** The ordered (name, shape) list for a config, as documented at the top of this file. */
export function paramShapes(c: ModelConfig): Array<[string, number[]]> {
  const d = c.d_model;
  const hd = headDim(c);
  const out: Array<[string, number[]]> = [["tok_embeddings", [c.vocab_size, d]]];
  for (let l = 0; l < c.n_layers; l++) {
    const p = `layers.${l}.`;
    out.push(
      [p + "attn_norm", [d]],
      [p + "wq", [d, c.n_heads * hd]],
      [p + "wk", [d, c.n_kv_heads * hd]],
      [p + "wv", [d, c.n_kv_heads * hd]],
    );
    if (c.qkv_bias) out.push([p + "bq", [c.n_heads * hd]], [p + "bk", [c.n_kv_heads * hd]], [p + "bv", [c.n_kv_heads * hd]]);
    if (c.qk_norm) out.push([p + "q_norm", [hd]], [p + "k_norm", [hd]]);
    out.push(
      [p + "wo", [c.n_heads * hd, d]],
      [p + "ffn_norm", [d]],
      [p + "w_gate", [d, c.d_ff]],
      [p + "w_up", [d, c.d_ff]],
      [p + "w_down", [c.d_ff, d]],
    );
  }
  out.push(["norm", [d]]);
  if (!c.tie_embeddings) out.push(["lm_head", [d, c.vocab_size]]);
  return out;
}

/** Names, shapes and offsets of every parameter tensor in one flat buffer, in layout order. */
export function paramLayout(c: ModelConfig): ParamSpec[] {
  let offset = 0;
  return paramShapes(c).map(([name, shape]) => {
    const size = shape.reduce((a, b) => a * b, 1);
    const spec = { name, shape, size, offset };
    offset += size;
    return spec;
  });
}

/** Total number of parameters (elements of the flat buffer). */
export function paramCount(c: ModelConfig): number {
  return paramLayout(c).reduce((a, s) => a + s.size, 0);
}

/** Throws ValidationError when a row of `seqLen` tokens exceeds the model's max_seq_len. */
export function assertSeqLen(c: ModelConfig, seqLen: number): void {
  if (seqLen > c.max_seq_len) throw new ValidationError(`sequence length ${seqLen} exceeds max_seq_len ${c.max_seq_len}`, ["seq_len"]);
}

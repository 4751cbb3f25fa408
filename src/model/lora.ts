/**
 * LoRA adapters on frozen base weights, as PEFT defines them: for a targeted projection W (HF shape
 * [out, in]), `y = x W^T + (alpha / r) · (x A^T) B^T` with `A` [r, in] and `B` [out, r]; A starts
 * Kaiming-uniform (bound 1/sqrt(in)), B at zero, so step 0 is exactly the base model.
 * In our [in, out] convention (src/model/config.ts) the adapter of `layers.{l}.wq` is stored as
 * `layers.{l}.wq.lora_a` [in, r] (= A^T) and `layers.{l}.wq.lora_b` [r, out] (= B^T):
 * `y = x · W + scaling · (x · lora_a) · lora_b`.
 */
import { z } from "zod";
import { parseOrThrow } from "../types/errors.ts";
import { headDim, type ModelConfig, type ParamSpec } from "./config.ts";
import { Rng } from "./init.ts";
import { tensorViews } from "./params.ts";
import type { Arr } from "./reference/ops.ts";

/** PEFT's names of the projections an adapter may target. */
export const LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

/** PEFT target → our projection name. */
export const LORA_TARGET_WEIGHT: Record<LoraTarget, string> = {
  q_proj: "wq",
  k_proj: "wk",
  v_proj: "wv",
  o_proj: "wo",
  gate_proj: "w_gate",
  up_proj: "w_up",
  down_proj: "w_down",
};

export const LoraConfigSchema = z.object({
  /** Rank of the update. */
  r: z.int().positive(),
  /** Scale numerator: the update is multiplied by alpha / r. */
  alpha: z.number().positive(),
  targetModules: z.array(z.enum(LORA_TARGETS)).min(1),
});
export type LoraConfig = z.infer<typeof LoraConfigSchema>;

export function parseLoraConfig(value: unknown): LoraConfig {
  const c = parseOrThrow(LoraConfigSchema, value, "LoRA config");
  return { ...c, targetModules: LORA_TARGETS.filter((t) => c.targetModules.includes(t)) };
}

export function loraScaling(c: LoraConfig): number {
  return c.alpha / c.r;
}

/** [in, out] of each projection of a layer. */
function projectionShapes(m: ModelConfig): Record<string, [number, number]> {
  const hd = headDim(m);
  return {
    wq: [m.d_model, m.n_heads * hd],
    wk: [m.d_model, m.n_kv_heads * hd],
    wv: [m.d_model, m.n_kv_heads * hd],
    wo: [m.n_heads * hd, m.d_model],
    w_gate: [m.d_model, m.d_ff],
    w_up: [m.d_model, m.d_ff],
    w_down: [m.d_ff, m.d_model],
  };
}

/** The adapter's tensors, in order (layer by layer, targets in PEFT order, lora_a then lora_b), with offsets. */
export function loraLayout(m: ModelConfig, c: LoraConfig): ParamSpec[] {
  const shapes = projectionShapes(m);
  const out: ParamSpec[] = [];
  let offset = 0;
  const push = (name: string, shape: number[]): void => {
    const size = shape[0] * shape[1];
    out.push({ name, shape, size, offset });
    offset += size;
  };
  for (let l = 0; l < m.n_layers; l++)
    for (const t of c.targetModules) {
      const w = LORA_TARGET_WEIGHT[t];
      const [fanIn, fanOut] = shapes[w];
      push(`layers.${l}.${w}.lora_a`, [fanIn, c.r]);
      push(`layers.${l}.${w}.lora_b`, [c.r, fanOut]);
    }
  return out;
}

export function loraParamCount(m: ModelConfig, c: LoraConfig): number {
  const layout = loraLayout(m, c);
  const last = layout[layout.length - 1];
  return last.offset + last.size;
}

/** PEFT's initialisation: lora_a uniform in ±1/sqrt(in) (Kaiming-uniform with a = sqrt(5)), lora_b zero. */
export function initLora(m: ModelConfig, c: LoraConfig, seed: number): Float32Array {
  const rng = new Rng(seed);
  const flat = new Float32Array(loraParamCount(m, c));
  for (const s of loraLayout(m, c)) {
    if (!s.name.endsWith(".lora_a")) continue;
    const bound = 1 / Math.sqrt(s.shape[0]);
    for (let i = s.offset; i < s.offset + s.size; i++) flat[i] = (2 * rng.uniform() - 1) * bound;
  }
  return flat;
}

/** An adapter to apply in the forward: its config and tensors (flat in `loraLayout` order, or by name). */
export interface LoraWeights<A extends Arr = Float32Array> {
  config: LoraConfig;
  params: A | Record<string, A>;
}

/** An adapter ready for the ops: its scale, rank and tensors by name. */
export interface LoraState {
  config: LoraConfig;
  scaling: number;
  views: Record<string, Arr>;
}

/** Views of an adapter's tensors by name, checked against this model (a ValidationError names the tensor). */
export function loraState(model: ModelConfig, lora: LoraWeights<Arr>): LoraState {
  const views = tensorViews(loraLayout(model, lora.config), lora.params, {
    what: "adapter buffer",
    lacks: "adapter lacks",
    owner: "the LoRA config",
    root: "lora",
  });
  return { config: lora.config, scaling: loraScaling(lora.config), views };
}

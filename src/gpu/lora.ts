/**
 * A LoRA adapter on the GPU (docs/lora.md): its tensors (`layers.N.<weight>.lora_a` [in, r] and
 * `lora_b` [r, out], loraLayout order) in their own buffers beside the base's, never merged into it, so a
 * new adapter version is an upload of the adapter alone. A training adapter also has gradient and AdamW
 * buffers; the base then has none.
 */
import type { ModelConfig } from "../model/config.ts";
import { LORA_TARGET_WEIGHT, loraLayout, loraScaling, type LoraConfig, loraState, type LoraWeights } from "../model/lora.ts";
import type { GpuContext } from "./context.ts";
import { TensorSet } from "./tensors.ts";

/** What the projection helper needs of one adapted projection (projection.ts). */
export interface AdapterTensors {
  a: GPUBuffer;
  b: GPUBuffer;
  /** Gradient buffers, null when the adapter is not trained. */
  ga: GPUBuffer | null;
  gb: GPUBuffer | null;
  scaling: number;
  r: number;
}

export class GpuAdapter {
  readonly config: LoraConfig;
  readonly scaling: number;
  readonly tensors: TensorSet;
  /** Our projection names (wq, w_up, ...) the adapter targets, in every layer. */
  readonly weights: readonly string[];

  /** `lora.params`: flat in `loraLayout(model, lora.config)` order (targets in the order the config lists
   * them) or tensors by name; checked against the model. */
  constructor(
    ctx: GpuContext,
    readonly model: ModelConfig,
    lora: LoraWeights,
    training: boolean,
  ) {
    this.config = lora.config;
    this.scaling = loraScaling(lora.config);
    this.weights = lora.config.targetModules.map((t) => LORA_TARGET_WEIGHT[t]);
    this.tensors = new TensorSet(
      ctx,
      loraLayout(model, lora.config),
      () => loraState(model, lora).views as Record<string, Float32Array>,
      training,
    );
  }

  /** Whether `lora` has this adapter's shapes (same rank and targets, in the same order), so its values can
   * replace these in place. */
  fits(lora: LoraWeights): boolean {
    return JSON.stringify(lora.config) === JSON.stringify(this.config);
  }

  /** Uploads new values for the same config (checked against the model like the constructor). */
  write(lora: LoraWeights): void {
    this.tensors.write(this.tensors.params, loraState(this.model, lora).views as Record<string, Float32Array>);
  }

  /** The adapter of `layers.{l}.{weight}`, or null when the adapter does not target it. */
  of(l: number, weight: string): AdapterTensors | null {
    if (!this.weights.includes(weight)) return null;
    const key = `layers.${l}.${weight}`;
    const t = this.tensors;
    return {
      a: t.params[`${key}.lora_a`],
      b: t.params[`${key}.lora_b`],
      ga: t.training ? t.grads[`${key}.lora_a`] : null,
      gb: t.training ? t.grads[`${key}.lora_b`] : null,
      scaling: this.scaling,
      r: this.config.r,
    };
  }

  destroy(): void {
    this.tensors.destroy();
  }
}

/**
 * Named tensors on the GPU, one buffer each: a model's parameters or a LoRA adapter's. A set that trains
 * also holds a gradient and two AdamW-moment buffers per tensor; a frozen one may keep its matrices in
 * 16 bits (kernels/weights.ts), vectors (norms, biases) always in float32.
 */
import type { ParamSpec } from "../model/config.ts";
import { ValidationError } from "../types/errors.ts";
import type { GpuContext } from "./context.ts";
import { packWeights, type WeightFormat } from "./kernels/weights.ts";

export type ParamBuffers = Record<string, GPUBuffer>;

export class TensorSet {
  readonly params: ParamBuffers = {};
  readonly grads: ParamBuffers = {};
  readonly m: ParamBuffers = {};
  readonly v: ParamBuffers = {};
  /** Elements of all tensors together (the flat buffer's length). */
  readonly size: number;

  /** `values`: each layout tensor by name (checked by the caller), asked for once the shapes are known to
   * fit the device. `training`: allocate gradient and moment buffers. `matrixFormat`: how 2-D tensors are stored. */
  constructor(
    readonly ctx: GpuContext,
    readonly layout: readonly ParamSpec[],
    values: () => Record<string, Float32Array>,
    readonly training: boolean,
    readonly matrixFormat: WeightFormat = "f32",
  ) {
    if (training && matrixFormat !== "f32")
      throw new ValidationError(
        `16-bit weights (${matrixFormat}) are for inference and for a frozen LoRA base: trained tensors keep float32`,
        ["weightFormat"],
      );
    this.size = layout.reduce((a, s) => a + s.size, 0);
    // A tensor is bound whole by the kernels: one over the device's binding limit cannot run at all.
    const limit = Math.min(ctx.device.limits.maxStorageBufferBindingSize, ctx.device.limits.maxBufferSize);
    for (const s of layout) {
      const bytes = this.storedBytes(s);
      if (bytes > limit)
        throw new ValidationError(
          `tensor ${s.name} (${s.shape.join(" x ")}) needs ${bytes} bytes in ${this.formatOf(s)}, over this device's ${limit}-byte storage binding limit: use the CPU engine or a GPU with a larger limit`,
          ["params", s.name],
        );
    }
    const tensors = values();
    try {
      for (const s of layout) {
        this.params[s.name] = this.pack(s, tensors[s.name], s.name);
        if (!training) continue;
        this.grads[s.name] = ctx.alloc(s.size, `grad.${s.name}`);
        this.m[s.name] = ctx.alloc(s.size, `adam_m.${s.name}`);
        this.v[s.name] = ctx.alloc(s.size, `adam_v.${s.name}`);
      }
    } catch (e) {
      this.destroy();
      throw e;
    }
  }

  /** The format tensor `s` is stored in: matrices in `matrixFormat`, vectors in f32. */
  formatOf(s: ParamSpec): WeightFormat {
    return s.shape.length === 2 ? this.matrixFormat : "f32";
  }

  private storedBytes(s: ParamSpec): number {
    return this.formatOf(s) === "f32" ? 4 * s.size : 4 * Math.ceil(s.size / 2);
  }

  private pack(s: ParamSpec, data: Float32Array, label: string): GPUBuffer {
    const f = this.formatOf(s);
    return this.ctx.upload(f === "f32" ? data : packWeights(data, f), label);
  }

  /** Bytes of the value buffers (not gradients or moments). */
  get paramBytes(): number {
    return this.layout.reduce((a, s) => a + this.storedBytes(s), 0);
  }

  /** Overwrites `target` (this set's params, grads, m or v) with `values` by name; params are packed as stored. */
  write(target: ParamBuffers, values: Record<string, Float32Array>): void {
    for (const s of this.layout) {
      const data = values[s.name];
      const f = target === this.params ? this.formatOf(s) : "f32";
      this.ctx.write(target[s.name], f === "f32" ? data : packWeights(data, f));
    }
  }

  /** Overwrites `target` from one flat buffer in layout order (length checked). */
  writeFlat(target: ParamBuffers, flat: Float32Array, field: string): void {
    if (flat.length !== this.size)
      throw new ValidationError(`${field} has ${flat.length} elements, the config needs ${this.size}`, [field]);
    const views: Record<string, Float32Array> = {};
    for (const s of this.layout) views[s.name] = flat.subarray(s.offset, s.offset + s.size);
    this.write(target, views);
  }

  /** Downloads float32 buffers (grads, m, v, or params stored in f32) into one flat buffer, layout order. */
  async readFlat(source: ParamBuffers): Promise<Float32Array> {
    const flat = new Float32Array(this.size);
    for (const s of this.layout) {
      if (source === this.params && this.formatOf(s) !== "f32")
        throw new ValidationError(`tensor ${s.name} is stored in ${this.formatOf(s)}: read it from the host copy`, ["params", s.name]);
      flat.set(await this.ctx.read(source[s.name], s.size), s.offset);
    }
    return flat;
  }

  zeroGrads(): void {
    for (const s of this.layout) this.ctx.clear(this.grads[s.name]);
  }

  destroy(): void {
    for (const set of [this.params, this.grads, this.m, this.v]) for (const b of Object.values(set)) b.destroy();
  }
}

import { LightningError } from "../types/errors.ts";
import { GpuDeviceLostError, requestGpuDevice, type GpuDeviceHandle, type GpuDeviceOptions } from "./device.ts";
import {
  storageEntries,
  type BufferLayout,
  type KernelBuffers,
  type KernelSource,
  type UniformLayout,
  type UniformValues,
} from "./kernel-source.ts";
import { tuningFromLimits, type GpuTuning } from "./tuning.ts";

const UNIFORM_CACHE_LIMIT = 4096;
/** How long a failed readback waits for the device's loss to be reported before it is taken for another failure. */
const LOSS_REPORT_WAIT_MS = 1000;

/** A GPUDevice with a pipeline cache, uniform-buffer cache and one open command encoder that kernels append to. */
export class GpuContext {
  readonly device: GPUDevice;
  readonly tuning: GpuTuning;
  private pipelines = new Map<string, GPUComputePipeline>();
  private uniforms = new Map<string, GPUBuffer>();
  private encoder: GPUCommandEncoder | null = null;
  private pass: GPUComputePassEncoder | null = null;
  private lostInfo: { reason: string; message: string } | null = null;
  private errors: string[] = [];
  private tail: Promise<unknown> = Promise.resolve();
  private allocated = 0;

  /** `tuning` overrides the sizes derived from the device limits (tests of small-limit devices). */
  constructor(
    device: GPUDevice,
    readonly handle?: GpuDeviceHandle,
    tuning?: GpuTuning,
  ) {
    this.device = device;
    this.tuning = tuning ?? tuningFromLimits(device.limits);
    void device.lost.then((info) => {
      this.lostInfo = { reason: info.reason ?? "unknown", message: info.message ?? "" };
    });
    // Validation errors (a bad shader, a dispatch over a limit) otherwise only reach the console.
    device.onuncapturederror = (event: GPUUncapturedErrorEvent) => {
      this.errors.push(event.error.message);
    };
  }

  static async create(options?: GpuDeviceOptions): Promise<GpuContext> {
    const handle = await requestGpuDevice(options);
    return new GpuContext(handle.device, handle);
  }

  private pipeline(kernel: KernelSource): GPUComputePipeline {
    let p = this.pipelines.get(kernel.key);
    if (p === undefined) {
      const module = this.device.createShaderModule({ code: kernel.code, label: kernel.key });
      p = this.device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" }, label: kernel.key });
      this.pipelines.set(kernel.key, p);
    }
    return p;
  }

  private uniformBuffer(layout: UniformLayout, values: Readonly<Record<string, number>>): GPUBuffer {
    const names = Object.keys(layout);
    const bytes = new ArrayBuffer(Math.max(16, Math.ceil((names.length * 4) / 16) * 16));
    const view = new DataView(bytes);
    names.forEach((n, i) => {
      const v = values[n];
      if (v === undefined) throw new LightningError(`uniform ${n} missing`);
      const t = layout[n];
      if (t === "f32") view.setFloat32(i * 4, v, true);
      else if (t === "i32") view.setInt32(i * 4, v, true);
      else view.setUint32(i * 4, v, true);
    });
    const key = Array.from(new Uint32Array(bytes)).join(",");
    let buf = this.uniforms.get(key);
    if (buf === undefined) {
      buf = this.device.createBuffer({ size: bytes.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      this.device.queue.writeBuffer(buf, 0, bytes);
      this.uniforms.set(key, buf);
    }
    return buf;
  }

  /** Appends one dispatch to the open command encoder; `params` and `buffers` name every uniform and buffer
   * the kernel declares (kernel-source.ts), and no other. */
  dispatch<U extends UniformLayout, B extends BufferLayout>(
    kernel: KernelSource<U, B>,
    params: NoInfer<UniformValues<U>>,
    buffers: NoInfer<KernelBuffers<B>>,
    groups: [number, number?, number?],
  ): void {
    const [x, y = 1, z = 1] = groups;
    if (x === 0 || y === 0 || z === 0) return;
    const max = this.tuning.maxWorkgroupsPerDim;
    if (x > max || y > max || z > max)
      throw new LightningError(`${kernel.key}: dispatch ${x}x${y}x${z} exceeds ${max} workgroups per dimension`);
    const storage = storageEntries(kernel, buffers);
    const pipeline = this.pipeline(kernel);
    const entries = [{ binding: 0, resource: { buffer: this.uniformBuffer(kernel.uniforms, params) } }, ...storage];
    const bindGroup = this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
    const pass = this.openPass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(x, y, z);
  }

  private openEncoder(): GPUCommandEncoder {
    this.encoder ??= this.device.createCommandEncoder();
    return this.encoder;
  }

  private openPass(): GPUComputePassEncoder {
    this.pass ??= this.openEncoder().beginComputePass();
    return this.pass;
  }

  private closePass(): void {
    this.pass?.end();
    this.pass = null;
  }

  /** Encodes a buffer copy in order with the dispatches around it. */
  copy(src: GPUBuffer, dst: GPUBuffer, bytes: number, srcOffset = 0, dstOffset = 0): void {
    this.closePass();
    this.openEncoder().copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes);
  }

  /** Encodes zero-filling a buffer (or its first `bytes`). */
  clear(buffer: GPUBuffer, bytes?: number): void {
    this.closePass();
    this.openEncoder().clearBuffer(buffer, 0, bytes);
  }

  /** Why the device was lost (`device.lost` resolved), or null while it lives. */
  get lost(): { reason: string; message: string } | null {
    return this.lostInfo;
  }

  /** Throws GpuDeviceLostError when the device is gone. */
  throwIfLost(): void {
    if (this.lostInfo) throw new GpuDeviceLostError(this.lostInfo.reason, this.lostInfo.message);
  }

  /** Before freeing buffers: submits what is encoded (it may still read them), or on a lost device drops it,
   * so releasing memory never throws. */
  flushBeforeRelease(): void {
    if (this.lostInfo === null) this.flush();
    else {
      this.pass = null;
      this.encoder = null;
    }
  }

  /** Submits everything encoded so far. */
  flush(): void {
    this.throwIfLost();
    this.closePass();
    if (this.encoder !== null) {
      this.device.queue.submit([this.encoder.finish()]);
      this.encoder = null;
    }
  }

  /** Runs `run` after every earlier exclusive call on this context has settled: multi-step users (a trainer
   * step, a generation) must not interleave their encoding and queue writes. */
  exclusive<T>(run: () => Promise<T>): Promise<T> {
    const result = this.tail.then(run, run);
    this.tail = result.catch(() => undefined);
    return result;
  }

  /** Submits pending work and waits until the GPU has finished it; throws any validation error. */
  async drain(): Promise<void> {
    this.flush();
    await this.device.queue.onSubmittedWorkDone();
    this.throwIfLost();
    this.throwErrors();
  }

  /**
   * A loss is reported later than the failed work: a destroyed or lost device rejects a pending map at
   * once, and `device.lost` resolves some turns after (more than one in a busy Chromium worker). Wait for
   * it a while, so the failure is not mistaken for something else.
   */
  private async settleLoss(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([this.device.lost, new Promise((ok) => (timer = setTimeout(ok, LOSS_REPORT_WAIT_MS)))]);
    clearTimeout(timer);
    this.throwIfLost();
  }

  /** Bytes of every storage buffer made through {@link alloc} or {@link upload} on this context so far
   * (destroyed ones included; staging and uniform buffers excluded): what a model, its optimizer and its
   * workspace take on the device, measured (bench/lora.ts, docs/lora.md). */
  get allocatedBytes(): number {
    return this.allocated;
  }

  /** A storage buffer of `elements` 4-byte values, zero-filled. */
  alloc(elements: number, label?: string): GPUBuffer {
    this.allocated += Math.max(4, elements * 4);
    return this.device.createBuffer({
      size: Math.max(4, elements * 4),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
      label,
    });
  }

  /** A storage buffer holding `data`. */
  upload(data: Float32Array | Uint32Array | Int32Array, label?: string): GPUBuffer {
    const buf = this.alloc(data.length, label);
    this.write(buf, data);
    return buf;
  }

  /** Overwrites the start of `buffer`. Flushes first: queue writes run before unsubmitted commands otherwise. */
  write(buffer: GPUBuffer, data: Float32Array | Uint32Array | Int32Array, elementOffset = 0): void {
    this.flush();
    if (data.length > 0) this.device.queue.writeBuffer(buffer, elementOffset * 4, data.buffer, data.byteOffset, data.byteLength);
  }

  /** Reads `elements` f32 values back (flushes pending work first). */
  async read(buffer: GPUBuffer, elements = buffer.size / 4, elementOffset = 0): Promise<Float32Array> {
    const bytes = elements * 4;
    const staging = this.device.createBuffer({ size: Math.max(4, bytes), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    if (bytes > 0) this.copy(buffer, staging, bytes, elementOffset * 4, 0);
    this.flush();
    try {
      await staging.mapAsync(GPUMapMode.READ);
    } catch (e) {
      await this.settleLoss(); // a map rejected because the device went away is that loss
      throw e;
    }
    this.throwIfLost();
    this.throwErrors();
    const out = new Float32Array(staging.getMappedRange(0, Math.max(4, bytes)).slice(0, bytes));
    staging.unmap();
    staging.destroy();
    if (this.uniforms.size > UNIFORM_CACHE_LIMIT) this.dropUniforms();
    return out;
  }

  /** Throws the WebGPU validation errors reported since the last check. */
  throwErrors(): void {
    if (this.errors.length === 0) return;
    const message = this.errors.join("\n");
    this.errors = [];
    throw new LightningError(`WebGPU error: ${message}`);
  }

  /** Frees cached uniform buffers; called only when the queue has drained (after a read). */
  private dropUniforms(): void {
    for (const b of this.uniforms.values()) b.destroy();
    this.uniforms.clear();
  }

  destroy(): void {
    this.flushBeforeRelease();
    this.dropUniforms();
    this.device.destroy();
  }
}

/** Workgroup count covering `n` items with `per` items each. */
export function groupsFor(n: number, per: number): number {
  return Math.ceil(n / per);
}

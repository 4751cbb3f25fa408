import { LightningError } from "../types/errors.ts";
import { GpuDeviceLostError, requestGpuDevice, type GpuDeviceHandle, type GpuDeviceOptions } from "./device.ts";

/** Work sizes every kernel derives from the device limits, computed once here so no kernel hard-codes them. */
export interface GpuTuning {
  /** Threads of 1-D elementwise kernels. */
  elementwise: number;
  /** Threads cooperating on one row reduction (power of two). */
  rowThreads: number;
  /** Matmul: the workgroup is side x side threads, each computing micro x micro outputs; k-tile depth. */
  matmulSide: number;
  /** Outputs per thread per dimension in the matmul (fixed by the kernel at 4). */
  matmulMicro: number;
  matmulDepth: number;
  /** Attention: queries per workgroup (one thread each); K/V rows held in workgroup memory per head dim. */
  attentionQueries: number;
  workgroupStorageBytes: number;
  maxWorkgroupsPerDim: number;
}

function floorPow2(n: number): number {
  return 2 ** Math.floor(Math.log2(Math.max(1, n)));
}

export function tuningFromLimits(limits: GPUSupportedLimits): GpuTuning {
  const maxThreads = Math.min(limits.maxComputeInvocationsPerWorkgroup, limits.maxComputeWorkgroupSizeX);
  const storage = limits.maxComputeWorkgroupStorageSize;
  const elementwise = floorPow2(Math.min(256, maxThreads));
  const rowThreads = floorPow2(Math.min(256, maxThreads));
  let matmulSide = floorPow2(
    Math.min(16, Math.floor(Math.sqrt(limits.maxComputeInvocationsPerWorkgroup)), limits.maxComputeWorkgroupSizeY),
  );
  const matmulMicro = 4;
  let matmulDepth = 16;
  // Two tiles (A: tile x depth, B: depth x tile) of f32 must fit in workgroup memory.
  while (2 * matmulSide * matmulMicro * matmulDepth * 4 > storage && matmulDepth > 4) matmulDepth /= 2;
  while (2 * matmulSide * matmulMicro * matmulDepth * 4 > storage && matmulSide > 1) matmulSide /= 2;
  return {
    elementwise,
    rowThreads,
    matmulSide,
    matmulMicro,
    matmulDepth,
    attentionQueries: floorPow2(Math.min(64, maxThreads)),
    workgroupStorageBytes: storage,
    maxWorkgroupsPerDim: limits.maxComputeWorkgroupsPerDimension,
  };
}

/** A kernel's uniform block: field name -> WGSL scalar type, in declaration order. */
export type UniformLayout = Record<string, "u32" | "f32" | "i32">;

/** WGSL declaration of a layout as `struct Params` bound at group 0 binding 0. */
export function uniformStruct(layout: UniformLayout): string {
  const fields = Object.entries(layout).map(([n, t]) => `  ${n}: ${t},`);
  return `struct Params {\n${fields.join("\n")}\n};\n@group(0) @binding(0) var<uniform> P: Params;\n`;
}

/** A compiled-once kernel: WGSL source plus a cache key; storage bindings are 1..n in the order the dispatcher passes them. */
export interface KernelSource {
  key: string;
  code: string;
  layout: UniformLayout;
}

const kernelMemo = new WeakMap<GpuTuning, Map<string, KernelSource>>();

/** Builds a kernel's source once per tuning (device) and key. */
export function memoKernel(t: GpuTuning, key: string, layout: UniformLayout, build: () => string): KernelSource {
  let perTuning = kernelMemo.get(t);
  if (perTuning === undefined) kernelMemo.set(t, (perTuning = new Map()));
  let k = perTuning.get(key);
  if (k === undefined) {
    k = { key, code: uniformStruct(layout) + build(), layout };
    perTuning.set(key, k);
  }
  return k;
}

const UNIFORM_CACHE_LIMIT = 4096;

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

  private uniformBuffer(layout: UniformLayout, values: Record<string, number>): GPUBuffer {
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

  /** Appends one dispatch to the open command encoder. */
  dispatch(kernel: KernelSource, params: Record<string, number>, buffers: GPUBuffer[], groups: [number, number?, number?]): void {
    const [x, y = 1, z = 1] = groups;
    if (x === 0 || y === 0 || z === 0) return;
    const max = this.tuning.maxWorkgroupsPerDim;
    if (x > max || y > max || z > max)
      throw new LightningError(`${kernel.key}: dispatch ${x}x${y}x${z} exceeds ${max} workgroups per dimension`);
    const pipeline = this.pipeline(kernel);
    const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: { buffer: this.uniformBuffer(kernel.layout, params) } }];
    buffers.forEach((b, i) => entries.push({ binding: i + 1, resource: { buffer: b } }));
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

  /** A loss is reported on a later turn than the failed work: wait one turn so it is not mistaken for a
   * validation error or a good result. */
  private async settleLoss(): Promise<void> {
    await new Promise((ok) => setTimeout(ok, 0));
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

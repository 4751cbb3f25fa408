import { LightningError } from "../types/errors.ts";
import { platform } from "../platform/index.ts";
import { detectRuntime, getNavigatorGpu, type GpuRuntime, nodeWebGpuUrl } from "./navigator.ts";

/** Raised when this runtime or machine offers no WebGPU adapter. The message says how to get one. */
export class GpuUnavailableError extends LightningError {
  override readonly errorType = "GpuUnavailableError";
  override readonly status = 503;
}

/**
 * The device went away (driver reset, GPU process crash, a browser tab reclaiming it, or `destroy()`):
 * every later call on it throws this. Nothing the device held can be read back, so the trainer's state is
 * gone with it: resume from the last checkpoint on a new device. `reason` is WebGPU's ("destroyed" when
 * the program destroyed it, "unknown" otherwise).
 */
export class GpuDeviceLostError extends LightningError {
  override readonly errorType = "GpuDeviceLostError";
  override readonly status = 503;
  constructor(
    readonly reason: string,
    readonly detail: string,
  ) {
    super(
      `the GPU device was lost (${reason}${detail ? `: ${detail}` : ""}); its buffers are gone: resume from the last checkpoint on a new device`,
    );
  }
}

/** Allocating on the device failed: the model, its gradients and optimizer state (or a workspace) did not fit. */
export class GpuOutOfMemoryError extends LightningError {
  override readonly errorType = "GpuOutOfMemoryError";
  override readonly status = 507;
}

export const GPU_HELP =
  "Install a Vulkan driver for your GPU, or on a machine without one Mesa's software rasteriser lavapipe " +
  "(Debian bookworm: `apt-get install -t bookworm-backports mesa-vulkan-drivers libvulkan1`). " +
  "Node uses the `webgpu` package, Bun `bun-webgpu` (optional peer dependencies: `npm install webgpu` or `bun-webgpu`), " +
  "Deno and browsers their built-in navigator.gpu.";

/** Features that change how kernels can be written; requested when the adapter has them. */
export const INTERESTING_FEATURES = ["shader-f16", "subgroups", "timestamp-query"] as const;
export type GpuFeature = (typeof INTERESTING_FEATURES)[number];

/** Limits worth raising to the adapter's maximum: big weight buffers and big workgroups. */
const RAISED_LIMITS = [
  "maxBufferSize",
  "maxStorageBufferBindingSize",
  "maxComputeWorkgroupStorageSize",
  "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupSizeX",
  "maxComputeWorkgroupSizeY",
  "maxStorageBuffersPerShaderStage",
  "maxComputeWorkgroupsPerDimension",
] as const;
type RaisedLimit = (typeof RAISED_LIMITS)[number];

/** Newer limits some adapters report as 0 (lavapipe through bun-webgpu), below the spec default. bun-webgpu
 * fills unrequested limits with the default and then rejects them as above the adapter's value, so these
 * are requested at the adapter's own value; the spec treats a maximum below the default as the default. */
const ECHOED_LIMITS = [
  "maxStorageBuffersInFragmentStage",
  "maxStorageBuffersInVertexStage",
  "maxStorageTexturesInFragmentStage",
  "maxStorageTexturesInVertexStage",
];

export interface GpuDeviceOptions {
  powerPreference?: GPUPowerPreference;
  /** Ask for these features too; missing ones are skipped, not fatal. Default: INTERESTING_FEATURES. */
  features?: readonly GpuFeature[];
}

export interface GpuAdapterReport {
  runtime: GpuRuntime;
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** True for CPU implementations (lavapipe/llvmpipe, SwiftShader, WARP). */
  software: boolean;
  features: GpuFeature[];
  /** The limits this device got, for the raised ones (adapter maximum). */
  limits: Record<RaisedLimit, number>;
}

export interface GpuDeviceHandle {
  device: GPUDevice;
  report: GpuAdapterReport;
}

/** PCI vendor ids some runtimes (Deno) report instead of a name. */
const VENDOR_IDS: Record<string, string> = {
  "4318": "nvidia",
  "4098": "amd",
  "32902": "intel",
  "4203": "apple",
  "65541": "mesa",
  "5140": "microsoft",
};

const SOFTWARE_PATTERN = /llvmpipe|lavapipe|swiftshader|software|warp|microsoft basic render/i;

/** Gets a GPUDevice in Node, Bun, Deno or a browser, with the useful limits raised, or throws GpuUnavailableError. */
export async function requestGpuDevice(options: GpuDeviceOptions = {}): Promise<GpuDeviceHandle> {
  const runtime = detectRuntime();
  let gpu: GPU | null;
  try {
    gpu = await getNavigatorGpu();
  } catch (cause) {
    throw new GpuUnavailableError(`WebGPU could not be loaded in ${runtime}: ${String(cause)}. ${GPU_HELP}`, { cause });
  }
  if (gpu === null) throw new GpuUnavailableError(`This ${runtime} runtime has no WebGPU (navigator.gpu). ${GPU_HELP}`);
  const adapter = await gpu.requestAdapter({ powerPreference: options.powerPreference ?? "high-performance" });
  if (adapter === null) throw new GpuUnavailableError(`WebGPU found no adapter in ${runtime}. ${GPU_HELP}`);

  const wanted = options.features ?? INTERESTING_FEATURES;
  const features = wanted.filter((f) => adapter.features.has(f));
  const requiredLimits: Record<string, number> = {};
  for (const name of RAISED_LIMITS) requiredLimits[name] = adapter.limits[name];
  for (const name of ECHOED_LIMITS) {
    const value = (adapter.limits as unknown as Record<string, unknown>)[name];
    if (typeof value === "number") requiredLimits[name] = value;
  }
  const device = await adapter.requestDevice({ requiredFeatures: features, requiredLimits });
  return { device, report: adapterReport(runtime, adapter.info, features, device.limits) };
}

/** What an adapter is, from its info, the features asked for that it has, and the limits got. */
function adapterReport(
  runtime: GpuRuntime,
  info: Pick<GPUAdapterInfo, "vendor" | "architecture" | "device" | "description">,
  features: GpuFeature[],
  got: Readonly<Record<RaisedLimit, number>>,
): GpuAdapterReport {
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`;
  const limits = {} as Record<RaisedLimit, number>;
  for (const name of RAISED_LIMITS) limits[name] = got[name];
  return {
    runtime,
    vendor: VENDOR_IDS[info.vendor] ?? info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    software: SOFTWARE_PATTERN.test(text) || (info as { isFallbackAdapter?: boolean }).isFallbackAdapter === true,
    features,
    limits,
  };
}

export type GpuProbe = { ok: true; report: GpuAdapterReport } | { ok: false; reason: string };

/**
 * True when requestGpuDevice would succeed; for tests and backend selection. Never throws. On Node the
 * adapter is asked in a child process: Dawn prints warnings of its own on the process's stderr (for
 * lavapipe, limits "artificially reduced"), which a command that only looks should not show.
 */
export async function probeGpu(): Promise<GpuProbe> {
  if (detectRuntime() === "node") return probeInChild();
  try {
    const handle = await requestGpuDevice();
    handle.device.destroy();
    return { ok: true, report: handle.report };
  } catch (e) {
    return { ok: false, reason: e instanceof Error ? e.message : String(e) };
  }
}

/** The adapter as a child process sees it (Node): what requestGpuDevice would report, without a device here. */
async function probeInChild(): Promise<GpuProbe> {
  let url: string;
  try {
    url = nodeWebGpuUrl();
  } catch (e) {
    return { ok: false, reason: `WebGPU could not be loaded in node: ${e instanceof Error ? e.message : String(e)}. ${GPU_HELP}` };
  }
  const source = `const dawn = await import(${JSON.stringify(url)});
const adapter = await dawn.create([]).requestAdapter({ powerPreference: "high-performance" });
const i = adapter?.info;
console.log(JSON.stringify(adapter ? {
  info: { vendor: i.vendor, architecture: i.architecture, device: i.device, description: i.description, isFallbackAdapter: i.isFallbackAdapter === true },
  features: [...adapter.features],
  limits: Object.fromEntries(${JSON.stringify(RAISED_LIMITS)}.map((n) => [n, adapter.limits[n]])),
} : null));
process.exit(0);`;
  const r = await platform.runScript(source, 60);
  let seen: { info: GPUAdapterInfo; features: string[]; limits: Record<RaisedLimit, number> } | null;
  try {
    seen = JSON.parse(r.stdout.trim().split("\n").pop() ?? "");
  } catch {
    const why = r.stderr.trim().split("\n").pop() || `exit code ${r.code}`;
    return { ok: false, reason: `WebGPU could not be loaded in node: ${why}. ${GPU_HELP}` };
  }
  if (seen === null) return { ok: false, reason: `WebGPU found no adapter in node. ${GPU_HELP}` };
  const features = INTERESTING_FEATURES.filter((f) => seen.features.includes(f));
  return { ok: true, report: adapterReport("node", seen.info, features, seen.limits) };
}

/** One line for logs: "mesa software llvmpipe (software) via node; shader-f16,subgroups". */
export function describeAdapter(r: GpuAdapterReport): string {
  const kind = r.software ? "software" : "hardware";
  return `${r.vendor || "unknown vendor"} ${r.architecture || "?"} ${r.description || r.device} (${kind}) via ${r.runtime}; features: ${r.features.join(",") || "none"}`;
}

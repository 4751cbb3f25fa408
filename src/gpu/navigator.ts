/// <reference types="@webgpu/types" preserve="true" />

/**
 * The one place that knows how each runtime exposes WebGPU.
 * Node: the `webgpu` package (Dawn), Bun: `bun-webgpu` (the `webgpu` package crashes Bun under load),
 * Deno and browsers: the built-in `navigator.gpu`.
 * The reference above keeps the WebGPU types in the published declarations (they name GPUDevice etc.),
 * so a consumer type-checks without adding @webgpu/types itself.
 */

import { platform, type RuntimeName } from "../platform/index.ts";

export type GpuRuntime = RuntimeName;

/** Which JavaScript runtime this is (detected once by the platform, src/platform/). */
export function detectRuntime(): GpuRuntime {
  return platform.runtime;
}

let cached: Promise<GPU | null> | undefined;

/** Native bindings are imported through a variable so browser bundlers do not try to pack them. */
const NODE_WEBGPU = "webgpu";
const BUN_WEBGPU = "bun-webgpu";
type NodeWebGpu = { create(flags: string[]): GPU; globals: object };
type BunWebGpu = { setupGlobals(): void };

/** The runtime's `GPU` object, or null when this runtime has no WebGPU at all. Installs the WebGPU globals
 * (GPUBufferUsage, GPUMapMode, ...) where the runtime does not have them built in. */
export function getNavigatorGpu(): Promise<GPU | null> {
  cached ??= loadGpu(detectRuntime());
  return cached;
}

async function loadGpu(runtime: GpuRuntime): Promise<GPU | null> {
  switch (runtime) {
    case "node": {
      const dawn = (await import(NODE_WEBGPU)) as NodeWebGpu;
      Object.assign(globalThis, dawn.globals);
      // Keep the instance alive for the whole process: collecting it tears Dawn down under live devices.
      return dawn.create([]);
    }
    case "bun": {
      const bunGpu = (await import(BUN_WEBGPU)) as BunWebGpu;
      bunGpu.setupGlobals();
      return navigatorGpu();
    }
    case "deno":
    case "browser":
      return navigatorGpu();
  }
}

/**
 * The URL of Node's WebGPU binding (the `webgpu` package) as this module resolves it, for a child
 * process to import; throws when it is not installed.
 */
export function nodeWebGpuUrl(): string {
  return import.meta.resolve(NODE_WEBGPU);
}

function navigatorGpu(): GPU | null {
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  return nav?.gpu ?? null;
}

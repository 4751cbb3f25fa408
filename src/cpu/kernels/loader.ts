/**
 * Loads the CPU model kernels the same way on every runtime: decode the embedded base64, compile once per
 * process, instantiate with a memory created here (the module imports `env.memory`).
 */
import { CPU_KERNELS_SHARED_WASM_BASE64, CPU_KERNELS_WASM_BASE64 } from "./kernels.wasm.ts";
import { CpuCore } from "./core.ts";
import type { CpuKernelExports } from "./exports.ts";

/** The module's bytes: over an ordinary memory, or (`shared`) over a shared one for a worker pool. */
export function cpuKernelBytes(shared = false): Uint8Array<ArrayBuffer> {
  const s = atob(shared ? CPU_KERNELS_SHARED_WASM_BASE64 : CPU_KERNELS_WASM_BASE64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

let compiled: WebAssembly.Module | undefined;
let compiling: Promise<WebAssembly.Module> | undefined;
let shared: CpuCore | undefined;

function instantiate(module: WebAssembly.Module): CpuCore {
  const memory = new WebAssembly.Memory({ initial: 1 });
  const instance = new WebAssembly.Instance(module, { env: { memory } });
  return new CpuCore(instance.exports as unknown as CpuKernelExports, memory);
}

/**
 * A fresh instance with its own memory, synchronously (servers, workers; a browser's main thread refuses
 * synchronous compilation of modules this size: call `loadCpuCore()` there first).
 */
export function instantiateCpuCore(): CpuCore {
  compiled ??= new WebAssembly.Module(cpuKernelBytes());
  return instantiate(compiled);
}

/** The process's shared instance (created on first use). */
export function cpuCore(): CpuCore {
  shared ??= instantiateCpuCore();
  return shared;
}

/** The shared instance, compiled asynchronously (every runtime, browsers' main thread included). */
export async function loadCpuCore(): Promise<CpuCore> {
  if (!compiled) {
    compiling ??= WebAssembly.compile(cpuKernelBytes());
    compiled = await compiling;
  }
  shared ??= instantiate(compiled);
  return shared;
}

/**
 * The CPU backend one engine (trainer, generation engine) runs on, and the `ModelOps` it hands out: the
 * Wasm SIMD kernels on a worker pool of its own [default], or the plain-TS reference (`ops: "reference"`,
 * the oracle). The pool is created on
 * first use (creating it is async, the engines' constructors are not) and ended by `close()`; its
 * workers never keep a process alive. Results do not depend on the thread count (src/cpu/README.md).
 */
import { platform } from "../platform/index.ts";
import { ValidationError } from "../types/errors.ts";
import { CpuPool } from "./pool.ts";
import { referenceOps, type ModelOps } from "../model/model-ops.ts";
import { WasmOps } from "./wasm-ops.ts";
import { instantiateCpuCore, loadCpuCore } from "./kernels/index.ts";

export type CpuOpsChoice = "wasm" | "reference";

export interface CpuEngineOptions {
  /** "wasm": the Wasm SIMD kernels [default]; "reference": plain TypeScript. */
  ops?: CpuOpsChoice;
  /** Threads of the Wasm engine, the calling one included [every CPU; 1 where memory cannot be shared,
   * and on Deno, whose workers would keep the process alive until the engine is closed]. */
  threads?: number;
}

/** Checks the options (a ValidationError names the field) and fills in the default choice. */
export function resolveCpuEngineOptions(o: CpuEngineOptions): { ops: CpuOpsChoice; threads?: number } {
  const ops = o.ops ?? "wasm";
  if (ops !== "wasm" && ops !== "reference") throw new ValidationError(`ops must be "wasm" or "reference", got ${String(ops)}`, ["ops"]);
  if (o.threads !== undefined && !(Number.isInteger(o.threads) && o.threads >= 1))
    throw new ValidationError(`threads must be a positive integer, got ${o.threads}`, ["threads"]);
  if (o.threads !== undefined && ops === "reference") throw new ValidationError('threads applies to ops "wasm" only', ["threads"]);
  return { ops, threads: o.threads };
}

/** One engine's CPU backend: `get()` starts it once and gives its ops, `close()` ends its pool. */
export class CpuBackend {
  readonly choice: CpuOpsChoice;
  private readonly threads?: number;
  /** Shared memory even on one thread, where it can be shared: activation scopes need it (trainers). */
  private readonly keepActivations: boolean;
  private pending: Promise<ModelOps> | null = null;
  private pool: CpuPool | null = null;
  private closed = false;

  constructor(options: CpuEngineOptions = {}, { keepActivations = false }: { keepActivations?: boolean } = {}) {
    const o = resolveCpuEngineOptions(options);
    this.choice = o.ops;
    this.threads = o.threads;
    this.keepActivations = keepActivations;
  }

  /** The ops, the pool started on the first call. */
  get(): Promise<ModelOps> {
    if (this.closed) return Promise.reject(new ValidationError("this CPU engine is closed", ["ops"]));
    this.pending ??= this.start();
    return this.pending;
  }

  /** Threads the Wasm engine runs on once started (1 for the reference). */
  get threadCount(): number {
    return this.pool?.threads ?? 1;
  }

  private async start(): Promise<ModelOps> {
    if (this.choice === "reference") return referenceOps;
    const threads = this.threads ?? (platform.workersKeepAlive() ? 1 : platform.cpuCount());
    // one thread, or no shared memory (a browser page that is not cross-origin isolated): an instance of
    // its own over plain memory, compiled asynchronously (a browser's main thread refuses to compile it
    // synchronously). A trainer on one thread still gets a shared memory (a pool without workers) where it
    // can: growth never detaches views over it, so its activations can stay in Wasm memory (wasm-ops.ts).
    if (!platform.canShareMemory() || (threads === 1 && !this.keepActivations)) {
      await loadCpuCore();
      return new WasmOps(instantiateCpuCore());
    }
    const pool = await CpuPool.create(threads);
    if (this.closed) {
      pool.close();
      throw new ValidationError("this CPU engine is closed", ["ops"]);
    }
    this.pool = pool;
    return new WasmOps(pool);
  }

  /** Ends the pool's workers; the engine cannot run afterwards. */
  close(): void {
    this.closed = true;
    this.pool?.close();
    this.pool = null;
  }
}

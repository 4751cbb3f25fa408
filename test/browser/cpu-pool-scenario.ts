/**
 * What test/browser/cpu-pool.test.ts runs in Node and in a dedicated worker of a Chromium page (a window's
 * main thread may not block in Atomics.wait, so the pool lives in a worker there): a CPU engine of the
 * requested threads (or a bare CpuPool, `via: "pool"`) runs GEMMs of odd sizes big enough to be split, and a prefill of a small random model,
 * through the Wasm ops. Plain data out, so the result crosses postMessage unchanged.
 */
import { parseModelConfig } from "../../src/model/config.ts";
import { CpuBackend } from "../../src/cpu/backend.ts";
import { CpuPool, type Task } from "../../src/cpu/pool.ts";
import { CpuDecoder } from "../../src/model/generate.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { digest, type Out } from "../wasm/output-digest.ts";

export interface PoolRun {
  /** FNV-1a of every output's exact bits. */
  digest: string;
  /** Threads the engine started with. */
  threads: number;
  /** Most threads handed a task in one pool call (1 when no pool ran). */
  widestCall: number;
  /** `crossOriginIsolated` where it ran (null outside a browser). */
  isolated: boolean | null;
}

export async function poolRun(threads: number, via: "engine" | "pool" = "engine"): Promise<PoolRun> {
  let widestCall = 1;
  const run = CpuPool.prototype.run;
  // counts the threads each pool call really uses; the call itself is unchanged
  CpuPool.prototype.run = function (this: CpuPool, tasks: Task[]) {
    widestCall = Math.max(widestCall, tasks.length);
    run.call(this, tasks);
  };
  const engine = new CpuBackend({ threads });
  let pool: CpuPool | null = null;
  try {
    if (via === "pool") pool = await CpuPool.create(threads);
    const ops = pool ? new WasmOps(pool) : await engine.get();
    const rng = new Rng(20261127);
    const f32 = (n: number) => Float32Array.from({ length: n }, () => rng.normal());
    const out: Out = {};
    const [m, k, n] = [67, 301, 157];
    const a = f32(m * k);
    out.matmul = ops.matmul(a, f32(k * n), { m, k, n });
    out.matmulABt = ops.matmulABt(a, f32(n * k), { m, k, n });
    out.matmulAtB = ops.matmulAtB(f32(k * m), f32(k * n), { m, k, n });
    out.tall = ops.matmul(f32(203 * 129), f32(129 * 19), { m: 203, k: 129, n: 19 });
    const config = parseModelConfig({
      vocab_size: 611,
      d_model: 64,
      n_layers: 2,
      n_heads: 4,
      n_kv_heads: 2,
      d_ff: 96,
      max_seq_len: 16,
      rope_theta: 10000,
      norm_eps: 1e-5,
      tie_embeddings: true,
    });
    const decoder = new CpuDecoder(config, initParams(config, 3), 12, undefined, ops);
    out.prefill = decoder.prefill([1, 7, 42, 300, 5, 9, 600, 11, 2]);
    out.step = decoder.step(13);
    decoder.dispose();
    const isolated = (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated;
    return { digest: digest(out), threads: pool?.threads ?? engine.threadCount, widestCall, isolated: isolated ?? null };
  } finally {
    CpuPool.prototype.run = run;
    engine.close();
    pool?.close();
  }
}

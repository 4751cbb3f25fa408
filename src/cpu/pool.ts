/**
 * A pool of worker threads over ONE shared Wasm memory (the CPU kernels of src/cpu/kernels/), created once
 * per engine; the threads themselves come from the platform (`Platform.startWorker`). Each worker runs its own
 * instance of the shared-memory build of the CPU kernels; a call hands every thread one task (an export
 * and its arguments) through a control block, the calling thread runs task 0 itself and then blocks in
 * Atomics.wait until the others are done, so the kernels stay synchronous for their callers. How work is
 * split is the caller's fixed choice (e.g. GEMM column ranges), never the scheduler's, so results do not
 * depend on timing — and, for kernels whose elements do not depend on the split, not on the thread count.
 */
import { platform, type WorkerPort } from "../platform/index.ts";
import { LightningError } from "../types/errors.ts";
import { CpuCore, cpuKernelBytes, type CpuKernelExports } from "./kernels/index.ts";

/** Most arguments of one task. */
const MAX_ARGS = 16;
// control block (Int32): generation, done count, stop flag, error flag, then one op index per thread
const GEN = 0;
const DONE = 1;
const STOP = 2;
const ERROR = 3;
const OPS = 4;

/** The kernels a task may run (index = op code). */
const TASK_EXPORTS = [
  "gemm",
  "rmsnorm",
  "rmsnormBackward",
  "rope",
  "swiglu",
  "swigluBackward",
  "logSoftmaxGatherEntropy",
  "logSoftmaxGatherEntropyBackward",
  "attention",
  "attentionBackward",
  "attentionDecode",
  "adamw",
] as const;
export type TaskExport = (typeof TASK_EXPORTS)[number];

export interface Task {
  name: TaskExport;
  args: number[];
}

/** The worker: instantiate over the shared memory, say ready, then loop on the control block forever. */
const WORKER_SOURCE = `
function __onmessage(d) {
  const ex = new WebAssembly.Instance(new WebAssembly.Module(d.bytes), { env: { memory: d.memory } }).exports;
  const ctrl = new Int32Array(d.ctrl), args = new Float64Array(d.args), names = d.names, me = d.index;
  __post("ready");
  let seen = 0;
  for (;;) {
    Atomics.wait(ctrl, ${GEN}, seen);
    seen = Atomics.load(ctrl, ${GEN});
    if (Atomics.load(ctrl, ${STOP}) === 1) return;
    const op = ctrl[${OPS} + me];
    if (op >= 0) {
      try {
        ex[names[op]](...args.subarray(me * ${MAX_ARGS}, (me + 1) * ${MAX_ARGS}));
      } catch (e) {
        Atomics.store(ctrl, ${ERROR}, 1);
      }
    }
    Atomics.add(ctrl, ${DONE}, 1);
    Atomics.notify(ctrl, ${DONE});
  }
}
`;

export class CpuPool {
  private stopped = false;

  private constructor(
    /** The calling thread's instance and arena over the shared memory. */
    readonly core: CpuCore,
    private readonly workers: WorkerPort[],
    private readonly ctrl: Int32Array,
    private readonly args: Float64Array,
  ) {}

  /** Threads in all, the calling one included. */
  get threads(): number {
    return this.workers.length + 1;
  }

  /**
   * A pool of `threads` threads (default: every CPU this process may use), the calling one included.
   * With 1 thread, or where memory cannot be shared, no worker is started and every task runs here.
   */
  static async create(threads = platform.cpuCount()): Promise<CpuPool> {
    if (!Number.isInteger(threads) || threads < 1) throw new LightningError(`threads must be a positive integer, got ${threads}`);
    const n = platform.canShareMemory() ? threads : 1;
    const bytes = cpuKernelBytes(true);
    const module = await WebAssembly.compile(bytes);
    const memory = new WebAssembly.Memory({ initial: 1, maximum: 65536, shared: true });
    const instance = await WebAssembly.instantiate(module, { env: { memory } });
    const core = new CpuCore(instance.exports as unknown as CpuKernelExports, memory);
    // no worker reads them on one thread, and a browser context that is not cross-origin isolated has no
    // SharedArrayBuffer at all
    const Buffer = n > 1 ? SharedArrayBuffer : ArrayBuffer;
    const ctrlBuffer = new Buffer((OPS + n) * 4);
    const argsBuffer = new Buffer(n * MAX_ARGS * 8);
    const workers: WorkerPort[] = [];
    const ready: Promise<void>[] = [];
    for (let index = 1; index < n; index++) {
      const w = platform.startWorker(WORKER_SOURCE);
      ready.push(
        new Promise((resolve, reject) => {
          w.onMessage((m) => (m === "ready" ? resolve() : reject(new LightningError(`CPU worker ${index}: unexpected message`))));
          w.onError((e) => reject(new LightningError(`CPU worker ${index} failed to start: ${String((e as Error)?.message ?? e)}`)));
        }),
      );
      w.postMessage({ bytes, memory, ctrl: ctrlBuffer, args: argsBuffer, names: TASK_EXPORTS, index });
      workers.push(w);
    }
    const pool = new CpuPool(core, workers, new Int32Array(ctrlBuffer), new Float64Array(argsBuffer));
    try {
      await Promise.all(ready);
    } catch (e) {
      pool.close();
      throw e;
    }
    return pool;
  }

  /** Runs tasks[t] on thread t (tasks.length <= threads; task 0 on the calling thread) and waits for all. */
  run(tasks: Task[]): void {
    if (this.stopped) throw new LightningError("the CPU pool is closed");
    if (tasks.length === 0) return;
    if (tasks.length > this.threads) throw new LightningError(`${tasks.length} tasks for ${this.threads} threads`);
    const others = this.workers.length;
    for (let t = 1; t <= others; t++) {
      const task = tasks[t];
      this.ctrl[OPS + t] = task ? TASK_EXPORTS.indexOf(task.name) : -1;
      if (task) this.args.set(task.args, t * MAX_ARGS);
    }
    if (others > 0) {
      Atomics.store(this.ctrl, DONE, 0);
      Atomics.store(this.ctrl, ERROR, 0);
      Atomics.add(this.ctrl, GEN, 1);
      Atomics.notify(this.ctrl, GEN);
    }
    const fn = this.core.exports[tasks[0].name] as unknown as (...a: number[]) => void;
    try {
      fn(...tasks[0].args);
    } finally {
      // even when task 0 traps: a worker still running would write into memory its caller frees, and its
      // late count would end the next call's wait early
      for (let done = Atomics.load(this.ctrl, DONE); done < others; done = Atomics.load(this.ctrl, DONE))
        Atomics.wait(this.ctrl, DONE, done);
    }
    if (others > 0 && Atomics.load(this.ctrl, ERROR) === 1) throw new LightningError("a CPU kernel failed on a worker thread");
  }

  /** Stops and ends the workers (the pool cannot be used afterwards). */
  close(): void {
    if (this.stopped) return;
    this.stopped = true;
    Atomics.store(this.ctrl, STOP, 1);
    Atomics.add(this.ctrl, GEN, 1);
    Atomics.notify(this.ctrl, GEN);
    for (const w of this.workers) w.terminate();
  }
}

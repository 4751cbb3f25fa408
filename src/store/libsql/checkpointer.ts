/**
 * Background WAL checkpoints for an embedded file database.
 *
 * SQLite's default (`wal_autocheckpoint=1000`) runs a checkpoint inside whichever COMMIT pushes the WAL
 * past 1,000 pages: that COMMIT copies the pages into the database file and fsyncs it, on the event
 * loop. Measured on the 2-core dev box (`bench/store-libsql.ts`, 32 workers), that was a third of the
 * time spent in SQLite, and it swings with the disk's fsync latency.
 *
 * Here a worker thread with its own connection runs `PRAGMA wal_checkpoint(PASSIVE)` after commits
 * (at most every `intervalMs`), so the copy and fsync happen off the event loop; PASSIVE never blocks
 * the writer. Commits signal it through shared memory (no message per commit). The main connection
 * keeps a high `wal_autocheckpoint` as a safety net, so the WAL stays bounded even if the worker falls
 * behind. Durability is unchanged: a commit is in the WAL before its promise resolves either way.
 *
 * The worker runs plain JavaScript (`eval`) that loads the same `libsql` binding through `require`, which
 * works under Node, Deno and Bun (`node:worker_threads`).
 */
import { Worker } from "node:worker_threads";
import { createRequire } from "node:module";
import process from "node:process";

/** Pages the WAL may hold before the main connection checkpoints itself (the safety net). */
export const SAFETY_NET_PAGES = 10_000;

/**
 * Shared words: [SIGNAL] commits since the last checkpoint; [STATE] who may touch the connection.
 *
 * Why STATE: a process that exits with the worker inside the libsql binding kills it mid-call, and the
 * binding (neon) then panics and aborts the whole process (exit 134). So the worker enters the binding
 * only from IDLE, and stopping (from close() or from the process's 'exit' event) waits until it has
 * left it and closed its connection.
 */
const SIGNAL = 0;
const STATE = 1;
const IDLE = 0; // waiting; may start a checkpoint
const BUSY = 1; // inside a checkpoint
const STOP = 2; // asked to stop; finishes its checkpoint, closes its connection
const CLOSED = 3; // connection closed: no more native calls

const WORKER_SOURCE = `
const { workerData, parentPort } = require("node:worker_threads");
const flags = new Int32Array(workerData.flags);
const [SIGNAL, STATE, IDLE, BUSY, STOP, CLOSED] = [${SIGNAL}, ${STATE}, ${IDLE}, ${BUSY}, ${STOP}, ${CLOSED}];
function run() {
  const Database = require(workerData.libsql);
  const db = new Database(workerData.path);
  try {
    const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)").raw(true);
    parentPort.postMessage({ ready: true });
    for (;;) {
      Atomics.wait(flags, SIGNAL, 0);
      if (Atomics.compareExchange(flags, STATE, IDLE, BUSY) !== IDLE) break;
      Atomics.store(flags, SIGNAL, 0);
      try {
        checkpoint.all();
      } catch (e) {
        // Another connection is checkpointing: the next commit's signal retries.
        if (!e || e.code !== "SQLITE_BUSY") throw e;
      }
      if (Atomics.compareExchange(flags, STATE, BUSY, IDLE) !== BUSY) break;
      // Pace: pages rewritten by many commits in a row are copied once. A stop wakes it.
      Atomics.wait(flags, STATE, IDLE, workerData.intervalMs);
    }
  } finally {
    db.close();
  }
}
try {
  run();
  parentPort.postMessage({ closed: true });
} catch (e) {
  parentPort.postMessage({ error: String((e && e.message) || e) });
} finally {
  Atomics.store(flags, STATE, CLOSED);
  Atomics.notify(flags, STATE);
}
`;

/** Checkpointers whose worker has not closed its connection yet: the 'exit' hook stops them. */
const live = new Set<BackgroundCheckpointer>();
let exitHookInstalled = false;
function track(c: BackgroundCheckpointer): void {
  live.add(c);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // 'exit' runs before the runtime tears its workers down, on a natural exit and on process.exit().
  process.on("exit", () => {
    for (const each of live) each.stopNow();
  });
}

/** Blocks this thread until `flags[index]` is no longer `value` or `ms` pass (spins where the main thread may not wait). */
function waitWhile(flags: Int32Array, index: number, value: number, ms: number): void {
  const deadline = Date.now() + ms;
  while (Atomics.load(flags, index) === value) {
    const left = deadline - Date.now();
    if (left <= 0) return;
    try {
      Atomics.wait(flags, index, value, left);
    } catch {
      // A runtime that forbids Atomics.wait on its main thread: poll instead (only at exit, briefly).
    }
  }
}

export interface CheckpointerOptions {
  /** Least time between two checkpoints (ms). */
  intervalMs?: number;
  /** Called once if the worker fails (it then stops; the caller falls back to SQLite's own checkpoints). */
  onError(err: Error): void;
}

export class BackgroundCheckpointer {
  private readonly flags = new Int32Array(new SharedArrayBuffer(8));
  private readonly worker: Worker;
  private readonly exited: Promise<void>;
  private failed = false;

  private constructor(path: string, opts: CheckpointerOptions, ready: (ok: boolean) => void) {
    const libsql = createRequire(import.meta.url).resolve("libsql");
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { libsql, path, flags: this.flags.buffer, intervalMs: opts.intervalMs ?? 100 },
    });
    track(this);
    const fail = (err: Error): void => {
      ready(false);
      if (this.failed) return;
      this.failed = true;
      opts.onError(err);
    };
    this.worker.on("message", (m: { ready?: boolean; error?: string }) => {
      if (m.ready) ready(true);
      if (m.error !== undefined) fail(new Error(`background WAL checkpoint failed: ${m.error}`));
    });
    this.worker.on("error", (e) => fail(e));
    this.exited = new Promise((resolve) =>
      this.worker.once("exit", () => {
        live.delete(this);
        ready(false);
        resolve();
      }),
    );
  }

  /** Starts a checkpointer on the database file at `path`; null when the worker could not open it (reported through `onError`). */
  static async start(path: string, opts: CheckpointerOptions): Promise<BackgroundCheckpointer | null> {
    let ready!: (ok: boolean) => void;
    const started = new Promise<boolean>((resolve) => (ready = resolve));
    const c = new BackgroundCheckpointer(path, opts, ready);
    if (await started) {
      // Only now (and after the listeners, adding one refs it again): an open store must not keep its process alive.
      c.worker.unref();
      return c;
    }
    await c.stop();
    return null;
  }

  /** True until the worker fails or stops. */
  get running(): boolean {
    return !this.failed && Atomics.load(this.flags, STATE) < STOP;
  }

  /** After a write commit: wakes the worker if it is idle (one atomic operation otherwise). */
  committed(): void {
    if (Atomics.compareExchange(this.flags, SIGNAL, 0, 1) === 0) Atomics.notify(this.flags, SIGNAL);
  }

  /** Asks the worker to stop: it finishes a checkpoint in progress, then closes its connection. */
  private requestStop(): void {
    for (;;) {
      const state = Atomics.load(this.flags, STATE);
      if (state === STOP || state === CLOSED) break;
      if (Atomics.compareExchange(this.flags, STATE, state, STOP) === state) break;
    }
    Atomics.store(this.flags, SIGNAL, 1);
    Atomics.notify(this.flags, SIGNAL);
    Atomics.notify(this.flags, STATE);
  }

  /** Stops the worker and waits until its connection is closed. */
  async stop(): Promise<void> {
    this.requestStop();
    // Held (ref'd) while waiting: an unref'd worker would let the process exit in the middle of close().
    this.worker.ref();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((resolve) => (timer = setTimeout(resolve, 5_000, "timeout")));
    const how = await Promise.race([this.exited, timeout]);
    clearTimeout(timer);
    // Still in a long checkpoint: let it finish on its own (it then sees the stop flag and closes its
    // connection). Not terminate(): stopping a thread inside the native binding aborts the whole process.
    if (how === "timeout") this.worker.unref();
  }

  /**
   * The process is exiting: stops the worker and blocks until it has closed its connection (a
   * checkpoint in progress finishes first; at most `ms`), so that the runtime never kills it inside
   * the binding.
   */
  stopNow(ms = 5_000): void {
    this.requestStop();
    waitWhile(this.flags, STATE, STOP, ms);
    live.delete(this);
  }
}

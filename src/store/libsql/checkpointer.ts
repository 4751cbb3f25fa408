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

/** Pages the WAL may hold before the main connection checkpoints itself (the safety net). */
export const SAFETY_NET_PAGES = 10_000;

const WORKER_SOURCE = `
const { workerData, parentPort } = require("node:worker_threads");
const flags = new Int32Array(workerData.flags); // [0] commits since the last checkpoint, [1] stop
function run() {
  const Database = require(workerData.libsql);
  const db = new Database(workerData.path);
  const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)").raw(true);
  parentPort.postMessage({ ready: true });
  try {
    while (Atomics.load(flags, 1) === 0) {
      Atomics.wait(flags, 0, 0);
      if (Atomics.load(flags, 1) !== 0) break;
      Atomics.store(flags, 0, 0);
      try {
        checkpoint.all();
      } catch (e) {
        // Another connection is checkpointing: the next commit's signal retries.
        if (!e || e.code !== "SQLITE_BUSY") throw e;
      }
      // Pace: pages rewritten by many commits in a row are copied once.
      Atomics.wait(flags, 1, 0, workerData.intervalMs);
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
}
`;

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
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { libsql, path, flags: this.flags.buffer, intervalMs: opts.intervalMs ?? 100 } });
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
    this.exited = new Promise((resolve) => this.worker.once("exit", () => (ready(false), resolve())));
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
    return !this.failed && Atomics.load(this.flags, 1) === 0;
  }

  /** After a write commit: wakes the worker if it is idle (one atomic operation otherwise). */
  committed(): void {
    if (Atomics.compareExchange(this.flags, 0, 0, 1) === 0) Atomics.notify(this.flags, 0);
  }

  /** Stops the worker and waits until its connection is closed. */
  async stop(): Promise<void> {
    Atomics.store(this.flags, 1, 1);
    Atomics.notify(this.flags, 0);
    Atomics.notify(this.flags, 1);
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
}

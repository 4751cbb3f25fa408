/**
 * Browsers (and any other runtime without Node's modules): no processes, files, signals or servers.
 * What can work does (timers, next turn, telemetry a browser can give); the rest throws a clear error.
 */
import type { Platform } from "./types.ts";
import { StackContextManager } from "./stack-context.ts";
import { startWebWorker, webCanShareMemory } from "./web-worker.ts";

const unsupported = (what: string) => (): never => {
  throw new Error(`${what} is not available in this runtime (browser); run it on Node, Deno or Bun`);
};

export const browserPlatform: Platform = {
  runtime: "browser",
  description: "browser",
  env: () => undefined,
  args: () => [],
  cwd: () => "/",
  readTextFile: unsupported("Reading a file"),
  files: unsupported("File access (give an FsAdapter of your own)"),
  importModule: async (url) => (await import(/* @vite-ignore */ url)) as Record<string, unknown>,
  exit: unsupported("Exiting the process"),
  onSignal: () => () => {},
  dieBySignal: unsupported("Signals"),
  onParentExit: () => () => {},
  unrefTimer: () => {},
  scheduleNextTurn: (fn) => void setTimeout(fn, 0),
  systemMemoryBytes: (fallback) => fallback,
  systemSnapshot: () => ({
    timestamp: new Date().toISOString().slice(0, 19),
    host: null,
    os: null,
    cpu_name: null,
    cpu_cores: (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency ?? null,
    cpu_threads: null,
    cpu_usage_pct: null,
    mem_used_gb: null,
    mem_total_gb: null,
    mem_pct: null,
    disk_used_gb: null,
    disk_total_gb: null,
    disk_pct: null,
    bytes_sent_mb: null,
    bytes_recv_mb: null,
  }),
  serveFetch: async () => unsupported("Serving HTTP")(),
  longestHoldSeconds: () => Number.POSITIVE_INFINITY,
  forkClusterWorker: unsupported("Starting a worker process"),
  clusterPrimary: () => null,
  selfCommand: unsupported("Running this script as a child process"),
  spawnChild: unsupported("Spawning a child process"),
  runScript: async () => unsupported("Running a script in a child process")(),
  lowerPriority: unsupported("Changing a process's priority"),
  listenToStdin: () => () => {},
  cpuCount: () => Math.max(1, (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency ?? 1),
  canShareMemory: webCanShareMemory,
  startWorker: startWebWorker,
  workersKeepAlive: () => false,
  contextManager: () => new StackContextManager(),
};

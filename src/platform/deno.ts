/**
 * Deno 2's platform: Node's (Deno implements `node:*`, and serves through node:http for its limits),
 * with Deno's own signals, arguments, timer handles and memory query.
 */
import cluster from "node:cluster";
import { nodeCompatible, runScriptWith, thisProcess } from "./node.ts";
import type { Platform } from "./types.ts";
import { startWebWorker } from "./web-worker.ts";

interface DenoGlobal {
  version: { deno: string };
  args: string[];
  addSignalListener(signal: "SIGINT" | "SIGTERM", handler: () => void): void;
  removeSignalListener(signal: "SIGINT" | "SIGTERM", handler: () => void): void;
  unrefTimer?(id: number): void;
  systemMemoryInfo?(): { total: number };
}

export function denoPlatform(deno: DenoGlobal): Platform {
  const node = nodeCompatible();
  const setImmediateFn = (globalThis as { setImmediate?: (fn: () => void) => unknown }).setImmediate;
  return {
    ...node,
    runtime: "deno",
    runScript: runScriptWith(["eval"]),
    description: `deno ${deno.version.deno}`,
    startWorker: startWebWorker,
    workersKeepAlive: () => true,
    args: () => [...deno.args],
    onSignal(signal, handler) {
      deno.addSignalListener(signal, handler);
      return () => deno.removeSignalListener(signal, handler);
    },
    // Deno's timers are numbers (web timers), unref'd through Deno.unrefTimer.
    unrefTimer(timer) {
      if (typeof timer === "object" && timer !== null && "unref" in timer) (timer as { unref(): void }).unref();
      else deno.unrefTimer?.(timer as unknown as number);
    },
    scheduleNextTurn: setImmediateFn ? (fn) => void setImmediateFn(fn) : (fn) => void setTimeout(fn, 0),
    systemMemoryBytes(fallback) {
      const viaNode = node.systemMemoryBytes(0);
      if (viaNode > 0) return viaNode;
      try {
        const total = deno.systemMemoryInfo?.().total;
        if (typeof total === "number" && total > 0) return total;
      } catch {
        // Deno without --allow-sys: the caller's fallback.
      }
      return fallback;
    },
    selfCommand() {
      const self = thisProcess();
      return [self.execPath, "run", "-A", self.script, ...self.args];
    },
    forkClusterWorker() {
      // Deno's hand-over of each connection from the primary to a worker (node:cluster's default) now and
      // then loses one when many connect at once: the workers accept from the shared socket themselves.
      cluster.schedulingPolicy = cluster.SCHED_NONE;
      return node.forkClusterWorker();
    },
    clusterPrimary() {
      const primary = node.clusterPrimary();
      // Deno starts every worker thread of a cluster worker process as a cluster worker too, which fails
      // there (no IPC channel): such a process starts none.
      return primary && { ...primary, canStartThreads: false };
    },
  };
}

/**
 * Server clusters on `node:cluster`, which Node, Deno 2 and Bun all implement: the primary forks its
 * command line again; a server a worker starts shares the port of the other workers (Node and Deno
 * hand each connection to one worker from the primary; Bun's workers listen with `reusePort` and the
 * kernel spreads connections among them). Messages go over the IPC channel as JSON.
 */
import cluster from "node:cluster";
import process from "node:process";
import type { ClusterPrimary, ClusterWorker } from "./types.ts";

/** How a write to a worker that has just died fails: before its exit is seen, the channel still looks open. */
const GONE = new Set(["EPIPE", "ECONNRESET", "ERR_IPC_CHANNEL_CLOSED"]);

export function forkClusterWorker(): ClusterWorker {
  const worker = cluster.fork();
  let onError: (error: Error) => void = (e) => {
    throw e;
  };
  // Without a listener the failed write's 'error' event would end the primary (exit code 1).
  worker.on("error", (e: Error & { code?: string }) => {
    if (!GONE.has(e.code ?? "")) onError(e);
  });
  return {
    pid: worker.process.pid,
    send(message) {
      // The channel closes with the worker: a message to a worker that has gone is dropped.
      if (worker.isConnected()) worker.send(message as object);
    },
    onMessage: (handler) => void worker.on("message", handler),
    onExit: (handler) => void worker.once("exit", (code: number | null, signal: string | null) => handler(code, signal)),
    onError: (handler) => void (onError = handler),
    kill: (signal) => void worker.process.kill(signal),
  };
}

export function clusterPrimary(): ClusterPrimary | null {
  if (!cluster.isWorker) return null;
  return {
    canStartThreads: true,
    send(message) {
      if (process.connected) process.send?.(message as object);
    },
    onMessage: (handler) => void process.on("message", handler),
    onDisconnect: (handler) => void process.once("disconnect", handler),
  };
}

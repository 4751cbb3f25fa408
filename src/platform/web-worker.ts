/**
 * Worker threads through the web `Worker` API (Deno, Bun, browsers): the source becomes a module worker
 * from a blob URL, so no file path or bundler is involved.
 */
import type { WorkerPort } from "./types.ts";

interface WebWorker {
  postMessage(message: unknown): void;
  terminate(): void;
  unref?(): void;
  onmessage: ((e: { data: unknown }) => void) | null;
  onerror: ((e: unknown) => void) | null;
}
type WorkerCtor = new (url: string, options: { type: "module" }) => WebWorker;

export function startWebWorker(source: string): WorkerPort {
  const code = `const __post = (m) => self.postMessage(m);\n${source}\nself.onmessage = (e) => __onmessage(e.data);\n`;
  const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
  const Ctor = (globalThis as unknown as { Worker: WorkerCtor }).Worker;
  const w = new Ctor(url, { type: "module" });
  w.unref?.(); // Bun: a pool must not keep the process alive (Deno has no unref: workersKeepAlive)
  return {
    postMessage: (m) => w.postMessage(m),
    onMessage: (handler) => {
      w.onmessage = (e) => handler(e.data);
    },
    onError: (handler) => {
      w.onerror = handler;
    },
    terminate: () => {
      w.terminate();
      URL.revokeObjectURL(url);
    },
  };
}

/** SharedArrayBuffer exists and this thread may block in Atomics.wait (not a browser's main thread). */
export function webCanShareMemory(): boolean {
  const g = globalThis as { SharedArrayBuffer?: unknown; crossOriginIsolated?: boolean; document?: unknown };
  if (typeof g.SharedArrayBuffer !== "function") return false;
  return g.document === undefined; // a window's main thread may not Atomics.wait
}

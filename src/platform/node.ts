/**
 * Node's platform, built on `node:*` modules. Deno 2 and Bun implement the same modules, so deno.ts
 * and bun.ts start from `nodeCompatible()` and replace what they do differently or better.
 */
import { execFile, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import process from "node:process";
import { Worker } from "node:worker_threads";
import type { Server as HttpServer } from "node:http";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { guardConnections } from "./connection-guard.ts";
import { importOnNode } from "./node-import.ts";
import { clusterPrimary, forkClusterWorker } from "./node-cluster.ts";
import { limitReporters } from "./refusals.ts";
import {
  type ChildProcessPort,
  type ScriptResult,
  type FetchHandler,
  type FileReader,
  type Platform,
  type ServeOptions,
  type ServedApp,
  type SpawnOptions,
  type WorkerPort,
  portInUse,
  serveLimits,
} from "./types.ts";

/** A file handle read in ranges: into a fresh buffer the caller owns, or into the caller's memory. */
async function openForRanges(path: string): Promise<FileReader> {
  const handle = await fs.promises.open(path, "r");
  const size = (await handle.stat()).size;
  const readInto = async (offset: number, target: Uint8Array): Promise<number> => {
    const n = Math.max(0, Math.min(target.length, size - offset));
    let done = 0;
    while (done < n) {
      const { bytesRead } = await handle.read(target, done, n - done, offset + done);
      if (bytesRead === 0) throw new Error(`${path}: file ended at ${offset + done} bytes while reading ${n} from ${offset}`);
      done += bytesRead;
    }
    return n;
  };
  return {
    size,
    readInto,
    async read(offset, length) {
      const out = new Uint8Array(Math.max(0, Math.min(length, size - offset)));
      await readInto(offset, out);
      return out;
    },
    close: () => handle.close(),
  };
}

/** The parts every `node:*`-compatible runtime shares; `selfCommand` and `runScript` differ per runtime. */
export function nodeCompatible(): Omit<Platform, "runtime" | "description" | "selfCommand" | "runScript"> {
  return {
    env: (name) => process.env[name],
    args: () => process.argv.slice(2),
    cwd: () => process.cwd(),
    readTextFile: (path) => fs.readFileSync(path, "utf8"),
    importModule: async (url) => (await import(url)) as Record<string, unknown>,
    files: () => ({
      readFile: async (p) => new Uint8Array(await fs.promises.readFile(p)),
      open: openForRanges,
      exists: async (p) => {
        try {
          await fs.promises.stat(p);
          return true;
        } catch (e) {
          if ((e as { code?: string }).code === "ENOENT") return false;
          throw e;
        }
      },
      writeFile: (p, d) => fs.promises.writeFile(p, d),
      mkdir: async (p) => void (await fs.promises.mkdir(p, { recursive: true })),
      rename: (a, b) => fs.promises.rename(a, b),
      remove: (p) => fs.promises.rm(p, { recursive: true, force: true }),
    }),
    exit: (code) => process.exit(code),
    onSignal(signal, handler) {
      process.on(signal, handler);
      return () => void process.off(signal, handler);
    },
    dieBySignal(signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    },
    onParentExit(handler) {
      const parent = process.ppid;
      const timer = setInterval(() => {
        if (process.ppid === parent) return;
        clearInterval(timer);
        handler();
      }, 500);
      // Deno's timers are numbers, unref'd through Deno.unrefTimer.
      const deno = (globalThis as { Deno?: { unrefTimer(id: number): void } }).Deno;
      if (typeof timer === "number") deno?.unrefTimer(timer);
      else timer.unref();
      return () => clearInterval(timer);
    },
    unrefTimer: (timer) => void (timer as { unref?(): void }).unref?.(),
    scheduleNextTurn: (fn) => void setImmediate(fn),
    systemMemoryBytes(fallback) {
      try {
        const total = os.totalmem();
        if (total > 0) return total;
      } catch {
        // Not readable here (e.g. Deno without --allow-sys): the caller's fallback.
      }
      return fallback;
    },
    systemSnapshot,
    serveFetch: serveOnNodeHttp,
    // node:http's request timeout ends once the body is in: a held request is not cut.
    longestHoldSeconds: () => Number.POSITIVE_INFINITY,
    spawnChild,
    forkClusterWorker,
    clusterPrimary,
    lowerPriority: (pid, niceness) => os.setPriority(pid, Math.min(19, os.getPriority(pid) + niceness)),
    listenToStdin,
    cpuCount: () => Math.max(1, os.availableParallelism?.() ?? os.cpus().length),
    canShareMemory: () => typeof SharedArrayBuffer === "function",
    startWorker: startNodeWorker,
    workersKeepAlive: () => false,
    contextManager: () => new AsyncLocalStorageContextManager(),
  };
}

/** A worker_threads worker evaluating `source` (a CommonJS script: `require` is there for the port). */
function startNodeWorker(source: string): WorkerPort {
  const code = `const { parentPort: __port } = require("node:worker_threads");\nconst __post = (m) => __port.postMessage(m);\n${source}\n__port.on("message", (d) => __onmessage(d));\n`;
  const w = new Worker(code, { eval: true });
  w.unref();
  return {
    postMessage: (m) => w.postMessage(m),
    // a "message" listener refs the worker's port again: the worker is unref'd once its first message
    // (a pool worker's "ready") is in, or the process would never exit
    onMessage: (handler) =>
      void w.on("message", (m) => {
        w.unref();
        handler(m);
      }),
    onError: (handler) => void w.on("error", handler),
    terminate: () => void w.terminate(),
  };
}

/** `runScript` for a runtime whose command line evaluates a module given after `evalArgs`. */
export const runScriptWith =
  (evalArgs: readonly string[]) =>
  (source: string, timeoutSeconds: number): Promise<ScriptResult> =>
    new Promise((resolve) => {
      const child = execFile(
        process.execPath,
        [...evalArgs, source],
        { encoding: "utf8", timeout: timeoutSeconds * 1000, maxBuffer: 16 << 20 },
        (_err, stdout, stderr) => resolve({ code: child.exitCode, stdout, stderr }),
      );
    });

export const nodePlatform: Platform = {
  ...nodeCompatible(),
  importModule: importOnNode,
  runScript: runScriptWith(["--input-type=module", "-e"]),
  runtime: "node",
  description: `node ${process.version}`,
  selfCommand() {
    const self = thisProcess();
    return [self.execPath, ...self.execArgv, self.script, ...self.args];
  },
};

/** How this process was started, for running it again: the runtime, its flags, the entry script, the arguments. */
export function thisProcess(): { execPath: string; execArgv: string[]; script: string; args: string[] } {
  const script = process.argv[1];
  if (!script) throw new Error("Cannot tell this process's entry script (process.argv[1] is empty); give childCommand explicitly");
  return { execPath: process.execPath, execArgv: process.execArgv, script, args: process.argv.slice(2) };
}

/**
 * node:http through @hono/node-server, whose server has every knob (headers, whole-request and
 * keep-alive timeouts) and shows each connection (the limits of connection-guard.ts). Deno serves through here too: `Deno.serve` has none of them
 * and cannot close a connection whose body is still trickling in (docs/server.md).
 */
export async function serveOnNodeHttp(fetch: FetchHandler, at: ServeOptions): Promise<ServedApp> {
  const limits = serveLimits(at.limits);
  const { serve } = await import("@hono/node-server");
  const ms = (s: number) => Math.round(s * 1000);
  const requestTimeout = ms(limits.requestTimeoutSeconds);
  const headersTimeout = Math.min(ms(limits.headersTimeoutSeconds), requestTimeout);
  return new Promise((resolve, reject) => {
    const server = serve(
      {
        fetch,
        hostname: at.hostname,
        port: at.port,
        serverOptions: {
          headersTimeout,
          requestTimeout,
          keepAliveTimeout: ms(limits.keepAliveTimeoutSeconds),
          // How often expired requests are looked for (Node's default, 30 s, would let them run that much longer).
          connectionsCheckingInterval: Math.max(50, Math.min(1000, headersTimeout / 4)),
        },
      },
      (info) =>
        resolve({
          port: info.port,
          stop: (graceful = false) =>
            new Promise<void>((done, fail) => {
              // close() waits for every connection to end: close those waiting for a request's headers
              // (idle keep-alive, silent, slow; node:http no longer times them out once closing, and a
              // browser keeps a spare connection open for minutes), again as busy ones fall idle after
              // their answer, or all of them at once when not graceful.
              const closeWaiting = graceful ? setInterval(() => guard.closeWaiting(), 100) : undefined;
              server.close((e) => {
                clearInterval(closeWaiting);
                if (e) fail(e);
                else done();
              });
              if (graceful) guard.closeWaiting();
              else http.closeAllConnections?.();
            }),
        }),
    );
    const http = server as HttpServer;
    const guard = guardConnections(http, limits, limitReporters(at.log, limits.maxConnections, limits.maxConnectionsPerAddress));
    server.once("error", (e) => reject(portInUse(e, at)));
  });
}

/** node:child_process (Node, Deno 2 and Bun all implement it). Exit codes follow upstream: a death by signal N reads as -N. */
function spawnChild(command: readonly string[], options: SpawnOptions): ChildProcessPort {
  const child = spawn(command[0]!, command.slice(1), { env: { ...process.env, ...options.env }, stdio: ["pipe", "inherit", "inherit"] });
  // A child that exits before reading its stop line must not crash us with EPIPE.
  child.stdin?.on("error", () => {});
  let exited = false;
  const exit = (code: number) => {
    if (exited) return;
    exited = true;
    options.onExit(code);
  };
  child.once("exit", (code, signal) => exit(signal ? -((os.constants.signals as Record<string, number>)[signal] ?? 1) : (code ?? 0)));
  child.once("error", () => exit(127));
  return {
    pid: child.pid,
    endStdin(text) {
      const stdin = child.stdin;
      if (stdin && !stdin.destroyed) {
        stdin.write(text);
        stdin.end();
      }
    },
    kill: (signal) => void child.kill(signal),
  };
}

function listenToStdin(onData: (text: string) => void, onEnd: () => void): () => void {
  const stdin = process.stdin;
  const data = (chunk: Buffer | string) => onData(chunk.toString());
  stdin.on("data", data);
  stdin.on("end", onEnd);
  stdin.on("error", onEnd);
  return () => {
    stdin.off("data", data);
    stdin.off("end", onEnd);
    stdin.off("error", onEnd);
    stdin.pause();
    (stdin as unknown as { unref?: () => void }).unref?.();
    stdin.destroy();
  };
}

// --- The system snapshot: node:os, node:fs and /proc (Node, Deno and Bun all provide them). ---

const round2 = (x: number): number => Math.round(x * 100) / 100;
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

function safe<T>(f: () => T): T | null {
  try {
    return f();
  } catch {
    return null;
  }
}

function cpuTimes(): { idle: number; total: number } | null {
  return safe(() => {
    let idle = 0;
    let total = 0;
    for (const c of os.cpus()) {
      const t = c.times;
      idle += t.idle;
      total += t.user + t.nice + t.sys + t.idle + t.irq;
    }
    return { idle, total };
  });
}

// CPU usage is the busy share since the previous snapshot (or since this module loaded).
let lastCpu = cpuTimes();

function cpuUsagePct(): number | null {
  const now = cpuTimes();
  const prev = lastCpu;
  lastCpu = now;
  if (!now || !prev || now.total <= prev.total) return null;
  return round2((1 - (now.idle - prev.idle) / (now.total - prev.total)) * 100);
}

function netBytes(): { sent: number; recv: number } | null {
  return safe(() => {
    const lines = fs.readFileSync("/proc/net/dev", "utf8").split("\n").slice(2);
    let sent = 0;
    let recv = 0;
    for (const line of lines) {
      const [, rest] = line.split(":");
      if (!rest) continue;
      const f = rest.trim().split(/\s+/).map(Number);
      recv += f[0] ?? 0;
      sent += f[8] ?? 0;
    }
    return { sent, recv };
  });
}

function disk(): { used: number; total: number } | null {
  return safe(() => {
    const s = (fs as unknown as { statfsSync?: (p: string) => { blocks: number; bsize: number; bfree: number } }).statfsSync?.("/");
    if (!s) return null;
    const total = s.blocks * s.bsize;
    return { used: total - s.bfree * s.bsize, total };
  });
}

function systemSnapshot(): Record<string, unknown> {
  const cpus = safe(() => os.cpus()) ?? [];
  const memTotal = safe(() => os.totalmem());
  const memFree = safe(() => os.freemem());
  const memUsed = memTotal !== null && memFree !== null ? memTotal - memFree : null;
  const d = disk();
  const net = netBytes();
  return {
    timestamp: new Date().toISOString().slice(0, 19),
    host: safe(() => os.hostname()),
    os: safe(() => `${os.type()} ${os.release()}`),
    cpu_name: cpus[0]?.model ?? null,
    cpu_cores: safe(() => os.availableParallelism?.() ?? cpus.length) ?? null,
    cpu_threads: cpus.length || null,
    cpu_usage_pct: cpuUsagePct(),
    mem_used_gb: memUsed === null ? null : round2(memUsed / GiB),
    mem_total_gb: memTotal === null ? null : round2(memTotal / GiB),
    mem_pct: memUsed === null || !memTotal ? null : round2((memUsed / memTotal) * 100),
    disk_used_gb: d ? round2(d.used / GiB) : null,
    disk_total_gb: d ? round2(d.total / GiB) : null,
    disk_pct: d && d.total ? round2((d.used / d.total) * 100) : null,
    bytes_sent_mb: net ? round2(net.sent / MiB) : null,
    bytes_recv_mb: net ? round2(net.recv / MiB) : null,
  };
}

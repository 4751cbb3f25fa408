/**
 * The platform port: everything that differs between Node, Deno, Bun and browsers, behind one
 * interface. src/platform/index.ts detects the runtime once and picks its implementation (node.ts,
 * deno.ts, bun.ts, browser.ts); the rest of src/ calls that and never tests for a runtime itself
 * (test/architecture/layers.test.ts keeps it so; docs/architecture.md names the exceptions).
 */

import type { ContextManager } from "@opentelemetry/api";

export type RuntimeName = "node" | "deno" | "bun" | "browser";

/** A fetch handler, as Hono's `app.fetch`. */
export type FetchHandler = (req: Request) => Response | Promise<Response>;

export interface ServedApp {
  /** The port really bound (useful with port 0). */
  port: number;
  /**
   * Stops listening. `graceful`: requests in flight are answered first (callers abort their long
   * polls before); otherwise every connection is closed at once.
   */
  stop(graceful?: boolean): Promise<void>;
}

/** Limits of one server; see "Limits and defaults" in docs/departures.md. */
export interface ServeLimits {
  /** Longest wait for a request's headers (capped by `requestTimeoutSeconds`). */
  headersTimeoutSeconds: number;
  /** Longest wait for a whole request, headers and body; handling it afterwards is not bounded (Bun: see `longestHoldSeconds`). */
  requestTimeoutSeconds: number;
  /** How long an idle keep-alive connection stays open (Bun: `requestTimeoutSeconds` instead). */
  keepAliveTimeoutSeconds: number;
  /**
   * Open connections at most (Bun: requests in flight). At the cap, the connection that has waited
   * longest for a request's headers (a slow client, or an idle keep-alive one) is closed to make room
   * for a new one; only when none is waiting is the new one closed at once.
   */
  maxConnections: number;
  /**
   * Open connections from one client address at most (Bun: requests in flight); beyond it a new one
   * is closed at once. 0: no such limit (behind a reverse proxy every client has the proxy's address).
   * Default: a quarter of `maxConnections`.
   */
  maxConnectionsPerAddress: number;
}

/** The per-address limit when none is given: a quarter of the cap, so one address cannot fill it. */
export const defaultPerAddressLimit = (maxConnections: number): number => Math.max(1, Math.floor(maxConnections / 4));

export const DEFAULT_SERVE_LIMITS: Readonly<ServeLimits> = Object.freeze({
  headersTimeoutSeconds: 10,
  requestTimeoutSeconds: 60,
  keepAliveTimeoutSeconds: 5,
  maxConnections: 512,
  maxConnectionsPerAddress: defaultPerAddressLimit(512),
});

/** `limits` completed with the defaults; the per-address limit follows a given cap unless given too. */
export function serveLimits(limits: Partial<ServeLimits> = {}): ServeLimits {
  const maxConnections = limits.maxConnections ?? DEFAULT_SERVE_LIMITS.maxConnections;
  return {
    ...DEFAULT_SERVE_LIMITS,
    ...limits,
    maxConnections,
    maxConnectionsPerAddress: limits.maxConnectionsPerAddress ?? defaultPerAddressLimit(maxConnections),
  };
}

export interface ServeOptions {
  hostname: string;
  port: number;
  limits?: Partial<ServeLimits>;
  /** Told (at most once a minute for each limit) when connections are refused or closed at the limits. */
  log?: { warning(message: string): void };
  /** How the user chooses this port (`--port or AGL_SERVER_PORT`), named by the error when it is in use. */
  portSetting?: string;
}

/** The port a server was to listen on is held by another process: one line that says how to choose another. */
export class PortInUseError extends Error {
  constructor(
    readonly hostname: string,
    readonly port: number,
    readonly portSetting = "another port",
  ) {
    super(`port ${port} on ${hostname} is already in use: stop what holds it, or choose another with ${portSetting} (0 picks a free one)`);
    this.name = new.target.name;
  }
}

/** `e` if it is not a refusal to bind a port in use; else that refusal as a PortInUseError. */
export function portInUse(e: unknown, at: ServeOptions): unknown {
  return (e as { code?: unknown } | null)?.code === "EADDRINUSE" ? new PortInUseError(at.hostname, at.port, at.portSetting) : e;
}

/** How a `Platform.runScript` child ended: its exit code (null when killed), what it printed. */
export interface ScriptResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A child process started by `Platform.spawnChild`. */
export interface ChildProcessPort {
  readonly pid: number | undefined;
  /** Writes `text` to the child's stdin and closes it (nothing if stdin is already closed). */
  endStdin(text: string): void;
  kill(signal: "SIGINT" | "SIGTERM" | "SIGKILL"): void;
}

export interface SpawnOptions {
  /** Added to the child's environment (over this process's). */
  env: Record<string, string>;
  /** Called once with the exit code when the child ends (-N for a death by signal N, 127 if it could not start). */
  onExit(code: number): void;
}

/**
 * The primary's handle on one worker process of a server cluster (`agl store --workers N`): the same
 * command line run again, whose listening sockets share the primary's workers' port.
 */
export interface ClusterWorker {
  readonly pid: number | undefined;
  /** Sends a JSON-serialisable message; dropped once the worker has gone. */
  send(message: unknown): void;
  onMessage(handler: (message: unknown) => void): void;
  /** Called once when the worker has ended: its exit code, or the signal that ended it. */
  onExit(handler: (code: number | null, signal: string | null) => void): void;
  /** Errors of the channel other than a message sent to a worker that has just gone (that one is dropped). */
  onError(handler: (error: Error) => void): void;
  kill(signal: "SIGTERM" | "SIGKILL"): void;
}

/** A cluster worker's channel to the primary that started it. */
export interface ClusterPrimary {
  /** Whether this worker process can start worker threads (Deno sets each of them up as a cluster worker, which fails). */
  readonly canStartThreads: boolean;
  /** Sends a JSON-serialisable message; dropped once the primary has gone. */
  send(message: unknown): void;
  onMessage(handler: (message: unknown) => void): void;
  /** Called once when the channel has closed (the primary ended). */
  onDisconnect(handler: () => void): void;
}

/** Whole-file operations (model checkpoints). */
/** An open file read in ranges (large model files are read one tensor at a time). */
export interface FileReader {
  readonly size: number;
  /** `length` bytes from `offset` (fewer only at the end of the file). */
  read(offset: number, length: number): Promise<Uint8Array>;
  /**
   * Fills `target` with the bytes from `offset`, straight into the caller's memory (a view into a
   * larger buffer is fine); resolves to the count read, less than `target.length` only at the end of
   * the file.
   */
  readInto(offset: number, target: Uint8Array): Promise<number>;
  close(): Promise<void>;
}

export interface FileAccess {
  readFile(path: string): Promise<Uint8Array>;
  /** Opens a file for ranged reads. */
  open(path: string): Promise<FileReader>;
  /** True when `path` names an existing file or directory. */
  exists(path: string): Promise<boolean>;
  writeFile(path: string, data: Uint8Array): Promise<void>;
  /** Creates a directory and its parents (no error if it exists). */
  mkdir(path: string): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  /** Deletes a file or a directory with everything in it (no error if it is absent). */
  remove(path: string): Promise<void>;
}

/**
 * A worker thread started by `Platform.startWorker`. Its source is a classic script body that defines
 * `function __onmessage(data)` and may call `__post(message)`; each runtime wraps it with its own port.
 */
export interface WorkerPort {
  postMessage(message: unknown): void;
  onMessage(handler: (message: unknown) => void): void;
  onError(handler: (error: unknown) => void): void;
  terminate(): void;
}

export interface Platform {
  readonly runtime: RuntimeName;
  /** "node v20.1.0", "deno 2.1.0", "bun 1.2.0" or "browser", for startup messages. */
  readonly description: string;

  /** An environment variable (undefined when unset or unreadable, e.g. in a browser). */
  env(name: string): string | undefined;
  /** The arguments given to this script (after the runtime and the script's path). */
  args(): string[];
  cwd(): string;
  /** Reads a UTF-8 text file (configuration such as a token file). */
  readTextFile(path: string): string;
  /** Whole-file operations, asynchronous. */
  files(): FileAccess;
  /**
   * Imports a user's module (an agent) by file URL, a TypeScript one included: Deno and Bun run it as it
   * is, Node through tsx where it cannot itself (else the error says how).
   */
  importModule(url: string): Promise<Record<string, unknown>>;
  /** Ends the process at once. */
  exit(code: number): never;
  /** Calls `handler` on each `signal`; returns a remover. A no-op where there are no signals. */
  onSignal(signal: "SIGINT" | "SIGTERM", handler: () => void): () => void;
  /** Ends the process as `signal` does by default: every handler of it removed, then sent to this process. */
  dieBySignal(signal: "SIGINT" | "SIGTERM"): void;
  /**
   * Calls `handler` once when the process that started this one has ended (this one was adopted by
   * another); returns a remover. Looked at twice a second, without keeping the process alive.
   * A no-op where there are no processes.
   */
  onParentExit(handler: () => void): () => void;

  /** Lets the process exit while `timer` is pending. */
  unrefTimer(timer: ReturnType<typeof setTimeout>): void;
  /** Runs `fn` on the next turn of the event loop (a macrotask: after pending microtasks and due I/O). */
  scheduleNextTurn(fn: () => void): void;
  /** Total system memory in bytes, or `fallback` when the runtime cannot tell. */
  systemMemoryBytes(fallback: number): number;
  /** Host, OS, CPU, memory, disk and network telemetry; a field that cannot be read is null. */
  systemSnapshot(): Record<string, unknown>;

  /** Serves a fetch handler with this runtime's best server and its limits. */
  serveFetch(fetch: FetchHandler, options: ServeOptions): Promise<ServedApp>;
  /** The longest a handler may hold a request (a long poll) before this runtime's server cuts it. */
  longestHoldSeconds(limits?: Partial<ServeLimits>): number;

  /**
   * Starts a worker of a server cluster: this process's command line run again, a server it starts
   * sharing the port of the cluster's other workers (node:cluster; Bun sets `reusePort` for its workers).
   */
  forkClusterWorker(): ClusterWorker;
  /** In a process started by `forkClusterWorker`: its channel to the primary; elsewhere null. */
  clusterPrimary(): ClusterPrimary | null;

  /** The command line that runs this process's entry script again, on this runtime. */
  selfCommand(): string[];
  spawnChild(command: readonly string[], options: SpawnOptions): ChildProcessPort;
  /**
   * Runs `source` (an ES module: imports by absolute URL, top-level await) in a fresh process of this
   * runtime and gives back what it printed; killed after `timeoutSeconds`. For asking a native library
   * something whose own messages must not reach this process's output.
   */
  runScript(source: string, timeoutSeconds: number): Promise<ScriptResult>;
  /** Raises the nice value of process `pid` by `niceness` (capped at 19); throws where it cannot. */
  lowerPriority(pid: number, niceness: number): void;
  /** Listens to this process's stdin; the remover also releases stdin so the process can exit. */
  listenToStdin(onData: (text: string) => void, onEnd: () => void): () => void;

  /** Logical CPUs this process may use (at least 1). */
  cpuCount(): number;
  /** Whether threads can share memory here (SharedArrayBuffer and Atomics.wait on this thread). */
  canShareMemory(): boolean;
  /** Starts a worker thread running `source` (see {@link WorkerPort}); it does not keep the process alive,
   * except where `workersKeepAlive()`. */
  startWorker(source: string): WorkerPort;
  /** Whether a started worker keeps the process alive until terminated (Deno: its Worker has no unref),
   * so that code which may never close its workers should start none by default. */
  workersKeepAlive(): boolean;
  /**
   * The OpenTelemetry context manager that carries the active rollout and tracer: AsyncLocalStorage where
   * the runtime has it (across `await`, timers, callbacks), a synchronous stack in browsers (stack-context.ts).
   */
  contextManager(): ContextManager;
}

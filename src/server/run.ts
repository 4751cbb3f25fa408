/**
 * Starting and stopping the store server, the same on every runtime. Serving itself, with each
 * runtime's timeouts and connection cap, is the platform's (src/platform/); so is the `ServerHost` a
 * runtime entry (runtimes/*.ts) passes by default: how to hear SIGINT/SIGTERM, the environment, the
 * working directory. Tests pass their own.
 */
import type { LightningStore } from "../store/base.ts";
import { LightningStoreCore } from "../store/core.ts";
import { InMemoryLightningStore } from "../store/memory.ts";
import { longestHoldSeconds, platform, serveFetch, type ServedApp } from "../platform/index.ts";
import { MAX_WAIT_SECONDS, createStoreApp } from "./app.ts";
import type { StoreServerConfig } from "./config.ts";
import { isLoopbackAddress } from "./browser-guard.ts";
import { consoleLogger, type LogWriter } from "../platform/log.ts";
import type { IdempotencyBackend } from "./idempotency.ts";
import type { MetricsPeers } from "./metrics.ts";
import { normaliseDb, openServerStore } from "./open-store.ts";
import { createTestStore, emptyDatabase } from "./test-hooks.ts";
import { ManualClock } from "../types/index.ts";

export interface ServerHost {
  /** "node", "deno" or "bun", for the startup message. */
  runtime: string;
  /** Calls `handler` on SIGINT and SIGTERM. */
  onShutdownSignal(handler: (signal: string) => void): void;
  cwd(): string;
  env(name: string): string | undefined;
  /** Ends the process at once (a second Ctrl-C). */
  exit(code: number): never;
}

/** This process's host, from the platform. */
export function platformHost(): ServerHost {
  return {
    runtime: platform.description,
    onShutdownSignal(handler) {
      for (const s of ["SIGINT", "SIGTERM"] as const) platform.onSignal(s, () => handler(s));
      // npm (npx, npm exec, npm run) starts a command through a shell and passes SIGTERM to that shell
      // only, which dies without passing it on: the command would live on, holding its port. So, under
      // npm, the end of that parent reads as the SIGTERM it stands for.
      if (platform.env("npm_command") !== undefined) platform.onParentExit(() => handler("SIGTERM"));
    },
    cwd: () => platform.cwd(),
    env: (name) => platform.env(name),
    exit: (code) => platform.exit(code),
  };
}

export interface RunningStoreServer {
  url: string;
  store: LightningStore;
  /** Resolves when the server has stopped (after a signal or `shutdown()`). */
  stopped: Promise<void>;
  shutdown(): Promise<void>;
}

const urlHost = (h: string): string => (h.includes(":") && !h.startsWith("[") ? `[${h}]` : h);

/** Where a server on `host`:`port` is reached. */
export const serverUrl = (host: string, port: number): string => `http://${urlHost(host)}:${port}`;

/** How a worker of `agl store --workers N` serves (server/cluster/): what the primary does for all of them. */
export interface ClusterWorkerRole {
  /** Named in the `agl-worker` header of its answers: `<slot> (pid <pid>)`. */
  name: string;
  /** Whether the store may start a thread for its WAL checkpoints (not where worker processes cannot start threads). */
  threads: boolean;
  /** The primary keeps the answers of idempotent writes, so a retry to another worker gets the first. */
  idempotency: IdempotencyBackend;
  /** The other workers, whose metrics each scrape of this one adds up. */
  metricsPeers: MetricsPeers;
  /** Called once the store is open: passes its changes to the other workers and theirs to it. */
  attach(store: LightningStoreCore): void;
}

export async function startStoreServer(
  config: StoreServerConfig,
  host: ServerHost,
  log: LogWriter = consoleLogger(config.logLevel),
  worker?: ClusterWorkerRole,
): Promise<RunningStoreServer> {
  let store: LightningStore;
  let location: string;
  let testHooks: ReturnType<typeof createTestStore>["hooks"] | undefined;
  // A worker's store runs no watchdog timer: the primary runs the cluster's one.
  const storeOptions = {
    cwd: host.cwd(),
    authToken: host.env("AGL_STORE_DB_TOKEN"),
    ...(worker ? { watchdogIntervalSeconds: null, backgroundCheckpoints: worker.threads } : {}),
  };
  if (config.testClock && worker) {
    // TEST-ONLY: the workers share the file; a reset empties it rather than replacing one process's store.
    const clock = new ManualClock();
    const shared = await openServerStore(config.db, { ...storeOptions, clock, scanDebounceSeconds: 0 });
    const t = createTestStore(() => shared.store, { clock, reset: () => emptyDatabase(normaliseDb(config.db), storeOptions.authToken) });
    ({ store, hooks: testHooks } = t);
    location = `${shared.location} (TEST CLOCK MODE: test-only hooks enabled)`;
    if (shared.store instanceof LightningStoreCore) worker.attach(shared.store);
  } else if (config.testClock) {
    // TEST-ONLY: an in-memory store on a settable clock, replaced on demand (see test-hooks.ts).
    const t = createTestStore((clock) => new InMemoryLightningStore({ clock, scanDebounceSeconds: 0 }));
    store = t.store;
    testHooks = t.hooks;
    location = "in memory (TEST CLOCK MODE: test-only hooks enabled)";
    log.warning("--test-clock: test-only hooks are enabled; never use this outside tests");
  } else {
    ({ store, location } = await openServerStore(config.db, storeOptions));
    if (worker && store instanceof LightningStoreCore) worker.attach(store);
  }
  const shutdownController = new AbortController();
  const app = createStoreApp(store, {
    token: config.token,
    corsOrigins: config.corsOrigins,
    bindAddress: config.host,
    allowedHosts: config.allowedHosts,
    bodyLimitBytes: config.bodyLimitBytes,
    idempotency: config.idempotency,
    idempotencyBackend: worker?.idempotency,
    // Where the runtime's server would cut a held long poll, it is answered before (the client asks again).
    maxWaitSeconds: Math.min(MAX_WAIT_SECONDS, longestHoldSeconds(config.limits)),
    defaultPageSize: config.pageSize,
    maxPageSize: config.maxPageSize,
    maxPageChars: config.maxPageChars,
    shutdownSignal: shutdownController.signal,
    dashboard: config.dashboard,
    log,
    testHooks,
    workerName: worker?.name,
    metricsPeers: worker?.metricsPeers,
  });
  let served: ServedApp;
  try {
    served = await serveFetch(app.fetch, {
      hostname: config.host,
      port: config.port,
      limits: config.limits,
      log,
      portSetting: "--port or AGL_SERVER_PORT",
    });
  } catch (e) {
    await store.close();
    throw e;
  }
  const url = serverUrl(config.host, served.port);
  // A cluster's primary announces it once for all its workers.
  if (!worker) announceStoreServer(config, host.runtime, url, location, log);

  let resolveStopped!: () => void;
  const stopped = new Promise<void>((r) => (resolveStopped = r));
  let stopping: Promise<void> | null = null;
  const shutdown = (): Promise<void> => {
    stopping ??= (async () => {
      log.info("shutting down: finishing in-flight requests");
      shutdownController.abort(new Error("the server is shutting down"));
      try {
        await served.stop(true);
      } finally {
        await store.close();
        log.info("stopped; database closed");
        resolveStopped();
      }
    })();
    return stopping;
  };
  host.onShutdownSignal((signal) => {
    if (stopping) {
      log.warning(`${signal} again: exiting now`);
      host.exit(130);
    }
    log.info(`${signal} received`);
    shutdown().catch((e: unknown) => {
      log.error(`shutdown failed: ${e instanceof Error ? e.message : String(e)}`);
      host.exit(1);
    });
  });
  return { url, store, stopped, shutdown };
}

/** The startup lines, always printed whatever the log level: where it listens and where the data lives; then warnings. */
export function announceStoreServer(config: StoreServerConfig, runtime: string, url: string, location: string, log: LogWriter): void {
  console.log(
    `[agl store] Lightning store (${runtime}) listening on ${url}  (${config.dashboard ? `dashboard ${url}/, ` : ""}API ${url}/v1/agl, OTLP ${url}/v1/traces, metrics ${url}/metrics)`,
  );
  console.log(`[agl store] Data: ${location}${config.token ? `; bearer token required (from ${config.tokenSource ?? "options"})` : ""}`);
  if (config.token === null && !isLoopbackAddress(config.host))
    log.warning(
      `listening on ${config.host} without a token: anyone who can reach this address can read and write the store, and the Host check against DNS rebinding is off unless --allowed-host is given; set a token (--token-file) (docs/server.md)`,
    );
  if (config.tokenSource === "--token")
    log.warning("--token shows the token to every user of this machine (ps); prefer --token-file or AGL_STORE_TOKEN");
}

/**
 * Starting and stopping the store server, the same on every runtime. A runtime entry (runtimes/*.ts)
 * supplies a `ServerHost`: how to serve a fetch handler and how to hear SIGINT/SIGTERM.
 */
import type { LightningStore } from "../store/base.ts";
import { InMemoryLightningStore } from "../store/memory.ts";
import { createStoreApp } from "./app.ts";
import type { StoreServerConfig } from "./config.ts";
import { consoleLogger, type Logger } from "./log.ts";
import { openServerStore } from "./open-store.ts";
import { createTestStore } from "./test-hooks.ts";

export interface ServedHandle {
  /** The port really bound (useful with port 0). */
  port: number;
  /** Stops accepting connections and resolves once in-flight requests are answered. */
  stop(): Promise<void>;
}

export interface ServerHost {
  /** "node", "deno" or "bun", for the startup message. */
  runtime: string;
  serve(fetch: (req: Request) => Response | Promise<Response>, at: { hostname: string; port: number }): Promise<ServedHandle>;
  /** Calls `handler` on SIGINT and SIGTERM. */
  onShutdownSignal(handler: (signal: string) => void): void;
  cwd(): string;
  env(name: string): string | undefined;
  /** Ends the process at once (a second Ctrl-C). */
  exit(code: number): never;
}

export interface RunningStoreServer {
  url: string;
  store: LightningStore;
  /** Resolves when the server has stopped (after a signal or `shutdown()`). */
  stopped: Promise<void>;
  shutdown(): Promise<void>;
}

const urlHost = (h: string): string => (h.includes(":") && !h.startsWith("[") ? `[${h}]` : h);

export async function startStoreServer(config: StoreServerConfig, host: ServerHost, log: Logger = consoleLogger(config.logLevel)): Promise<RunningStoreServer> {
  let store: LightningStore;
  let location: string;
  let testHooks;
  if (config.testClock) {
    // TEST-ONLY: an in-memory store on a settable clock, replaced on demand (see test-hooks.ts).
    const t = createTestStore((clock) => new InMemoryLightningStore({ clock, scanDebounceSeconds: 0 }));
    store = t.store;
    testHooks = t.hooks;
    location = "in memory (TEST CLOCK MODE: test-only hooks enabled)";
    log.warning("--test-clock: test-only hooks are enabled; never use this outside tests");
  } else {
    ({ store, location } = await openServerStore(config.db, { cwd: host.cwd(), authToken: host.env("AGL_STORE_DB_TOKEN") }));
  }
  const shutdownController = new AbortController();
  const app = createStoreApp(store, {
    token: config.token,
    corsOrigins: config.corsOrigins,
    bodyLimitBytes: config.bodyLimitBytes,
    defaultPageSize: config.pageSize ?? undefined,
    maxPageSize: config.maxPageSize ?? undefined,
    shutdownSignal: shutdownController.signal,
    log,
    testHooks,
  });
  let served: ServedHandle;
  try {
    served = await host.serve(app.fetch, { hostname: config.host, port: config.port });
  } catch (e) {
    await store.close();
    throw e;
  }
  const url = `http://${urlHost(config.host)}:${served.port}`;
  // Always printed, whatever the log level: where it listens and where the data lives.
  console.log(`[agl store] Lightning store (${host.runtime}) listening on ${url}  (API ${url}/v1/agl, OTLP ${url}/v1/traces, metrics ${url}/metrics)`);
  console.log(`[agl store] Data: ${location}${config.token ? "; bearer token required" : ""}`);

  let resolveStopped!: () => void;
  const stopped = new Promise<void>((r) => (resolveStopped = r));
  let stopping: Promise<void> | null = null;
  const shutdown = (): Promise<void> => {
    stopping ??= (async () => {
      log.info("shutting down: finishing in-flight requests");
      shutdownController.abort(new Error("the server is shutting down"));
      try {
        await served.stop();
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

/**
 * `agl store` as one process or as a cluster (`--workers N`, docs/server.md#several-worker-processes):
 * the same command line starts the primary and, run again by it, each worker.
 */
import { platform } from "../../platform/index.ts";
import { consoleLogger } from "../../platform/log.ts";
import type { StoreServerConfig } from "../config.ts";
import { type ServerHost, startStoreServer } from "../run.ts";
import { startStoreCluster } from "./primary.ts";
import { serveAsWorker } from "./worker.ts";

export type { RunningStoreCluster } from "./primary.ts";

/** Serves as this process's part: a worker of the primary that started it, the primary of `--workers N`, or alone. */
export async function startStoreProcesses(config: StoreServerConfig, host: ServerHost): Promise<{ stopped: Promise<void> }> {
  const log = consoleLogger(config.logLevel);
  const primary = platform.clusterPrimary();
  if (primary !== null) return serveAsWorker(config, host, primary, log);
  if (config.workers > 1) return startStoreCluster(config, host, log);
  return startStoreServer(config, host, log);
}

/** What the route modules of the store app share; `createStoreApp` (app.ts) builds it once per app. */
import type { MiddlewareHandler } from "hono";
import type { LogWriter } from "../../platform/log.ts";
import type { LightningStore } from "../../store/base.ts";
import type { ServerMetrics } from "../metrics.ts";
import type { PageSizes } from "../paging.ts";

export interface RouteDeps {
  /** The store the routes call: timed by `metrics` (when on), with coalescing in front of that. */
  store: LightningStore;
  /** The Prometheus registry, or null when the app runs without metrics. */
  metrics: ServerMetrics | null;
  /** Page sizes of the list routes (paging.ts). */
  sizes: PageSizes;
  /** `Idempotency-Key` handling (idempotency.ts), taken by every write route; a pass-through when turned off. */
  idempotent: MiddlewareHandler;
  log: LogWriter;
  /** Cap of one long poll in seconds. */
  maxWaitSeconds: number;
  /** Aborted when the server shuts down: held long polls answer at once. */
  shutdownSignal?: AbortSignal;
}

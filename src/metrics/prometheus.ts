/**
 * `PrometheusMetricsBackend`: upstream's Prometheus backend. Like prometheus_client's default registry,
 * every instance writes to one registry per process (`processMetrics`), which the store server serves at
 * `/v1/agl/prometheus` and a `LightningStoreClient` sends to the server it talks to.
 */
import { MultiMetricsBackend } from "./backend.ts";
import { type MetricsRegistry, processMetrics } from "./registry.ts";

export class PrometheusMetricsBackend extends MultiMetricsBackend {
  constructor(readonly registry: MetricsRegistry = processMetrics) {
    super([registry]);
  }
}

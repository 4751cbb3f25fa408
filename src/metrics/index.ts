/** `lightning-ts/metrics`: the metrics API (docs/metrics.md): backends, the registry and its Prometheus text, pushes. */
export { type MetricLabels, type MetricOptions, type MetricsBackend, MultiMetricsBackend } from "./backend.ts";
export { ConsoleMetricsBackend, type ConsoleMetricsOptions } from "./console.ts";
export { PrometheusMetricsBackend } from "./prometheus.ts";
export { MetricsPusher, type MetricsPusherOptions } from "./push.ts";
export { MetricsPush, PushedMetric } from "./push-schema.ts";
export {
  Counter,
  DEFAULT_BUCKETS,
  Gauge,
  Histogram,
  LATENCY_BUCKETS,
  type MetricDefinition,
  MetricsRegistry,
  type MetricsRegistryOptions,
  type MetricType,
  processMetrics,
  type SeriesValue,
} from "./registry.ts";

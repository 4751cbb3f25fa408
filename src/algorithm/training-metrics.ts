/**
 * `TrainingMetrics`: the metrics API for an algorithm (docs/metrics.md#algorithms-the-training-page). What
 * it writes goes to the Prometheus exposition (through `PrometheusMetricsBackend` by default) and, at each
 * `flush()`, becomes one point of the dashboard's Training page: a `metrics` span under the run's
 * bookkeeping rollout, with one numeric attribute per series.
 */
import type { MetricsBackend } from "../metrics/backend.ts";
import { MultiMetricsBackend } from "../metrics/backend.ts";
import { PrometheusMetricsBackend } from "../metrics/prometheus.ts";
import { MetricsRegistry } from "../metrics/registry.ts";
import type { LightningStore } from "../store/base.ts";
import { ValidationError } from "../types/index.ts";
import { BookkeepingRollout } from "./bookkeeping.ts";

/** The name of the spans that hold the points (one of the Training page's default span names). */
export const TRAINING_METRICS_SPAN = "metrics";

export interface TrainingMetricsOptions {
  /** The bookkeeping rollout's `metadata.kind`; it ends in `-metrics`, as the Training page looks for. Default `algorithm-metrics`. */
  kind?: string;
  /** The rollout's input: what describes the run. */
  input?: unknown;
  /** Where the writes go besides the points. Default: `new PrometheusMetricsBackend()` (this process's registry). */
  backend?: MetricsBackend;
}

/** `name{k=v,...}` (just `name` without labels): one series' attribute on a point. */
const seriesKey = (name: string, labels: Readonly<Record<string, string>>): string => {
  const entries = Object.entries(labels);
  return entries.length ? `${name}{${entries.map(([k, v]) => `${k}=${v}`).join(",")}}` : name;
};

export class TrainingMetrics extends MultiMetricsBackend {
  private constructor(
    private readonly run: BookkeepingRollout,
    /** The values written through this object, read at each point. */
    private readonly values: MetricsRegistry,
    backend: MetricsBackend,
  ) {
    // The backend first: a write it refuses is not kept for the points either.
    super([backend, values]);
  }

  /** Starts the run's bookkeeping rollout in `store` (status `running`). */
  static async start(store: LightningStore, options: TrainingMetricsOptions = {}): Promise<TrainingMetrics> {
    const kind = options.kind ?? "algorithm-metrics";
    if (typeof kind !== "string" || !kind.endsWith("-metrics"))
      throw new ValidationError(`kind must end in "-metrics" (the Training page lists those runs), got ${JSON.stringify(kind)}`, ["kind"]);
    // its points are its own metrics' values, already in the backend
    const run = await BookkeepingRollout.start(store, options.input ?? null, kind, { gauges: null });
    return new TrainingMetrics(run, new MetricsRegistry(), options.backend ?? new PrometheusMetricsBackend());
  }

  /** The bookkeeping rollout the points are spans of. */
  get rolloutId(): string {
    return this.run.rolloutId;
  }

  /**
   * Writes one point when something was written since the last one: every counter's total and gauge's
   * value, and for each histogram observed since, `<name>.mean` and `<name>.count` of those observations.
   * A gauge named `step` (or `*.step`) that grows from point to point becomes the charts' x axis.
   */
  async flush(): Promise<void> {
    const changed = this.values.takePending();
    if (changed === null) return;
    const attributes: Record<string, number> = {};
    for (const def of this.values.definitions())
      if (def.type !== "histogram") for (const s of this.values.read(def.name)) attributes[seriesKey(def.name, s.labels)] = s.value;
    for (const m of changed.metrics) {
      if (m.type !== "histogram") continue;
      for (const s of m.samples) {
        const count = s.bucket_counts.reduce((a, b) => a + b, 0);
        attributes[seriesKey(`${m.name}.mean`, s.labels)] = s.sum / count;
        attributes[seriesKey(`${m.name}.count`, s.labels)] = count;
      }
    }
    await this.run.record(TRAINING_METRICS_SPAN, attributes);
  }

  /** The last point, then the run's rollout ends (`succeeded` unless told otherwise). */
  async close(status: "succeeded" | "failed" = "succeeded"): Promise<void> {
    await this.flush();
    await this.run.finish(status);
  }
}

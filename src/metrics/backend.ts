/**
 * The metrics API agents and algorithms write to: Agent Lightning's `MetricsBackend` (register a metric
 * once, then increment, set or observe it by name with its labels), camelCase, with gauges besides its
 * counters and histograms. `PrometheusMetricsBackend` writes to this process's registry, which the store
 * server exposes; `MultiMetricsBackend` fans out to several backends. Writes are synchronous: there is
 * nothing to wait for (awaiting them, as upstream's async methods are, works too).
 */
export type MetricLabels = Readonly<Record<string, string>>;

export interface MetricOptions {
  /** The family's HELP text; default "<Type> <name>" as upstream writes it. */
  help?: string;
  /** For the console backend: how many leading labels its lines group by (upstream's `group_level`). */
  groupLevel?: number;
}

export interface MetricsBackend {
  /** True when what is written here reaches a Prometheus exposition. */
  hasPrometheus(): boolean;
  /** Registers a counter (again with the same labels: nothing happens; with others: an error). */
  registerCounter(name: string, labelNames?: readonly string[], options?: MetricOptions): void;
  registerGauge(name: string, labelNames?: readonly string[], options?: MetricOptions): void;
  /** `buckets`: increasing upper bounds (+Inf is implied); default prometheus_client's. */
  registerHistogram(name: string, labelNames?: readonly string[], buckets?: readonly number[] | null, options?: MetricOptions): void;
  /** Adds `amount` (>= 0, default 1) to a registered counter; `labels` are exactly its label names. */
  incCounter(name: string, amount?: number, labels?: MetricLabels): void;
  setGauge(name: string, value: number, labels?: MetricLabels): void;
  observeHistogram(name: string, value: number, labels?: MetricLabels): void;
}

/** Forwards every call to each backend in turn. */
export class MultiMetricsBackend implements MetricsBackend {
  protected readonly backends: readonly MetricsBackend[];
  constructor(backends: readonly MetricsBackend[]) {
    if (backends.length === 0) throw new TypeError("MultiMetricsBackend needs at least one backend");
    this.backends = [...backends];
  }
  hasPrometheus(): boolean {
    return this.backends.some((b) => b.hasPrometheus());
  }
  registerCounter(name: string, labelNames?: readonly string[], options?: MetricOptions): void {
    for (const b of this.backends) b.registerCounter(name, labelNames, options);
  }
  registerGauge(name: string, labelNames?: readonly string[], options?: MetricOptions): void {
    for (const b of this.backends) b.registerGauge(name, labelNames, options);
  }
  registerHistogram(name: string, labelNames?: readonly string[], buckets?: readonly number[] | null, options?: MetricOptions): void {
    for (const b of this.backends) b.registerHistogram(name, labelNames, buckets, options);
  }
  incCounter(name: string, amount?: number, labels?: MetricLabels): void {
    for (const b of this.backends) b.incCounter(name, amount, labels);
  }
  setGauge(name: string, value: number, labels?: MetricLabels): void {
    for (const b of this.backends) b.setGauge(name, value, labels);
  }
  observeHistogram(name: string, value: number, labels?: MetricLabels): void {
    for (const b of this.backends) b.observeHistogram(name, value, labels);
  }
}

/**
 * `ConsoleMetricsBackend`: upstream's console backend. It keeps each metric's recent events (a sliding
 * window) and, at most once per log interval, when a write comes, logs one line with every metric: a
 * counter's rate per second, a histogram's P50, P95 and P99 (as durations), a gauge's latest value.
 * Series are grouped by their first `groupLevel` labels (none: one line entry per metric).
 */
import { getLogger, type LogWriter } from "../platform/log.ts";
import type { MetricLabels, MetricOptions, MetricsBackend } from "./backend.ts";
import { MetricsRegistry, labelValues, type MetricDefinition } from "./registry.ts";

export interface ConsoleMetricsOptions {
  /** Seconds of events the rates and percentiles are computed over; null: every event so far. Default 60. */
  windowSeconds?: number | null;
  /** Least seconds between two log lines. Default 10. */
  logIntervalSeconds?: number;
  /** Labels kept when grouping, for every metric (a metric's own `groupLevel` applies when this is not given). */
  groupLevel?: number | null;
  log?: LogWriter;
  /** The clock in seconds (tests). */
  now?: () => number;
}

interface Window {
  def: MetricDefinition;
  labels: string;
  times: number[];
  values: number[];
}

export class ConsoleMetricsBackend implements MetricsBackend {
  /** Definitions and checks as every registry does them; its values are not used. */
  private readonly registry = new MetricsRegistry();
  private readonly windows = new Map<string, Window>();
  private readonly windowSeconds: number | null;
  private readonly logInterval: number;
  private readonly groupLevel: number | null;
  private readonly log: LogWriter;
  private readonly now: () => number;
  private lastLog: number | null = null;

  constructor(options: ConsoleMetricsOptions = {}) {
    this.windowSeconds = options.windowSeconds === undefined ? 60 : options.windowSeconds;
    this.logInterval = options.logIntervalSeconds ?? 10;
    this.groupLevel = options.groupLevel ?? null;
    this.log = options.log ?? getLogger("agentlightning.metrics");
    this.now = options.now ?? (() => Date.now() / 1000);
  }

  hasPrometheus(): boolean {
    return false;
  }
  registerCounter(name: string, labelNames?: readonly string[], options?: MetricOptions): void {
    this.registry.registerCounter(name, labelNames, options);
  }
  registerGauge(name: string, labelNames?: readonly string[], options?: MetricOptions): void {
    this.registry.registerGauge(name, labelNames, options);
  }
  registerHistogram(name: string, labelNames?: readonly string[], buckets?: readonly number[] | null, options?: MetricOptions): void {
    this.registry.registerHistogram(name, labelNames, buckets, options);
  }
  incCounter(name: string, amount = 1, labels?: MetricLabels): void {
    this.registry.incCounter(name, amount, labels);
    this.record(name, labels, amount, false);
  }
  setGauge(name: string, value: number, labels?: MetricLabels): void {
    this.registry.setGauge(name, value, labels);
    this.record(name, labels, value, true);
  }
  observeHistogram(name: string, value: number, labels?: MetricLabels): void {
    this.registry.observeHistogram(name, value, labels);
    this.record(name, labels, value, false);
  }

  /** Adds the event to its group's window (a gauge's window holds its latest value only), then logs if it is time. */
  private record(name: string, labels: MetricLabels | undefined, value: number, latestOnly: boolean): void {
    const def = this.registry.definition(name)!;
    const level = this.groupLevel ?? def.groupLevel ?? 0;
    const values = labelValues(def, labels).slice(0, Math.max(0, level));
    const shown = values.length ? `{${values.map((v, i) => `${def.labelNames[i]}=${v}`).join(",")}}` : "";
    const key = `${name}${shown}`;
    let w = this.windows.get(key);
    if (!w) this.windows.set(key, (w = { def, labels: shown, times: [], values: [] }));
    const now = this.now();
    if (latestOnly) w.times.length = w.values.length = 0;
    w.times.push(now);
    w.values.push(value);
    if (this.lastLog === null || now - this.lastLog >= this.logInterval) {
      this.lastLog = now;
      this.flush(now);
    }
  }

  private flush(now: number): void {
    const entries: string[] = [];
    for (const w of this.windows.values()) {
      if (w.def.type !== "gauge" && this.windowSeconds !== null) {
        // Events are in time order: drop those before the window.
        const cut = w.times.findIndex((t) => t >= now - this.windowSeconds!);
        const drop = cut < 0 ? w.times.length : cut;
        w.times.splice(0, drop);
        w.values.splice(0, drop);
      }
      if (w.values.length === 0) continue;
      const head = `${w.def.name}${w.labels}`;
      if (w.def.type === "gauge") entries.push(`${head}=${w.values[0]}`);
      else if (w.def.type === "counter") {
        const start = this.windowSeconds === null ? w.times[0]! : Math.max(w.times[0]!, now - this.windowSeconds);
        const seconds = Math.max(now - start, this.logInterval > 0 ? this.logInterval : 1e-3);
        entries.push(`${head}=${(w.values.reduce((a, b) => a + b, 0) / seconds).toFixed(2)}/s`);
      } else {
        const sorted = [...w.values].sort((a, b) => a - b);
        entries.push(`${head}=${[50, 95, 99].map((p) => duration(percentile(sorted, p))).join(",")}`);
      }
    }
    if (entries.length) this.log.info(entries.sort().join("  "));
  }
}

/** Linear interpolation between the two nearest ranks. */
function percentile(sorted: readonly number[], p: number): number {
  const pos = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** Seconds in the unit that reads best. */
function duration(s: number): string {
  const a = Math.abs(s);
  if (a >= 1) return `${s.toFixed(2)}s`;
  if (a >= 1e-3) return `${(s * 1e3).toFixed(2)}ms`;
  if (a >= 1e-6) return `${(s * 1e6).toFixed(2)}µs`;
  return `${(s * 1e9).toFixed(2)}ns`;
}

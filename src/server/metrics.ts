/**
 * A small Prometheus registry (text exposition format 0.0.4): counters and histograms with labels,
 * plus gauges read at scrape time. Names and labels are Agent Lightning's (`agl.http.total`, `agl.store.latency`,
 * ...) with "." replaced by "_", so queries written for its Prometheus metrics work here.
 */
import type { LightningStore } from "../store/base.ts";
import type { RolloutStatus } from "../types/index.ts";
import { RolloutStatus as RolloutStatusEnum } from "../types/index.ts";

/** Upstream's latency buckets in seconds. */
export const LATENCY_BUCKETS = [
  1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 0.001, 0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2,
  0.3, 0.5, 0.7, 1, 2, 3, 5, 7, 10, 12, 15, 20, 25, 30, 40, 50, 60, 90, 120, 180, 240, 300,
];

type Labels = Record<string, string>;

const escapeLabel = (v: string): string => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const labelText = (labels: Labels, extra?: [string, string]): string => {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
  if (extra) parts.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
};
// Label names are fixed per metric, so the values alone identify a series.
const keyOf = (labels: Labels): string => {
  let k = "";
  for (const name in labels) k += labels[name] + "\u0000";
  return k;
};

interface Metric {
  render(): string[];
}

export class Counter implements Metric {
  private readonly values = new Map<string, { labels: Labels; value: number }>();
  constructor(
    readonly name: string,
    private readonly help: string,
  ) {}
  inc(labels: Labels, by = 1): void {
    const k = keyOf(labels);
    const cur = this.values.get(k);
    if (cur) cur.value += by;
    else this.values.set(k, { labels, value: by });
  }
  get(labels: Labels): number {
    return this.values.get(keyOf(labels))?.value ?? 0;
  }
  /** The sum over every series whose labels pass `keep` (all of them without it). */
  sum(keep: (labels: Labels) => boolean = () => true): number {
    let total = 0;
    for (const { labels, value } of this.values.values()) if (keep(labels)) total += value;
    return total;
  }
  render(): string[] {
    const out = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const { labels, value } of this.values.values()) out.push(`${this.name}${labelText(labels)} ${value}`);
    return out;
  }
}

export class Histogram implements Metric {
  private readonly series = new Map<string, { labels: Labels; counts: number[]; sum: number; count: number }>();
  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly buckets: readonly number[] = LATENCY_BUCKETS,
  ) {}
  observe(labels: Labels, value: number): void {
    const k = keyOf(labels);
    let s = this.series.get(k);
    if (!s) this.series.set(k, (s = { labels, counts: new Array<number>(this.buckets.length).fill(0), sum: 0, count: 0 }));
    // Counts are per bucket here and made cumulative when rendered.
    // First bucket with value <= bound (binary search; past the last bound only +Inf counts it).
    let lo = 0;
    let hi = this.buckets.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (value > this.buckets[mid]!) lo = mid + 1;
      else hi = mid;
    }
    if (lo < this.buckets.length) s.counts[lo]!++;
    s.sum += value;
    s.count++;
  }
  render(): string[] {
    const out = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const s of this.series.values()) {
      let acc = 0;
      this.buckets.forEach((b, i) => {
        acc += s.counts[i]!;
        out.push(`${this.name}_bucket${labelText(s.labels, ["le", String(b)])} ${acc}`);
      });
      out.push(`${this.name}_bucket${labelText(s.labels, ["le", "+Inf"])} ${s.count}`);
      out.push(`${this.name}_sum${labelText(s.labels)} ${s.sum}`);
      out.push(`${this.name}_count${labelText(s.labels)} ${s.count}`);
    }
    return out;
  }
}

/** A gauge whose samples are read when scraped. */
export class CollectedGauge {
  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly collect: () => Promise<{ labels: Labels; value: number }[]>,
  ) {}
  async render(): Promise<string[]> {
    const out = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} gauge`];
    for (const { labels, value } of await this.collect()) out.push(`${this.name}${labelText(labels)} ${value}`);
    return out;
  }
}

/** Every metric the store server exports. */
export class ServerMetrics {
  readonly httpTotal = new Counter("agl_http_total", "HTTP requests by route template, method and status.");
  readonly httpLatency = new Histogram("agl_http_latency", "HTTP request latency in seconds by route template, method and status.");
  readonly storeTotal = new Counter("agl_store_total", "Store operations by method and status.");
  readonly storeLatency = new Histogram("agl_store_latency", "Store operation latency in seconds by method and status.");
  private readonly gauges: CollectedGauge[];

  constructor(store: LightningStore) {
    // Read the raw store (not the instrumented one), so scrapes do not count as store traffic.
    const countStatus = async (statuses: RolloutStatus[]): Promise<number> =>
      (await store.queryRollouts({ status_in: statuses, limit: 0 })).total;
    this.gauges = [
      new CollectedGauge("agl_queue_depth", "Rollouts waiting to be dequeued (queuing or requeuing).", async () => [
        { labels: {}, value: await countStatus(["queuing", "requeuing"]) },
      ]),
      new CollectedGauge("agl_rollouts", "Rollouts by status.", async () =>
        Promise.all(RolloutStatusEnum.options.map(async (s) => ({ labels: { status: s }, value: await countStatus([s]) }))),
      ),
    ];
  }

  async render(): Promise<string> {
    const lines = [this.httpTotal, this.httpLatency, this.storeTotal, this.storeLatency].flatMap((m) => m.render());
    for (const g of this.gauges) lines.push(...(await g.render()));
    return lines.join("\n") + "\n";
  }
}

/**
 * Wraps a store so that every method call is counted and timed (`agl_store_*`, labelled with the
 * method and "OK" or the error class). The wrapper is a Proxy: it forwards everything else unchanged.
 */
export function instrumentStore(store: LightningStore, metrics: ServerMetrics): LightningStore {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== "function" || prop === "constructor") return value;
      let fn = wrapped.get(prop);
      if (!fn) {
        const method = String(prop);
        fn = (...args: unknown[]) => {
          const t0 = performance.now();
          const done = (status: string) => {
            const labels = { method, status };
            metrics.storeTotal.inc(labels);
            metrics.storeLatency.observe(labels, (performance.now() - t0) / 1000);
          };
          // Looked up on every call: the target may hand out a different function later (a swapped store).
          const current = Reflect.get(target, prop) as (...a: unknown[]) => unknown;
          const out = current.apply(target, args);
          if (out instanceof Promise) {
            return out.then(
              (v) => (done("OK"), v),
              (e: unknown) => {
                done(e instanceof Error ? e.name : "Error");
                throw e;
              },
            );
          }
          done("OK");
          return out;
        };
        wrapped.set(prop, fn);
      }
      return fn;
    },
  });
}

/**
 * `MetricsRegistry`: counters, gauges and histograms with labels, rendered in the Prometheus text format
 * (0.0.4). Names are Agent Lightning's: a dotted name (`agl.http.total`) is exposed with "." replaced by
 * "_", and a counter's samples end in `_total`, as prometheus_client writes them, so queries written
 * for upstream's metrics read ours. A metric is registered once with fixed label names; every write
 * gives exactly those labels.
 *
 * The registry also remembers what changed since its values were last taken (`takePending`): a process
 * that reaches the store over HTTP sends that to the store server (push.ts), which adds it to its own
 * registry (`applyPush`), so the one exposition holds every process's metrics.
 */
import { ConflictError, ValidationError } from "../types/index.ts";
import type { MetricsBackend, MetricLabels, MetricOptions } from "./backend.ts";
import type { MetricsPush, PushedMetric } from "./push-schema.ts";

export type MetricType = "counter" | "gauge" | "histogram";

/** prometheus_client's default histogram buckets (what upstream's PrometheusMetricsBackend uses without `buckets`). */
export const DEFAULT_BUCKETS: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** Upstream's latency buckets in seconds (its store server's and store's histograms). */
export const LATENCY_BUCKETS: readonly number[] = [
  1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 0.001, 0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2,
  0.3, 0.5, 0.7, 1, 2, 3, 5, 7, 10, 12, 15, 20, 25, 30, 40, 50, 60, 90, 120, 180, 240, 300,
];

export interface MetricDefinition {
  /** The name as registered (dots allowed). */
  readonly name: string;
  /** The family's name in the exposition: dots as underscores, a counter's with `_total`. */
  readonly exposedName: string;
  readonly type: MetricType;
  readonly labelNames: readonly string[];
  /** A histogram's upper bounds, increasing, without +Inf; null for the other types. */
  readonly buckets: readonly number[] | null;
  readonly help: string;
  /** How many leading labels the console backend groups by (upstream's `group_level`); null: its own setting. */
  readonly groupLevel: number | null;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/**
 * A definition checked the same way wherever it comes from (a local `register*`, a pushed metric):
 * a Prometheus name once "." is "_", label names Prometheus accepts, increasing finite buckets.
 */
export function checkDefinition(
  type: MetricType,
  name: unknown,
  labelNames: unknown,
  buckets: unknown,
  options: MetricOptions = {},
  path: (string | number)[] = [],
): MetricDefinition {
  if (typeof name !== "string" || !METRIC_NAME.test(name.replaceAll(".", "_")))
    throw new ValidationError(
      `metric name ${JSON.stringify(name)} is not a Prometheus name: letters, digits, "_", ":" and "." (read as "_"), not starting with a digit`,
      [...path, "name"],
    );
  if (!Array.isArray(labelNames))
    throw new ValidationError(`the label names of '${name}' must be a list of strings`, [...path, "label_names"]);
  labelNames.forEach((l, i) => {
    if (typeof l !== "string" || !LABEL_NAME.test(l) || l.startsWith("__"))
      throw new ValidationError(
        `label name ${JSON.stringify(l)} of '${name}' is not a Prometheus label name (letters, digits and "_", not starting with a digit or "__")`,
        [...path, "label_names", i],
      );
    if (type === "histogram" && l === "le")
      throw new ValidationError(`histogram '${name}' cannot have a label 'le' (its buckets use it)`, [...path, "label_names", i]);
    if (labelNames.indexOf(l) !== i) throw new ValidationError(`label '${l}' of '${name}' is given twice`, [...path, "label_names", i]);
  });
  let bounds: number[] | null = null;
  if (type === "histogram") {
    const given = buckets ?? DEFAULT_BUCKETS;
    if (!Array.isArray(given) || given.some((b) => typeof b !== "number" || Number.isNaN(b)))
      throw new ValidationError(`the buckets of '${name}' must be a list of numbers`, [...path, "buckets"]);
    // prometheus_client accepts a trailing +Inf; the +Inf bucket is always there.
    bounds = given.at(-1) === Infinity ? given.slice(0, -1) : [...given];
    bounds.forEach((b, i) => {
      if (!Number.isFinite(b) || (i > 0 && b <= bounds![i - 1]!))
        throw new ValidationError(`the buckets of '${name}' must be finite and increasing, got ${JSON.stringify(given)}`, [
          ...path,
          "buckets",
          i,
        ]);
    });
    if (bounds.length === 0) throw new ValidationError(`histogram '${name}' needs at least one bucket bound`, [...path, "buckets"]);
  }
  const base = name.replaceAll(".", "_");
  return {
    name,
    exposedName: type === "counter" && !base.endsWith("_total") ? `${base}_total` : base,
    type,
    labelNames: [...(labelNames as string[])],
    buckets: bounds,
    help: options.help ?? `${type[0]!.toUpperCase()}${type.slice(1)} ${name}`,
    groupLevel: options.groupLevel ?? null,
  };
}

/** The sample names a family writes: two families must not share one. */
function sampleNames(d: MetricDefinition): string[] {
  const n = d.exposedName;
  return d.type === "histogram" ? [n, `${n}_bucket`, `${n}_sum`, `${n}_count`] : [n];
}

const sameDefinition = (a: MetricDefinition, b: MetricDefinition): boolean =>
  a.type === b.type &&
  a.labelNames.length === b.labelNames.length &&
  a.labelNames.every((l, i) => l === b.labelNames[i]) &&
  (a.buckets ?? []).length === (b.buckets ?? []).length &&
  (a.buckets ?? []).every((x, i) => x === b.buckets![i]);

const describe = (d: MetricDefinition): string =>
  `${d.type} with labels [${d.labelNames.join(", ")}]${d.buckets ? ` and buckets [${d.buckets.join(", ")}]` : ""}`;

/** The label values of one write in the registered order; a missing, extra or non-string label is a ValidationError. */
export function labelValues(d: MetricDefinition, labels: MetricLabels | undefined, path: (string | number)[] = ["labels"]): string[] {
  const names = d.labelNames;
  const values = new Array<string>(names.length);
  for (let i = 0; i < names.length; i++) {
    const v = labels?.[names[i]!] as unknown;
    if (typeof v !== "string")
      throw new ValidationError(
        v === undefined
          ? `${d.type} '${d.name}' needs label '${names[i]}'`
          : `label '${names[i]}' of '${d.name}' must be a string, got ${typeof v}`,
        [...path, names[i]!],
      );
    values[i] = v;
  }
  if (labels) {
    let given = 0;
    for (const _ in labels) given++;
    if (given !== names.length) {
      const extra = Object.keys(labels).find((k) => !names.includes(k))!;
      throw new ValidationError(`${d.type} '${d.name}' has no label '${extra}' (its labels: [${names.join(", ")}])`, [...path, extra]);
    }
  }
  return values;
}

const escapeLabel = (v: string): string => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const escapeHelp = (v: string): string => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");

/** `{a="x",b="y"}` (with `extra` last), or "" without labels. */
function labelText(names: readonly string[], values: readonly string[], extra?: [string, string]): string {
  const parts = names.map((n, i) => `${n}="${escapeLabel(values[i]!)}"`);
  if (extra) parts.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
}

/** The HELP and TYPE lines of a family. */
const familyHeader = (name: string, help: string, type: MetricType): string[] => [
  `# HELP ${name} ${escapeHelp(help)}`,
  `# TYPE ${name} ${type}`,
];

/** One series of a metric: its label values and what it holds. */
export interface SeriesValue {
  labels: Record<string, string>;
  /** A counter's total or a gauge's value; a histogram's sum of observations. */
  value: number;
  /** A histogram's number of observations (null for the other types). */
  count: number | null;
}

abstract class Family<S extends { values: string[] }> {
  readonly series = new Map<string, S>();
  constructor(
    protected readonly registry: MetricsRegistry,
    readonly def: MetricDefinition,
  ) {}

  /** The series of `labels`, created on first use. */
  protected seriesOf(labels: MetricLabels | undefined): S {
    return this.seriesOfValues(labelValues(this.def, labels));
  }

  /** The series of label values already checked. */
  seriesOfValues(values: string[]): S {
    const key = values.join("\u0000");
    let s = this.series.get(key);
    if (!s) this.series.set(key, (s = this.create(values)));
    return s;
  }

  protected labelsOf(values: readonly string[]): Record<string, string> {
    return labelsObject(this.def.labelNames, values);
  }

  protected abstract create(values: string[]): S;
  abstract render(out: string[]): void;
  abstract read(): SeriesValue[];
}

/** A counter's or a gauge's series: one sample each. */
abstract class OneValueFamily<S extends { values: string[]; value: number }> extends Family<S> {
  render(out: string[]): void {
    out.push(...familyHeader(this.def.exposedName, this.def.help, this.def.type));
    for (const s of this.series.values()) out.push(`${this.def.exposedName}${labelText(this.def.labelNames, s.values)} ${s.value}`);
  }
  read(): SeriesValue[] {
    return [...this.series.values()].map((s) => ({ labels: this.labelsOf(s.values), value: s.value, count: null }));
  }
}

interface CounterSeries {
  values: string[];
  value: number;
  pending: number;
}

export class Counter extends OneValueFamily<CounterSeries> {
  protected create(values: string[]): CounterSeries {
    return { values, value: 0, pending: 0 };
  }
  inc(labels?: MetricLabels, amount = 1): void {
    if (typeof amount !== "number" || !(amount >= 0) || amount === Infinity)
      throw new ValidationError(`counter '${this.def.name}' can only go up by a finite amount >= 0, got ${amount}`, ["amount"]);
    const s = this.seriesOf(labels);
    s.value += amount;
    s.pending += amount;
    this.registry.markPending();
  }
  /** The sum over every series whose labels pass `keep` (all of them without it). */
  sum(keep: (labels: Record<string, string>) => boolean = () => true): number {
    let total = 0;
    for (const s of this.series.values()) if (keep(this.labelsOf(s.values))) total += s.value;
    return total;
  }
}

interface GaugeSeries {
  values: string[];
  value: number;
  pending: boolean;
}

export class Gauge extends OneValueFamily<GaugeSeries> {
  protected create(values: string[]): GaugeSeries {
    return { values, value: 0, pending: false };
  }
  set(labels: MetricLabels | undefined, value: number): void {
    if (typeof value !== "number" || !Number.isFinite(value))
      throw new ValidationError(`gauge '${this.def.name}' takes a finite number, got ${value}`, ["value"]);
    const s = this.seriesOf(labels);
    s.value = value;
    s.pending = true;
    this.registry.markPending();
  }
}

interface HistogramSeries {
  values: string[];
  /** Observations per bucket (not cumulative); the last one counts those above the top bound. */
  counts: number[];
  sum: number;
  count: number;
  pendingCounts: number[];
  pendingSum: number;
  pendingCount: number;
}

export class Histogram extends Family<HistogramSeries> {
  protected create(values: string[]): HistogramSeries {
    const n = this.def.buckets!.length + 1;
    return {
      values,
      counts: new Array<number>(n).fill(0),
      sum: 0,
      count: 0,
      pendingCounts: new Array<number>(n).fill(0),
      pendingSum: 0,
      pendingCount: 0,
    };
  }
  observe(labels: MetricLabels | undefined, value: number): void {
    if (typeof value !== "number" || !Number.isFinite(value))
      throw new ValidationError(`histogram '${this.def.name}' takes a finite number, got ${value}`, ["value"]);
    const s = this.seriesOf(labels);
    const buckets = this.def.buckets!;
    // The first bound >= value (binary search); past the last bound, the +Inf bucket.
    let lo = 0;
    let hi = buckets.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (value > buckets[mid]!) lo = mid + 1;
      else hi = mid;
    }
    s.counts[lo]!++;
    s.sum += value;
    s.count++;
    s.pendingCounts[lo]!++;
    s.pendingSum += value;
    s.pendingCount++;
    this.registry.markPending();
  }
  render(out: string[]): void {
    const { exposedName: name, labelNames, buckets } = this.def;
    out.push(...familyHeader(name, this.def.help, "histogram"));
    for (const s of this.series.values()) {
      let acc = 0;
      buckets!.forEach((b, i) => {
        acc += s.counts[i]!;
        out.push(`${name}_bucket${labelText(labelNames, s.values, ["le", String(b)])} ${acc}`);
      });
      out.push(`${name}_bucket${labelText(labelNames, s.values, ["le", "+Inf"])} ${s.count}`);
      out.push(`${name}_sum${labelText(labelNames, s.values)} ${s.sum}`);
      out.push(`${name}_count${labelText(labelNames, s.values)} ${s.count}`);
    }
  }
  read(): SeriesValue[] {
    return [...this.series.values()].map((s) => ({ labels: this.labelsOf(s.values), value: s.sum, count: s.count }));
  }
}

type AnyFamily = Counter | Gauge | Histogram;

export interface MetricsRegistryOptions {
  /** Exposed names starting with this are refused (the store server keeps `agl_` for its own metrics). */
  reservedPrefix?: string;
}

export class MetricsRegistry implements MetricsBackend {
  /** Tells this registry's pushes apart from another's: a server drops a push of its own registry's values. */
  readonly source: string = crypto.getRandomValues(new Uint32Array(2)).reduce((s, n) => s + n.toString(16).padStart(8, "0"), "");
  private readonly families = new Map<string, AnyFamily>();
  /** Sample name -> the registered name that writes it. */
  private readonly samples = new Map<string, string>();
  private readonly reservedPrefix: string | null;
  private pending = false;

  constructor(options: MetricsRegistryOptions = {}) {
    this.reservedPrefix = options.reservedPrefix ?? null;
  }

  hasPrometheus(): boolean {
    return true;
  }

  registerCounter(name: string, labelNames: readonly string[] = [], options: MetricOptions = {}): Counter {
    return this.register(checkDefinition("counter", name, labelNames, null, options)) as Counter;
  }

  registerGauge(name: string, labelNames: readonly string[] = [], options: MetricOptions = {}): Gauge {
    return this.register(checkDefinition("gauge", name, labelNames, null, options)) as Gauge;
  }

  registerHistogram(
    name: string,
    labelNames: readonly string[] = [],
    buckets: readonly number[] | null = null,
    options: MetricOptions = {},
  ): Histogram {
    return this.register(checkDefinition("histogram", name, labelNames, buckets, options)) as Histogram;
  }

  incCounter(name: string, amount = 1, labels?: MetricLabels): void {
    this.family(name, "counter").inc(labels, amount);
  }

  setGauge(name: string, value: number, labels?: MetricLabels): void {
    this.family(name, "gauge").set(labels, value);
  }

  observeHistogram(name: string, value: number, labels?: MetricLabels): void {
    this.family(name, "histogram").observe(labels, value);
  }

  /** Every registered metric's definition, in registration order. */
  definitions(): MetricDefinition[] {
    return [...this.families.values()].map((f) => f.def);
  }

  /** A registered metric's definition; null when none has that name. */
  definition(name: string): MetricDefinition | null {
    return this.families.get(name)?.def ?? null;
  }

  /** The series of a registered metric now. */
  read(name: string): SeriesValue[] {
    const f = this.families.get(name);
    if (!f) throw new ValidationError(`metric '${name}' is not registered`, ["name"]);
    return f.read();
  }

  /** The Prometheus text of every metric (families without series give their HELP and TYPE only). */
  render(): string {
    const out: string[] = [];
    for (const f of this.families.values()) f.render(out);
    return out.length ? `${out.join("\n")}\n` : "";
  }

  /** Called on each write; a push has something to send from then on. */
  markPending(): void {
    this.pending = true;
  }

  /** True when something was written since the last `takePending`. */
  hasPending(): boolean {
    return this.pending;
  }

  /**
   * What changed since the last call, as a push (counters' and histograms' increments, gauges' latest
   * values), and forgets it; null when nothing did.
   */
  takePending(): MetricsPush | null {
    if (!this.pending) return null;
    this.pending = false;
    const push = this.asPush(true);
    return push.metrics.length ? push : null;
  }

  /** Every series as it is now, as a push (counters' totals, gauges' values, histograms' counts); nothing is forgotten. */
  snapshot(): MetricsPush {
    return this.asPush(false);
  }

  /** The series as a push: only what changed since the last one, which is then forgotten (`changes`), or all of them whole. */
  private asPush(changes: boolean): MetricsPush {
    const metrics: PushedMetric[] = [];
    for (const f of this.families.values()) {
      const { name, help, labelNames, buckets } = f.def;
      const head = { name, help, label_names: [...labelNames] };
      const labels = (s: { values: string[] }) => labelsObject(labelNames, s.values);
      const series = [...f.series.values()];
      if (f instanceof Counter) {
        const samples = (series as CounterSeries[])
          .filter((s) => !changes || s.pending > 0)
          .map((s) => ({ labels: labels(s), value: changes ? s.pending : s.value }));
        if (changes) for (const s of f.series.values()) s.pending = 0;
        if (samples.length || !changes) metrics.push({ ...head, type: "counter", samples });
      } else if (f instanceof Gauge) {
        const samples = (series as GaugeSeries[]).filter((s) => !changes || s.pending).map((s) => ({ labels: labels(s), value: s.value }));
        if (changes) for (const s of f.series.values()) s.pending = false;
        if (samples.length || !changes) metrics.push({ ...head, type: "gauge", samples });
      } else {
        const samples = (series as HistogramSeries[])
          .filter((s) => !changes || s.pendingCount > 0)
          .map((s) => ({
            labels: labels(s),
            bucket_counts: [...(changes ? s.pendingCounts : s.counts)],
            sum: changes ? s.pendingSum : s.sum,
          }));
        if (changes)
          for (const s of f.series.values()) {
            s.pendingCounts.fill(0);
            s.pendingSum = 0;
            s.pendingCount = 0;
          }
        if (samples.length || !changes) metrics.push({ ...head, type: "histogram", buckets: [...buckets!], samples });
      }
    }
    return { source: this.source, metrics };
  }

  /** A push taken from this registry that could not be sent: its increments wait for the next one. */
  returnPending(push: MetricsPush): void {
    for (const m of push.metrics) {
      const f = this.families.get(m.name);
      if (!f) continue;
      for (const sample of m.samples) {
        const values = labelValues(f.def, sample.labels);
        if (f instanceof Counter && "value" in sample) f.seriesOfValues(values).pending += sample.value;
        else if (f instanceof Gauge) {
          const s = f.seriesOfValues(values);
          s.pending = true; // a value set since then is newer: keep it
        } else if (f instanceof Histogram && "bucket_counts" in sample) {
          const s = f.seriesOfValues(values);
          sample.bucket_counts.forEach((n, i) => (s.pendingCounts[i]! += n));
          s.pendingSum += sample.sum;
          s.pendingCount += sample.bucket_counts.reduce((a, b) => a + b, 0);
        }
      }
      this.pending = true;
    }
  }

  /**
   * Adds a push from another process: counters and histograms by its increments, gauges set to its
   * values. The whole push is checked first (definitions as registered here, labels, values, at most
   * `maxSeries` series in all) and nothing is applied when any part is wrong.
   */
  applyPush(push: MetricsPush, maxSeries = Infinity): void {
    const plan: {
      def: MetricDefinition;
      existing: AnyFamily | null;
      samples: { values: string[]; sample: PushedMetric["samples"][number] }[];
    }[] = [];
    const newDefs = new Map<string, MetricDefinition>();
    let newSeries = 0;
    push.metrics.forEach((m, i) => {
      const path = ["metrics", i];
      const def = checkDefinition(m.type, m.name, m.label_names, m.type === "histogram" ? m.buckets : null, { help: m.help }, path);
      const existing = this.families.get(m.name) ?? null;
      if (existing) this.checkSame(existing.def, def, path);
      else {
        const earlier = newDefs.get(m.name);
        if (earlier) this.checkSame(earlier, def, path);
        else {
          this.checkFree(def, path, newDefs);
          newDefs.set(m.name, def);
        }
      }
      const samples = m.samples.map((sample, j) => {
        const values = labelValues(def, sample.labels, [...path, "samples", j, "labels"]);
        if (def.type === "histogram" && "bucket_counts" in sample && sample.bucket_counts.length !== def.buckets!.length + 1)
          throw new ValidationError(
            `histogram '${def.name}' has ${def.buckets!.length} bucket bounds, so ${def.buckets!.length + 1} bucket counts (the last for +Inf), got ${sample.bucket_counts.length}`,
            [...path, "samples", j, "bucket_counts"],
          );
        if (!existing?.series.has(values.join("\u0000"))) newSeries++;
        return { values, sample };
      });
      plan.push({ def, existing, samples });
    });
    const seriesNow = [...this.families.values()].reduce((n, f) => n + f.series.size, 0);
    if (seriesNow + newSeries > maxSeries)
      throw new ValidationError(
        `the push would make ${seriesNow + newSeries} series; this server keeps at most ${maxSeries} pushed series`,
        ["metrics"],
      );
    for (const { def, existing, samples } of plan) {
      const f = existing ?? this.families.get(def.name) ?? this.register(def);
      for (const { values, sample } of samples) {
        if (f instanceof Counter && "value" in sample) f.seriesOfValues(values).value += sample.value;
        else if (f instanceof Gauge && "value" in sample) f.seriesOfValues(values).value = sample.value;
        else if (f instanceof Histogram && "bucket_counts" in sample) {
          const s = f.seriesOfValues(values);
          sample.bucket_counts.forEach((n, i) => (s.counts[i]! += n));
          s.sum += sample.sum;
          s.count += sample.bucket_counts.reduce((a, b) => a + b, 0);
        }
      }
    }
  }

  private register(def: MetricDefinition): AnyFamily {
    const existing = this.families.get(def.name);
    if (existing) {
      this.checkSame(existing.def, def, []);
      return existing;
    }
    this.checkFree(def, []);
    const f = def.type === "counter" ? new Counter(this, def) : def.type === "gauge" ? new Gauge(this, def) : new Histogram(this, def);
    this.families.set(def.name, f);
    for (const s of sampleNames(def)) this.samples.set(s, def.name);
    return f;
  }

  private checkSame(had: MetricDefinition, def: MetricDefinition, path: (string | number)[]): void {
    if (!sameDefinition(had, def))
      throw new ConflictError(
        `metric '${def.name}' is registered as a ${describe(had)}, not a ${describe(def)}${path.length ? ` (at ${path.join(".")})` : ""}`,
      );
  }

  /** Its exposed names are free here (and among `pending` definitions), and not reserved. */
  private checkFree(def: MetricDefinition, path: (string | number)[], pending?: Map<string, MetricDefinition>): void {
    if (this.reservedPrefix !== null && def.exposedName.startsWith(this.reservedPrefix))
      throw new ValidationError(
        `metric names starting with '${this.reservedPrefix}' are the store server's own; choose another name than '${def.name}'`,
        [...path, "name"],
      );
    const taken = new Map(this.samples);
    for (const d of pending?.values() ?? []) for (const s of sampleNames(d)) taken.set(s, d.name);
    for (const s of sampleNames(def)) {
      const owner = taken.get(s);
      if (owner !== undefined && owner !== def.name)
        throw new ConflictError(`metric '${def.name}' would write '${s}', which '${owner}' already writes: rename one of them`);
    }
  }

  private family<T extends MetricType>(name: string, type: T): T extends "counter" ? Counter : T extends "gauge" ? Gauge : Histogram {
    const f = this.families.get(name);
    if (!f)
      throw new ValidationError(`${type} '${name}' is not registered: call register${type[0]!.toUpperCase()}${type.slice(1)} first`, [
        "name",
      ]);
    if (f.def.type !== type) throw new ValidationError(`metric '${name}' is a ${f.def.type}, not a ${type}`, ["name"]);
    return f as never;
  }
}

const labelsObject = (names: readonly string[], values: readonly string[]): Record<string, string> =>
  Object.fromEntries(names.map((n, i) => [n, values[i]!]));

/**
 * The registry of this process (of this page, in a browser): what `PrometheusMetricsBackend` writes to
 * by default, what the store server serves at `/v1/agl/prometheus` next to its own metrics, and what a
 * `LightningStoreClient` sends to the server it talks to.
 */
/** The Content-Type of `render()`'s text (the Prometheus exposition format 0.0.4). */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export const processMetrics = new MetricsRegistry({ reservedPrefix: "agl_" });

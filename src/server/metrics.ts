/**
 * The store server's own metrics, under Agent Lightning's names and labels (docs/metrics.md#the-store-servers-metrics):
 * `agl_http_*` by route template, method and status, `agl_store_*` by store method, `agl_rollouts_*` by
 * final status and mode, plus two gauges read from the store at each scrape (`agl_queue_depth`,
 * `agl_rollouts`: ours, not upstream's). The
 * exposition is these followed by the process's registry: what agents and algorithms in this process
 * write, and what other processes push here.
 */
import { type LogWriter, errorLine } from "../platform/log.ts";
import type { MetricsPush } from "../metrics/push-schema.ts";
import { LATENCY_BUCKETS, MetricsRegistry } from "../metrics/registry.ts";
import type { LightningStore } from "../store/base.ts";
import { LightningStoreCore } from "../store/core.ts";
import type { RolloutStatus } from "../types/index.ts";
import { RolloutStatus as RolloutStatusEnum, isTerminal } from "../types/index.ts";

/** What one server process holds, whole: its own series and its process registry's. */
export interface ProcessMetrics {
  own: MetricsPush;
  shared: MetricsPush;
}

/**
 * The other processes serving the same store (the other workers of `agl store --workers N`): a scrape
 * of any of them sums what all of them hold.
 */
export interface MetricsPeers {
  /** Gives the peers this process's metrics when they ask. */
  serve(snapshot: () => ProcessMetrics): void;
  /** The peers' metrics now (those that answer in time). */
  gather(): Promise<ProcessMetrics[]>;
}

export class ServerMetrics {
  /** The server's own series (a registry per app: two apps in one process count apart). */
  private readonly own = new MetricsRegistry();
  readonly httpTotal = this.own.registerCounter("agl.http.total", ["path", "method", "status"], {
    help: "HTTP requests by route template, method and status.",
  });
  readonly httpLatency = this.own.registerHistogram("agl.http.latency", ["path", "method", "status"], LATENCY_BUCKETS, {
    help: "HTTP request latency in seconds by route template, method and status.",
  });
  readonly storeTotal = this.own.registerCounter("agl.store.total", ["method", "store_pubmeth", "status"], {
    help: "Store operations by method and status.",
  });
  readonly storeLatency = this.own.registerHistogram("agl.store.latency", ["method", "store_pubmeth", "status"], LATENCY_BUCKETS, {
    help: "Store operation latency in seconds by method and status.",
  });
  readonly rolloutsTotal = this.own.registerCounter("agl.rollouts.total", ["status", "mode"], {
    help: "Rollouts that reached a final status, by that status and the rollout's mode.",
  });
  readonly rolloutsDuration = this.own.registerHistogram("agl.rollouts.duration", ["status", "mode"], LATENCY_BUCKETS, {
    help: "Seconds from a rollout's start to its final status, by that status and mode.",
  });
  private readonly queueDepth = this.own.registerGauge("agl.queue_depth", [], {
    help: "Rollouts waiting to be dequeued (queuing or requeuing).",
  });
  private readonly rollouts = this.own.registerGauge("agl.rollouts", ["status"], { help: "Rollouts by status." });
  private readonly store: LightningStore;
  private readonly stopCounting: () => void;

  /**
   * @param store the raw store (not the instrumented one), so scrapes and the reads of finished rollouts
   *   do not count as store traffic
   * @param shared the process's registry, served after the server's own series and added to by pushes
   */
  constructor(
    store: LightningStore,
    readonly shared: MetricsRegistry,
    private readonly log: LogWriter,
    private readonly peers: MetricsPeers | null = null,
  ) {
    this.store = store;
    peers?.serve(() => ({ own: this.own.snapshot(), shared: this.shared.snapshot() }));
    // The rollouts this process finished (a worker of `agl store --workers` counts its own).
    this.stopCounting =
      store instanceof LightningStoreCore
        ? store.onChange(({ finished }) => {
            for (const id of finished)
              void store.getRolloutById(id).then(
                (r) => {
                  // Restarted since (a new attempt): its next end is counted then.
                  if (r === null || !isTerminal(r.status) || r.end_time === null) return;
                  const labels = { status: r.status, mode: r.mode ?? "unknown" };
                  this.rolloutsTotal.inc(labels);
                  this.rolloutsDuration.observe(labels, Math.max(0, r.end_time - r.start_time));
                },
                (e: unknown) => log.warning(`agl_rollouts_total: could not read finished rollout ${id}: ${errorLine(e)}`),
              );
          })
        : () => {};
  }

  async render(): Promise<string> {
    const count = async (statuses: RolloutStatus[]) => (await this.store.queryRollouts({ status_in: statuses, limit: 0 })).total;
    const [queued, ...byStatus] = await Promise.all([count(["queuing", "requeuing"]), ...RolloutStatusEnum.options.map((s) => count([s]))]);
    this.queueDepth.set(undefined, queued!);
    RolloutStatusEnum.options.forEach((status, i) => this.rollouts.set({ status }, byStatus[i]!));
    if (this.peers === null) return this.own.render() + this.shared.render();
    const others = await this.peers.gather();
    // Counters and histograms add up; a gauge keeps the last value applied: this process's, read just now.
    return (
      this.sum(others.map((o) => o.own).concat(this.own.snapshot())) + this.sum(others.map((o) => o.shared).concat(this.shared.snapshot()))
    );
  }

  /** The Prometheus text of several processes' registries added up. */
  private sum(parts: MetricsPush[]): string {
    const total = new MetricsRegistry();
    for (const part of parts) {
      try {
        total.applyPush(part);
      } catch (e) {
        // Two processes that registered one name differently (pushes from clients that disagree).
        this.log.warning(`a worker's metrics are left out of this scrape: ${errorLine(e)}`);
      }
    }
    return total.render();
  }

  /** Stops counting finished rollouts (the app is done with its store). */
  close(): void {
    this.stopCounting();
  }
}

/**
 * Wraps a store so that every method call is counted and timed (`agl_store_*`, labelled with the
 * method, upstream's `store_pubmeth` (the same: every call here is to a public method) and "OK" or the
 * error class). The wrapper is a Proxy: it forwards everything else unchanged.
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
            const labels = { method, store_pubmeth: method, status };
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

/**
 * Routes added to `/v1/agl` for the dashboard's needs (docs/http-api.md#dashboard-routes), usable by any
 * client: rollout counts per status and mode, the triplets an adapter makes from a rollout's trace, the
 * bookkeeping rollouts algorithms write their training metrics under, and the server's own health.
 */
import { Hono } from "hono";
import { z } from "zod";
import { LlmProxyTraceToTriplet } from "../../adapter/proxy-triplet.ts";
import { findFinalReward } from "../../adapter/reward.ts";
import { TraceTripletAdapter } from "../../adapter/trace-triplet.ts";
import { platform } from "../../platform/index.ts";
import type { LightningStore } from "../../store/base.ts";
import { isTerminal, RolloutMode, RolloutStatus, type Rollout } from "../../types/index.ts";
import { setOwn } from "../../types/own-keys.ts";
import type { ServerMetrics } from "../metrics.ts";
import { queryParams } from "../query-params.ts";
import type { RouteDeps } from "../routes/deps.ts";

export const RolloutCountsQuery = z.strictObject({
  mode_in: z.array(RolloutMode).nullable().optional(),
  rollout_id_contains: z.string().nullable().optional(),
});

/** Most rollouts one rewards request may name (the Rollouts page asks for its 50 rows). */
export const MAX_REWARD_IDS = 200;

export const RolloutRewardsQuery = z.strictObject({
  rollout_id_in: z.array(z.string().min(1)).min(1).max(MAX_REWARD_IDS),
});

export const TripletsQuery = z.strictObject({
  /** `tracer`: TracerTraceToTriplet (the agent's own LLM spans); `proxy`: LlmProxyTraceToTriplet (the policy server's). */
  adapter: z.enum(["tracer", "proxy"]).default("tracer"),
  /** An attempt id, or `latest` (the default). */
  attempt_id: z.string().min(1).default("latest"),
});

export interface RolloutCounts {
  total: number;
  by_status: Record<RolloutStatus, number>;
}

export interface TrainingRun {
  rollout_id: string;
  /** The bookkeeping rollout's `metadata.kind`, e.g. `grpo-metrics`, `apo-history`. */
  kind: string;
  status: RolloutStatus;
  start_time: number;
  end_time: number | null;
  input: unknown;
}

/**
 * `metadata.kind` of the bookkeeping rollouts algorithms keep their progress spans under: GRPO's and
 * SFT's `grpo-metrics` / `sft-metrics`, APO's `apo-history`.
 */
export const TRAINING_KIND = /-(?:metrics|history)$/;

const SCAN_PAGE = 2_000;

/**
 * The bookkeeping rollouts found so far, scanned in insertion order: each call reads only the rollouts
 * added since the last one, so a store of 100,000 rollouts is read once, not on every refresh.
 */
export class TrainingRunIndex {
  private scanned = 0;
  private runs = new Map<string, TrainingRun>();
  private inFlight: Promise<TrainingRun[]> | null = null;
  constructor(private readonly store: LightningStore) {}

  /** One scan at a time: callers that arrive during a scan share its answer (two would skip each other's pages). */
  list(): Promise<TrainingRun[]> {
    this.inFlight ??= this.scan().finally(() => (this.inFlight = null));
    return this.inFlight;
  }

  private async scan(): Promise<TrainingRun[]> {
    let total = (await this.store.queryRollouts({ limit: 0 })).total;
    if (total < this.scanned) {
      // Fewer rollouts than already read: the store was reset; start over.
      this.scanned = 0;
      this.runs = new Map();
    }
    while (this.scanned < total) {
      const page = await this.store.queryRollouts({ limit: SCAN_PAGE, offset: this.scanned });
      if (page.items.length === 0) break;
      for (const r of page.items) this.remember(r);
      this.scanned += page.items.length;
      total = page.total;
    }
    // A known run's status and end time change while it trains: read those few again.
    const open = [...this.runs.values()].filter((r) => r.end_time === null).map((r) => r.rollout_id);
    if (open.length > 0) for (const r of (await this.store.queryRollouts({ rollout_id_in: open, limit: -1 })).items) this.remember(r);
    return [...this.runs.values()].sort((a, b) => b.start_time - a.start_time);
  }

  private remember(r: Rollout): void {
    const kind = r.metadata?.kind;
    if (typeof kind !== "string" || !TRAINING_KIND.test(kind)) return;
    this.runs.set(r.rollout_id, {
      rollout_id: r.rollout_id,
      kind,
      status: r.status,
      start_time: r.start_time,
      end_time: r.end_time,
      input: r.input,
    });
  }
}

/**
 * Each rollout's final reward: the value of the last span of its latest attempt that carries one (the
 * adapters' rule, src/adapter/reward.ts), null without one or when a reward attribute is not a number.
 * A finished attempt's reward is remembered (the newest `MAX_REMEMBERED`), so a page that refreshes
 * every few seconds reads the spans of running attempts only.
 */
export class RolloutRewards {
  static readonly MAX_REMEMBERED = 10_000;
  private readonly finished = new Map<string, number | null>();
  constructor(private readonly store: LightningStore) {}

  async of(rolloutIds: readonly string[]): Promise<Record<string, number | null>> {
    const rollouts = (await this.store.queryRollouts({ rollout_id_in: [...rolloutIds], limit: -1 })).items;
    const found = new Map(rollouts.map((r) => [r.rollout_id, r]));
    const out: Record<string, number | null> = {};
    await Promise.all(
      rolloutIds.map(async (id) => {
        const r = found.get(id);
        const attempt = r && "attempt" in r ? r.attempt : null;
        setOwn(out, id, attempt ? await this.reward(id, attempt.attempt_id, isTerminal(r!.status)) : null);
      }),
    );
    return out;
  }

  private async reward(rolloutId: string, attemptId: string, done: boolean): Promise<number | null> {
    const key = `${rolloutId}/${attemptId}`;
    if (this.finished.has(key)) return this.finished.get(key)!;
    const spans = (await this.store.querySpans(rolloutId, { attempt_id: attemptId, limit: -1 })).items;
    let reward: number | null;
    try {
      reward = findFinalReward(spans);
    } catch {
      reward = null; // a reward attribute that is not a number: the Rollout page's Triplets tab says why
    }
    if (done) {
      this.finished.set(key, reward);
      if (this.finished.size > RolloutRewards.MAX_REMEMBERED) this.finished.delete(this.finished.keys().next().value!);
    }
    return reward;
  }
}

/** The requests this server answered, by class of status (from its Prometheus counters). */
function requestCounts(metrics: ServerMetrics): { total: number; client_errors: number; server_errors: number } {
  const startsWith = (d: string) => (l: Record<string, string>) => (l.status ?? "").startsWith(d);
  return {
    total: metrics.httpTotal.sum(),
    client_errors: metrics.httpTotal.sum(startsWith("4")),
    server_errors: metrics.httpTotal.sum(startsWith("5")),
  };
}

export function dashboardRoutes({ store, metrics }: Pick<RouteDeps, "store" | "metrics">): Hono {
  const api = new Hono();
  const runs = new TrainingRunIndex(store);
  const rewards = new RolloutRewards(store);
  const startedAt = Date.now() / 1000;

  api.get("/statistics/rollouts", async (c) => {
    const q = queryParams(c, RolloutCountsQuery);
    const base = { mode_in: q.mode_in ?? null, rollout_id_contains: q.rollout_id_contains ?? null, limit: 0 };
    const totals = await Promise.all(RolloutStatus.options.map((s) => store.queryRollouts({ ...base, status_in: [s] })));
    const by_status = Object.fromEntries(RolloutStatus.options.map((s, i) => [s, totals[i]!.total])) as Record<RolloutStatus, number>;
    const counts: RolloutCounts = { total: totals.reduce((n, t) => n + t.total, 0), by_status };
    return c.json(counts);
  });

  api.get("/statistics/rewards", async (c) => {
    const q = queryParams(c, RolloutRewardsQuery);
    return c.json({ rewards: await rewards.of(q.rollout_id_in) });
  });

  api.get("/rollouts/:rollout_id/triplets", async (c) => {
    const q = queryParams(c, TripletsQuery);
    const rolloutId = c.req.param("rollout_id");
    const spans = (await store.querySpans(rolloutId, { attempt_id: q.attempt_id, limit: -1 })).items;
    const adapter = q.adapter === "proxy" ? new LlmProxyTraceToTriplet() : new TraceTripletAdapter();
    try {
      return c.json({ adapter: q.adapter, attempt_id: q.attempt_id, spans: spans.length, triplets: adapter.adapt(spans), error: null });
    } catch (e) {
      // A trace the adapter cannot read is data to show, not a failed request.
      const error = e instanceof Error ? e.message : String(e);
      return c.json({ adapter: q.adapter, attempt_id: q.attempt_id, spans: spans.length, triplets: [], error });
    }
  });

  api.get("/training/runs", async (c) => c.json({ items: await runs.list() }));

  api.get("/server", async (c) => {
    const t0 = performance.now();
    await store.queryRollouts({ limit: 0 });
    const storeLatencyMs = performance.now() - t0;
    return c.json({
      status: "ok",
      runtime: platform.description,
      started_at: startedAt,
      uptime_seconds: Date.now() / 1000 - startedAt,
      store_latency_ms: storeLatencyMs,
      // null when the app runs without metrics (createStoreApp's `metrics: false`).
      requests: metrics ? requestCounts(metrics) : null,
      system: platform.systemSnapshot(),
    });
  });
  return api;
}

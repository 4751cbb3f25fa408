/**
 * `Storage` in process memory: maps indexed the way the core reads them (attempts by rollout, spans by
 * rollout, a set of running rollouts, an O(1) queue), plus span memory accounting and eviction
 * (spec store.md §3.6). Every stored row is deep-frozen, so rows are returned without copying.
 */
import type { Attempt, PaginatedResult, ResourcesUpdate, Rollout, Span, StoreStatistics, Worker } from "../types/index.ts";
import { EvictedError, newWorker } from "../types/index.ts";
import { AsyncMutex } from "./mutex.ts";
import { deepFreeze } from "./owned.ts";
import { pinnedValue, runQuery, type QuerySpec } from "./query.ts";
import type {
  AttemptPatchRow,
  CollectionName,
  RolloutPatchRow,
  Rows,
  Storage,
  StorageTx,
  TxMode,
  WorkerPatchRow,
} from "./storage.ts";

export interface MemoryStorageOptions {
  /** Span bytes above which eviction starts. */
  evictionThresholdBytes: number;
  /** Eviction stops once the span bytes are at or below this. */
  safeThresholdBytes: number;
  memoryCapacityBytes: number;
  spanSizeEstimator: (span: Span) => number;
}

/** A FIFO of strings with O(1) push, pop and membership. */
class IdQueue {
  private items: (string | undefined)[] = [];
  private head = 0;
  private readonly counts = new Map<string, number>();

  push(id: string): void {
    this.items.push(id);
    this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
  }

  shift(): string | undefined {
    if (this.head >= this.items.length) return undefined;
    const id = this.items[this.head]!;
    this.items[this.head++] = undefined;
    // Drop the consumed prefix now and then, so memory stays proportional to the live queue.
    if (this.head >= 4096 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    const n = this.counts.get(id)!;
    if (n === 1) this.counts.delete(id);
    else this.counts.set(id, n - 1);
    return id;
  }

  has(id: string): boolean {
    return this.counts.has(id);
  }
}

/** The spans of one rollout, with their duplicate keys and size. */
interface SpanBucket {
  spans: Span[];
  keys: Set<string>;
  bytes: number;
}

const spanKey = (s: Span): string => `${s.attempt_id}\u0000${s.span_id}`;

export class MemoryStorage implements Storage {
  private readonly rollouts = new Map<string, Rollout>();
  private readonly running = new Set<string>();
  private readonly attempts = new Map<string, Attempt[]>();
  private attemptCount = 0;
  private readonly queue = new IdQueue();
  private readonly spans = new Map<string, SpanBucket>();
  private spanCount = 0;
  private spanBytes = 0;
  private readonly evicted = new Set<string>();
  private readonly sequences = new Map<string, number>();
  private readonly resources = new Map<string, ResourcesUpdate>();
  private latestResourcesId: string | null = null;
  private readonly workers = new Map<string, Worker>();
  private readonly mutex = new AsyncMutex();
  private readonly txApi: StorageTx;

  constructor(private readonly options: MemoryStorageOptions) {
    this.txApi = this.makeTx();
  }

  /** Every transaction, reads included, runs under one mutex, so nobody sees a half-done change. */
  tx<T>(_mode: TxMode, fn: (t: StorageTx) => Promise<T>): Promise<T> {
    return this.mutex.run(() => fn(this.txApi));
  }

  statistics(): Partial<StoreStatistics> {
    return {
      total_span_bytes: this.spanBytes,
      eviction_threshold_bytes: this.options.evictionThresholdBytes,
      safe_threshold_bytes: this.options.safeThresholdBytes,
      memory_capacity_bytes: this.options.memoryCapacityBytes,
    };
  }

  async close(): Promise<void> {}

  /** Drops the cached latest-resources id (tests check the fallback to the largest update_time). */
  forgetLatestResources(): void {
    this.latestResourcesId = null;
  }

  private setRollout(r: Rollout): Rollout {
    deepFreeze(r);
    this.rollouts.set(r.rollout_id, r);
    if (r.status === "preparing" || r.status === "running") this.running.add(r.rollout_id);
    else this.running.delete(r.rollout_id);
    return r;
  }

  private latestAttempt(rolloutId: string): Attempt | null {
    const list = this.attempts.get(rolloutId);
    return list && list.length > 0 ? list[list.length - 1]! : null;
  }

  /** §3.6: after a batch, drop whole rollouts' spans, oldest rollout first, until at or below the safe threshold. */
  private evictIfNeeded(): void {
    const { evictionThresholdBytes, safeThresholdBytes } = this.options;
    if (this.spanBytes <= evictionThresholdBytes) return;
    const candidates = [...this.spans.keys()]
      .map((id) => ({ id, start: this.rollouts.get(id)?.start_time ?? Number.NEGATIVE_INFINITY }))
      .sort((a, b) => a.start - b.start);
    for (const { id } of candidates) {
      if (this.spanBytes <= safeThresholdBytes) break;
      const bucket = this.spans.get(id)!;
      this.spans.delete(id);
      this.spanCount -= bucket.spans.length;
      this.spanBytes -= bucket.bytes;
      if (bucket.bytes > 0) this.evicted.add(id);
    }
  }

  private candidates<K extends CollectionName>(collection: K, spec: QuerySpec): Iterable<Rows[K]> {
    const rid = pinnedValue(spec, "rollout_id");
    switch (collection) {
      case "rollouts": {
        if (typeof rid === "string") {
          const r = this.rollouts.get(rid);
          return (r ? [r] : []) as Rows[K][];
        }
        return this.rollouts.values() as Iterable<Rows[K]>;
      }
      case "attempts":
        if (typeof rid === "string") return (this.attempts.get(rid) ?? []) as Rows[K][];
        return [...this.attempts.values()].flat() as Rows[K][];
      case "spans":
        if (typeof rid === "string") {
          if (this.evicted.has(rid)) throw new EvictedError(`Spans for rollout ${rid} have been evicted`);
          return (this.spans.get(rid)?.spans ?? []) as Rows[K][];
        }
        return [...this.spans.values()].flatMap((b) => b.spans) as Rows[K][];
      case "resources":
        return this.resources.values() as Iterable<Rows[K]>;
      case "workers":
        return this.workers.values() as Iterable<Rows[K]>;
      default:
        throw new Error(`unknown collection ${String(collection)}`);
    }
  }

  private makeTx(): StorageTx {
    const s = this;
    return {
      async getRollout(id) {
        return s.rollouts.get(id) ?? null;
      },
      async insertRollouts(rows) {
        for (const r of rows) s.setRollout(r);
      },
      async updateRollout(id, patch: RolloutPatchRow) {
        const old = s.rollouts.get(id);
        if (!old) throw new Error(`updateRollout: rollout ${id} does not exist`);
        return s.setRollout({ ...old, ...patch });
      },
      async listRunningRollouts() {
        return [...s.running].map((id) => s.rollouts.get(id)!);
      },
      async getAttempt(rid, aid) {
        return s.attempts.get(rid)?.find((a) => a.attempt_id === aid) ?? null;
      },
      async getLatestAttempt(rid) {
        return s.latestAttempt(rid);
      },
      async getLatestAttempts(ids) {
        const out = new Map<string, Attempt>();
        for (const id of ids) {
          const a = s.latestAttempt(id);
          if (a) out.set(id, a);
        }
        return out;
      },
      async countAttempts(rid) {
        return s.attempts.get(rid)?.length ?? 0;
      },
      async insertAttempt(a) {
        deepFreeze(a);
        const list = s.attempts.get(a.rollout_id);
        if (list) list.push(a);
        else s.attempts.set(a.rollout_id, [a]);
        s.attemptCount++;
      },
      async updateAttempt(rid, aid, patch: AttemptPatchRow) {
        const list = s.attempts.get(rid);
        const i = list ? list.findLastIndex((a) => a.attempt_id === aid) : -1;
        if (!list || i < 0) throw new Error(`updateAttempt: attempt ${aid} of rollout ${rid} does not exist`);
        const next = deepFreeze({ ...list[i]!, ...patch });
        list[i] = next;
        return next;
      },
      async pushQueue(ids) {
        for (const id of ids) s.queue.push(id);
      },
      async popQueue(n) {
        const out: string[] = [];
        while (out.length < n) {
          const id = s.queue.shift();
          if (id === undefined) break;
          out.push(id);
        }
        return out;
      },
      async queueHas(id) {
        return s.queue.has(id);
      },
      async insertSpans(spans) {
        const inserted: Span[] = [];
        for (const span of spans) {
          let bucket = s.spans.get(span.rollout_id);
          const key = spanKey(span);
          if (bucket?.keys.has(key)) continue;
          if (!bucket) {
            bucket = { spans: [], keys: new Set(), bytes: 0 };
            s.spans.set(span.rollout_id, bucket);
          }
          deepFreeze(span);
          bucket.spans.push(span);
          bucket.keys.add(key);
          const bytes = Math.max(0, s.options.spanSizeEstimator(span) || 0);
          bucket.bytes += bytes;
          s.spanBytes += bytes;
          s.spanCount++;
          inserted.push(span);
        }
        if (inserted.length > 0) s.evictIfNeeded();
        return inserted;
      },
      async incSequence(rid, n) {
        const v = (s.sequences.get(rid) ?? 0) + n;
        s.sequences.set(rid, v);
        return v;
      },
      async chmaxSequence(rid, value) {
        const v = Math.max(s.sequences.get(rid) ?? 0, value);
        s.sequences.set(rid, v);
        return v;
      },
      async getResources(id) {
        return s.resources.get(id) ?? null;
      },
      async putResources(r) {
        deepFreeze(r);
        s.resources.set(r.resources_id, r);
        s.latestResourcesId = r.resources_id;
      },
      async getLatestResources() {
        if (s.latestResourcesId !== null) {
          const r = s.resources.get(s.latestResourcesId);
          if (r) return r;
        }
        let best: ResourcesUpdate | null = null;
        for (const r of s.resources.values()) if (!best || r.update_time > best.update_time) best = r;
        return best;
      },
      async getWorker(id) {
        return s.workers.get(id) ?? null;
      },
      async upsertWorker(id, patch: WorkerPatchRow) {
        const next = deepFreeze({ ...(s.workers.get(id) ?? newWorker(id)), ...patch });
        s.workers.set(id, next);
        return next;
      },
      async query<K extends CollectionName>(collection: K, spec: QuerySpec): Promise<PaginatedResult<Rows[K]>> {
        return runQuery(s.candidates(collection, spec), spec);
      },
      async counts() {
        return {
          rollouts: s.rollouts.size,
          attempts: s.attemptCount,
          spans: s.spanCount,
          resources: s.resources.size,
          workers: s.workers.size,
        };
      },
    };
  }
}

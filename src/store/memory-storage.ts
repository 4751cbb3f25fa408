/**
 * `Storage` in process memory: maps indexed the way the core reads them (attempts by rollout, spans by
 * rollout, watchdog deadlines by time, an O(1) queue), plus span memory accounting and eviction
 * (see memory.ts). Every stored row is deep-frozen, so rows are returned without copying.
 */
import type { Attempt, PaginatedResult, ResourcesUpdate, Rollout, Span, StoreStatistics, Worker } from "../types/index.ts";
import { EvictedError, newWorker } from "../types/index.ts";
import { DeadlineIndex } from "./deadline-index.ts";
import { countedSequenceId, watchdogDeadline } from "./decisions.ts";
import { AsyncMutex } from "./mutex.ts";
import { deepFreeze } from "./owned.ts";
import { pinnedValue, runQuery, type QuerySpec } from "./query.ts";
import type {
  AttemptPatchRow,
  CollectionName,
  DueRollout,
  MaybePromise,
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

/** A FIFO of rollout entries with O(1) push and pop; membership is counted on the entry itself. */
class EntryQueue {
  private items: (RolloutEntry | undefined)[] = [];
  private head = 0;

  push(e: RolloutEntry): void {
    this.items.push(e);
    e.queued++;
  }

  shift(): RolloutEntry | undefined {
    if (this.head >= this.items.length) return undefined;
    const e = this.items[this.head]!;
    this.items[this.head++] = undefined;
    // Drop the consumed prefix now and then, so memory stays proportional to the live queue.
    if (this.head >= 4096 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    e.queued--;
    return e;
  }
}

/**
 * Everything kept per rollout, behind one map lookup: the row, its attempts by sequence id, how often
 * it sits in the queue, its spans (with duplicate keys and size) and its span sequence counter.
 */
interface RolloutEntry {
  row: Rollout;
  attempts: Attempt[];
  queued: number;
  spans: Span[];
  /**
   * Span ids per attempt id, for duplicate checks once a rollout has many spans (no concatenated key
   * strings to allocate and keep); null while a scan of `spans` is cheaper.
   */
  spanKeys: Map<string, Set<string>> | null;
  spanBytes: number;
  evicted: boolean;
  sequence: number;
}

export class MemoryStorage implements Storage {
  private readonly entries = new Map<string, RolloutEntry>();
  /** Each rollout's watchdog deadline (decisions.ts), kept current by every rollout and attempt write. */
  private readonly deadlines = new DeadlineIndex();
  private attemptCount = 0;
  private readonly queue = new EntryQueue();
  private spanCount = 0;
  private spanBytes = 0;
  /** Sequence counters of rollout ids the store does not know (getNextSpanSequenceId checks nothing). */
  private readonly orphanSequences = new Map<string, number>();
  private readonly resources = new Map<string, ResourcesUpdate>();
  private latestResourcesId: string | null = null;
  private readonly workers = new Map<string, Worker>();
  private readonly mutex = new AsyncMutex();
  private readonly txApi: StorageTx;

  constructor(private readonly options: MemoryStorageOptions) {
    this.txApi = this.makeTx();
  }

  /** Every transaction, reads included, runs under one mutex, so nobody sees a half-done change. */
  tx<T>(_mode: TxMode, fn: (t: StorageTx) => MaybePromise<T>): Promise<T> {
    return this.mutex.run(() => fn(this.txApi));
  }

  /**
   * The same transaction without the mutex: JS runs `fn` to its end before anything else, so it is
   * atomic by itself, unless an asynchronous `tx` holds the lock between its steps (then it must wait,
   * which a synchronous call cannot: that mix is refused).
   */
  txSync<T>(_mode: TxMode, fn: (t: StorageTx) => T): T {
    if (this.mutex.busy) throw new Error("MemoryStorage.txSync: an asynchronous transaction holds the lock; use tx");
    const out = fn(this.txApi);
    if (typeof (out as { then?: unknown } | null)?.then === "function") {
      throw new Error("MemoryStorage.txSync: the transaction returned a promise; use tx");
    }
    return out;
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

  /** The frozen row `{...old, ...patch}`: the old row is frozen already, so only the patch's values need it. */
  private static updated<T extends object>(old: T, patch: object): T {
    for (const k in patch) deepFreeze((patch as Record<string, unknown>)[k]);
    return Object.freeze({ ...old, ...patch });
  }

  /**
   * The next rollout / attempt row as one explicit literal: a single hidden class per row type, where
   * the generic spread above sees many row and patch shapes and goes megamorphic on the hot path.
   * (Rows have exactly their model's keys; a patch never holds `undefined` as a value.)
   */
  private static updatedRollout(r: Rollout, p: RolloutPatchRow): Rollout {
    return Object.freeze({
      rollout_id: r.rollout_id,
      input: p.input !== undefined ? deepFreeze(p.input) : r.input,
      start_time: r.start_time,
      end_time: p.end_time !== undefined ? p.end_time : r.end_time,
      mode: p.mode !== undefined ? p.mode : r.mode,
      resources_id: p.resources_id !== undefined ? p.resources_id : r.resources_id,
      status: p.status !== undefined ? p.status : r.status,
      config: p.config !== undefined ? deepFreeze(p.config) : r.config,
      metadata: p.metadata !== undefined ? deepFreeze(p.metadata) : r.metadata,
    });
  }

  private static updatedAttempt(a: Attempt, p: AttemptPatchRow): Attempt {
    return Object.freeze({
      rollout_id: a.rollout_id,
      attempt_id: a.attempt_id,
      sequence_id: a.sequence_id,
      start_time: a.start_time,
      end_time: p.end_time !== undefined ? p.end_time : a.end_time,
      status: p.status !== undefined ? p.status : a.status,
      worker_id: p.worker_id !== undefined ? p.worker_id : a.worker_id,
      last_heartbeat_time: p.last_heartbeat_time !== undefined ? p.last_heartbeat_time : a.last_heartbeat_time,
      metadata: p.metadata !== undefined ? deepFreeze(p.metadata) : a.metadata,
    });
  }

  private setRow(e: RolloutEntry, r: Rollout): Rollout {
    e.row = r;
    this.rewatch(e);
    return r;
  }

  /** After a change to the rollout or its latest attempt: its watchdog deadline again. */
  private rewatch(e: RolloutEntry): void {
    this.deadlines.set(e.row.rollout_id, watchdogDeadline(e.row, MemoryStorage.latest(e)));
  }

  private entry(rolloutId: string, what: string): RolloutEntry {
    const e = this.entries.get(rolloutId);
    if (!e) throw new Error(`${what}: rollout ${rolloutId} does not exist`);
    return e;
  }

  /** Rollouts with at most this many spans find duplicates by a scan: no index to build and keep. */
  private static readonly SCAN_SPANS = 32;

  private static hasSpan(e: RolloutEntry, attemptId: string, spanId: string): boolean {
    if (e.spanKeys === null) {
      if (e.spans.length <= MemoryStorage.SCAN_SPANS) {
        for (const x of e.spans) if (x.span_id === spanId && x.attempt_id === attemptId) return true;
        return false;
      }
      e.spanKeys = new Map();
      for (const x of e.spans) MemoryStorage.indexSpan(e.spanKeys, x);
    }
    return e.spanKeys.get(attemptId)?.has(spanId) ?? false;
  }

  private static indexSpan(keys: Map<string, Set<string>>, span: Span): void {
    let ids = keys.get(span.attempt_id);
    if (ids === undefined) keys.set(span.attempt_id, (ids = new Set()));
    ids.add(span.span_id);
  }

  private static latest(e: RolloutEntry | undefined): Attempt | null {
    return e && e.attempts.length > 0 ? e.attempts[e.attempts.length - 1]! : null;
  }

  /** After a batch, drop whole rollouts' spans, oldest rollout first, until at or below the safe threshold. */
  private evictIfNeeded(): void {
    const { evictionThresholdBytes, safeThresholdBytes } = this.options;
    if (this.spanBytes <= evictionThresholdBytes) return;
    const candidates = [...this.entries.values()].filter((e) => e.spans.length > 0).sort((a, b) => a.row.start_time - b.row.start_time);
    for (const e of candidates) {
      if (this.spanBytes <= safeThresholdBytes) break;
      this.spanCount -= e.spans.length;
      this.spanBytes -= e.spanBytes;
      if (e.spanBytes > 0) e.evicted = true;
      e.spans = [];
      e.spanKeys = null;
      e.spanBytes = 0;
    }
  }

  private candidates<K extends CollectionName>(collection: K, spec: QuerySpec): Iterable<Rows[K]> {
    const rid = pinnedValue(spec, "rollout_id");
    const pinned = typeof rid === "string" ? this.entries.get(rid) : undefined;
    switch (collection) {
      case "rollouts": {
        if (typeof rid === "string") return (pinned ? [pinned.row] : []) as Rows[K][];
        return [...this.entries.values()].map((e) => e.row) as Rows[K][];
      }
      case "attempts":
        if (typeof rid === "string") return (pinned?.attempts ?? []) as Rows[K][];
        return [...this.entries.values()].flatMap((e) => e.attempts) as Rows[K][];
      case "spans":
        if (typeof rid === "string") {
          if (pinned?.evicted) throw new EvictedError(`Spans for rollout ${rid} have been evicted`);
          return (pinned?.spans ?? []) as Rows[K][];
        }
        return [...this.entries.values()].flatMap((e) => e.spans) as Rows[K][];
      case "resources":
        return this.resources.values() as Iterable<Rows[K]>;
      case "workers":
        return this.workers.values() as Iterable<Rows[K]>;
      default:
        throw new Error(`unknown collection ${String(collection)}`);
    }
  }

  private getSequence(rolloutId: string): number {
    const e = this.entries.get(rolloutId);
    return e ? e.sequence : (this.orphanSequences.get(rolloutId) ?? 0);
  }

  private setSequence(rolloutId: string, v: number): number {
    const e = this.entries.get(rolloutId);
    if (e) e.sequence = v;
    else this.orphanSequences.set(rolloutId, v);
    return v;
  }

  private insertRolloutRows(rows: Rollout[]): void {
    for (const r of rows) {
      const e: RolloutEntry = { row: r, attempts: [], queued: 0, spans: [], spanKeys: null, spanBytes: 0, evicted: false, sequence: 0 };
      deepFreeze(r);
      // No attempt yet, so no watchdog deadline.
      this.entries.set(r.rollout_id, e);
      // A counter handed out before the rollout existed carries over.
      const orphan = this.orphanSequences.get(r.rollout_id);
      if (orphan !== undefined) {
        this.orphanSequences.delete(r.rollout_id);
        e.sequence = orphan;
      }
    }
  }

  private findAttempt(rolloutId: string, attemptId: string): Attempt | null {
    const list = this.entries.get(rolloutId)?.attempts;
    if (!list) return null;
    // Usually the latest one is meant: search from the end.
    for (let i = list.length - 1; i >= 0; i--) if (list[i]!.attempt_id === attemptId) return list[i]!;
    return null;
  }

  private latestAttempts(rolloutIds: readonly string[]): Map<string, Attempt> {
    const out = new Map<string, Attempt>();
    for (const id of rolloutIds) {
      const a = MemoryStorage.latest(this.entries.get(id));
      if (a) out.set(id, a);
    }
    return out;
  }

  private patchAttempt(rolloutId: string, attemptId: string, patch: AttemptPatchRow): Attempt {
    const e = this.entry(rolloutId, "updateAttempt");
    const list = e.attempts;
    let i = list.length - 1;
    while (i >= 0 && list[i]!.attempt_id !== attemptId) i--;
    if (i < 0) throw new Error(`updateAttempt: attempt ${attemptId} of rollout ${rolloutId} does not exist`);
    const next = MemoryStorage.updatedAttempt(list[i]!, patch);
    list[i] = next;
    if (i === list.length - 1) this.rewatch(e);
    return next;
  }

  private popQueued(n: number): string[] {
    const out: string[] = [];
    while (out.length < n) {
      const e = this.queue.shift();
      if (e === undefined) break;
      out.push(e.row.rollout_id);
    }
    return out;
  }

  /** The spans not stored yet, counted (sizes, sequence counters) and indexed; then eviction if over the threshold. */
  private insertSpanRows(spans: Span[]): Span[] {
    // Sizes first: a throwing custom estimator must leave the store unchanged.
    const estimate = this.options.spanSizeEstimator;
    const sizes = spans.length === 1 ? null : spans.map((sp) => Math.max(0, estimate(sp) || 0));
    const firstSize = sizes === null ? Math.max(0, estimate(spans[0]!) || 0) : 0;
    const inserted: Span[] = [];
    for (let i = 0; i < spans.length; i++) {
      const span = spans[i]!;
      const e = this.entry(span.rollout_id, "insertSpans");
      const counted = countedSequenceId(span.sequence_id);
      if (counted > e.sequence) e.sequence = counted;
      if (MemoryStorage.hasSpan(e, span.attempt_id, span.span_id)) continue;
      deepFreeze(span);
      e.spans.push(span);
      if (e.spanKeys !== null) MemoryStorage.indexSpan(e.spanKeys, span);
      const bytes = sizes === null ? firstSize : sizes[i]!;
      e.spanBytes += bytes;
      this.spanBytes += bytes;
      this.spanCount++;
      inserted.push(span);
    }
    if (inserted.length > 0) this.evictIfNeeded();
    return inserted;
  }

  private latestResources(): ResourcesUpdate | null {
    if (this.latestResourcesId !== null) {
      const r = this.resources.get(this.latestResourcesId);
      if (r) return r;
    }
    let best: ResourcesUpdate | null = null;
    for (const r of this.resources.values()) if (!best || r.update_time > best.update_time) best = r;
    return best;
  }

  private rowCounts(): Record<CollectionName, number> {
    return {
      rollouts: this.entries.size,
      attempts: this.attemptCount,
      spans: this.spanCount,
      resources: this.resources.size,
      workers: this.workers.size,
    };
  }

  /** The operations every transaction gets: one object, built once, over this storage's maps. */
  private makeTx(): StorageTx {
    const s = this;
    return {
      getRollout(id) {
        return s.entries.get(id)?.row ?? null;
      },
      insertRollouts(rows) {
        s.insertRolloutRows(rows);
      },
      updateRollout(id, patch: RolloutPatchRow) {
        const e = s.entry(id, "updateRollout");
        return s.setRow(e, MemoryStorage.updatedRollout(e.row, patch));
      },
      listDueRollouts(now: number, after: DueRollout | null, limit: number) {
        return s.deadlines.due(now, after, limit);
      },
      getAttempt(rid, aid) {
        return s.findAttempt(rid, aid);
      },
      getLatestAttempt(rid) {
        return MemoryStorage.latest(s.entries.get(rid));
      },
      getLatestAttempts(ids) {
        return s.latestAttempts(ids);
      },
      countAttempts(rid) {
        return s.entries.get(rid)?.attempts.length ?? 0;
      },
      insertAttempt(a) {
        const e = s.entry(a.rollout_id, "insertAttempt");
        e.attempts.push(deepFreeze(a));
        s.attemptCount++;
        s.rewatch(e);
      },
      updateAttempt(rid, aid, patch: AttemptPatchRow) {
        return s.patchAttempt(rid, aid, patch);
      },
      pushQueue(ids) {
        for (const id of ids) s.queue.push(s.entry(id, "pushQueue"));
      },
      popQueue(n) {
        return s.popQueued(n);
      },
      queueHas(id) {
        return (s.entries.get(id)?.queued ?? 0) > 0;
      },
      insertSpans(spans) {
        return s.insertSpanRows(spans);
      },
      incSequence(rid, n) {
        return s.setSequence(rid, s.getSequence(rid) + n);
      },
      getResources(id) {
        return s.resources.get(id) ?? null;
      },
      putResources(r) {
        deepFreeze(r);
        s.resources.set(r.resources_id, r);
        s.latestResourcesId = r.resources_id;
      },
      getLatestResources() {
        return s.latestResources();
      },
      getWorker(id) {
        return s.workers.get(id) ?? null;
      },
      upsertWorker(id, patch: WorkerPatchRow) {
        const next = MemoryStorage.updated(s.workers.get(id) ?? Object.freeze(newWorker(id)), patch);
        s.workers.set(id, next);
        return next;
      },
      query<K extends CollectionName>(collection: K, spec: QuerySpec): PaginatedResult<Rows[K]> {
        return runQuery(s.candidates(collection, spec), spec);
      },
      counts() {
        return s.rowCounts();
      },
    };
  }
}

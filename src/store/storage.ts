/**
 * The storage contract under `LightningStoreCore` (core.ts). The core holds ALL store semantics
 * (status machine, retries, watchdog, worker sync, heartbeats, validation, defaults); a backend only
 * stores rows and answers queries. Implementations: `MemoryStorage` (memory-storage.ts) and the libSQL one.
 *
 * Contract for implementers (e.g. libSQL with drizzle):
 * - **Atomicity.** The core does every multi-step operation inside ONE `tx(mode, fn)` call and never
 *   nests `tx` calls. A "w" transaction must be serialisable with respect to every other transaction
 *   of this storage (libSQL: `BEGIN IMMEDIATE` / a write transaction; memory: one async mutex). If `fn`
 *   throws, a backend with rollback rolls back; the core validates all input before its first write, so
 *   a backend without rollback (memory) still ends unchanged on errors the core raises itself.
 *   An "r" transaction may run concurrently with others but must see committed data only.
 * - **Rows in, rows out.** Rows are the snake_case wire models of src/types (Rollout, Attempt, Span,
 *   ResourcesUpdate, Worker) with every field present (null, never undefined). The core hands over rows
 *   it owns (already validated and copied); a backend may keep them as they are. Rows a backend returns
 *   must not be mutated later by the backend (memory freezes them; SQL returns fresh objects), because
 *   the core returns them to callers (docs/departures.md#9). Unknown extra keys of a Span must round-trip.
 * - **Not found** is `null` from getters (never an exception); the core turns it into NotFoundError.
 *   `update*` are only called for rows the core has just read in the same transaction.
 * - **Ordering.** The queue is FIFO. `insertSpans` returns the inserted spans in input order. Queries
 *   without a sort return insertion order (SQL: by an autoincrement rowid).
 * - **Queries** come as a `QuerySpec` (query.ts): `must` and `where` field conditions (exact / within /
 *   contains; a null operand adds no condition; `within: []` matches nothing; `contains` is a substring
 *   test on strings and element membership on JSON arrays), `logic` and/or over `where` (no conditions =
 *   match all), a stable sort where a null `*_time` sorts last in asc and other nulls first, and
 *   limit/offset (-1 = all, 0 = none, `total` = matches before paging). `runQuery` in query.ts is the
 *   reference implementation; a SQL backend pushes the same description down.
 * - **Errors**: throw typed errors from src/types/errors.ts; `EvictedError` from `query("spans")` when a
 *   backend dropped that rollout's spans (memory eviction).
 * - **Sync or async.** Every `StorageTx` method may return its value directly (memory does: fewer
 *   promises on the hot path) or a promise (SQL); the core awaits only promises (its transaction
 *   bodies are generators that yield each call's result, see core/driver.ts), so a synchronous backend runs a
 *   whole transaction without a single microtask. Such a backend may also offer `txSync`.
 */
import type { Attempt, PaginatedResult, ResourcesUpdate, Rollout, Span, StoreStatistics, Worker } from "../types/index.ts";
import type { QuerySpec } from "./query.ts";

/** The row type of each queryable collection. */
export interface Rows {
  rollouts: Rollout;
  attempts: Attempt;
  spans: Span;
  resources: ResourcesUpdate;
  workers: Worker;
}
export type CollectionName = keyof Rows;

/** A rollout the watchdog must judge, with the deadline that orders it (a page's last one is the next page's cursor). */
export interface DueRollout {
  rollout_id: string;
  deadline: number;
}

/**
 * Fields set when a row is made and never changed: a rollout's id and start_time, an attempt's ids,
 * sequence_id and start_time, a worker's id. Every other field (a new one too) may change, and only the
 * fields of a patch are written.
 */
export const ROLLOUT_FIXED_FIELDS = ["rollout_id", "start_time"] as const;
export const ATTEMPT_FIXED_FIELDS = ["rollout_id", "attempt_id", "sequence_id", "start_time"] as const;
export const WORKER_FIXED_FIELDS = ["worker_id"] as const;
/** Fields the core changes on a rollout / attempt / worker. */
export type RolloutPatchRow = Partial<Omit<Rollout, (typeof ROLLOUT_FIXED_FIELDS)[number]>>;
export type AttemptPatchRow = Partial<Omit<Attempt, (typeof ATTEMPT_FIXED_FIELDS)[number]>>;
export type WorkerPatchRow = Partial<Omit<Worker, (typeof WORKER_FIXED_FIELDS)[number]>>;

/** A backend answers synchronously (memory, the embedded libSQL driver) or with a promise (remote SQL); the core awaits either. */
export type MaybePromise<T> = T | Promise<T>;

export interface StorageTx {
  // Rollouts
  getRollout(rolloutId: string): MaybePromise<Rollout | null>;
  /** Inserts new rollouts (ids are fresh; a duplicate id is a bug in the caller). */
  insertRollouts(rollouts: Rollout[]): MaybePromise<void>;
  /** Writes only the given fields of an existing rollout; returns the row after the update. */
  updateRollout(rolloutId: string, patch: RolloutPatchRow): MaybePromise<Rollout>;
  /**
   * The watchdog's page: rollouts whose watchdog deadline (decisions.ts `watchdogDeadline` of the rollout
   * and its latest attempt) is before `now`, ordered by (deadline, rollout_id), only those after `after`,
   * at most `limit`. The backend keeps each rollout's deadline current on every rollout and attempt
   * write and indexes it, so this reads only what is due: nothing at all when no rollout has a limit.
   */
  listDueRollouts(now: number, after: DueRollout | null, limit: number): MaybePromise<DueRollout[]>;

  // Attempts (primary key: rollout_id + attempt_id; sequence_id counts up from 1 within a rollout)
  getAttempt(rolloutId: string, attemptId: string): MaybePromise<Attempt | null>;
  /** The attempt with the highest sequence_id, or null. */
  getLatestAttempt(rolloutId: string): MaybePromise<Attempt | null>;
  /** The latest attempt of each given rollout that has one. */
  getLatestAttempts(rolloutIds: readonly string[]): MaybePromise<Map<string, Attempt>>;
  countAttempts(rolloutId: string): MaybePromise<number>;
  insertAttempt(attempt: Attempt): MaybePromise<void>;
  updateAttempt(rolloutId: string, attemptId: string, patch: AttemptPatchRow): MaybePromise<Attempt>;

  // Queue of rollout ids (FIFO)
  pushQueue(rolloutIds: readonly string[]): MaybePromise<void>;
  /** Removes and returns up to `n` ids from the front. */
  popQueue(n: number): MaybePromise<string[]>;
  queueHas(rolloutId: string): MaybePromise<boolean>;

  /**
   * Inserts spans, skipping any whose (rollout_id, attempt_id, span_id) already exists, in the store
   * or earlier in the same batch. Returns the inserted spans in input order. Raises each rollout's
   * sequence counter to the largest `sequence_id` among the given spans, skipped ones included (an
   * explicit id counts even when its span is a duplicate, as upstream's chmax before the insert), but
   * never past MAX_COUNTED_SEQUENCE_ID (decisions.ts countedSequenceId).
   */
  insertSpans(spans: Span[]): MaybePromise<Span[]>;

  // Per-rollout span sequence counters (a missing counter counts as 0)
  /** Adds `n` to the counter and returns the new value. */
  incSequence(rolloutId: string, n: number): MaybePromise<number>;

  // Resources
  getResources(resourcesId: string): MaybePromise<ResourcesUpdate | null>;
  /** Inserts or replaces a snapshot and makes it the latest one. */
  putResources(resources: ResourcesUpdate): MaybePromise<void>;
  /** The snapshot added or updated most recently (by write order, then update_time). */
  getLatestResources(): MaybePromise<ResourcesUpdate | null>;

  // Workers
  getWorker(workerId: string): MaybePromise<Worker | null>;
  /** Writes only the given fields; a missing worker is created with the model defaults first. */
  upsertWorker(workerId: string, patch: WorkerPatchRow): MaybePromise<Worker>;

  query<K extends CollectionName>(collection: K, spec: QuerySpec): MaybePromise<PaginatedResult<Rows[K]>>;
  /** Row counts per collection (exact: evicted spans are not counted). */
  counts(): MaybePromise<Record<CollectionName, number>>;
}

export type TxMode = "r" | "w";

export interface Storage {
  /** Runs `fn` atomically (see the contract above). */
  tx<T>(mode: TxMode, fn: (t: StorageTx) => MaybePromise<T>): Promise<T>;
  /**
   * Optional, for a backend whose `StorageTx` answers synchronously (memory): runs `fn` at once and
   * returns its result (or throws its error), with the same atomicity as `tx`. `fn` must not return a
   * promise. When present, the core uses it instead of `tx` (no promise, lock or tick per transaction).
   */
  txSync?<T>(mode: TxMode, fn: (t: StorageTx) => T): T;
  /** Backend-specific statistics merged into the store's (e.g. memory thresholds). */
  statistics?(): Partial<StoreStatistics>;
  /**
   * True when other processes may write to the same data (e.g. a shared libSQL server): the core then
   * also polls in `waitForRollouts`, because their completions raise no local event.
   */
  readonly sharedWriters?: boolean;
  /**
   * True when a transaction costs far more than a row (SQL): the core then coalesces span writes of
   * concurrent callers into one transaction (group commit). `insertSpans` must then return the very
   * span objects it was given, so the core can hand each caller its own.
   */
  readonly groupCommit?: boolean;
  close(): Promise<void>;
}

/**
 * `LightningStoreCore`: every semantic of the LightningStore (spec store.md §3, DECISIONS rows 3-6, 9-11,
 * 16) on top of a `Storage` backend. Backends only keep rows; this class decides.
 *
 * Choices recorded here (where upstream's behaviour is a quirk or the spec leaves a choice):
 * - Validation comes before the first write of every call, so a call that throws leaves the store as it
 *   was. `addManySpans` validates the whole batch (schemas, rollouts, attempts) before inserting any span
 *   (upstream inserts earlier groups before failing on a later one). `addSpan`/`addOtelSpan` raise the
 *   sequence counter only once the span passed validation (upstream bumps it first).
 * - A metadata-only (or worker/heartbeat-only) `updateAttempt` leaves the rollout status alone (row 5);
 *   only a status change of the latest attempt re-derives it, and never for a `cancelled` rollout (row 16).
 * - A rollout that leaves a finished status (startAttempt, a manual status change, a retry) gets
 *   `end_time = null` (row 6): an unfinished rollout has no end time.
 * - A span on the latest attempt moves a queuing/requeuing/preparing rollout to `running` (row 4) only
 *   when that attempt is running after the heartbeat; a late span for a timed-out or finished attempt
 *   stores the span and its heartbeat but does not revive the rollout.
 * - The watchdog only judges latest attempts that are preparing, running or unresponsive (a finished
 *   attempt is never turned into `timeout`), and a verdict equal to the current status writes nothing.
 * - ConflictError: `updateAttempt` may not set `preparing` on an attempt that has left it (an attempt
 *   is prepared once; a new try is a new attempt). Every other transition is allowed, as upstream: its
 *   tests move ended attempts (succeeded -> failed) and set rollout statuses by hand (queuing -> running).
 * - Duplicate spans return null (addSpan) or are left out (addManySpans); nothing is logged.
 */
import type {
  Attempt,
  AttemptedRollout,
  Clock,
  EnqueueRolloutRequest,
  FilterLogic,
  NamedResources,
  NamedResourcesInput,
  PaginatedResult,
  ResourcesUpdate,
  Rollout,
  RolloutStatus,
  Span,
  StoreCapabilities,
  StoreStatistics,
  Worker,
} from "../types/index.ts";
import {
  RolloutStatus as RolloutStatusEnum,
  WorkerStatus as WorkerStatusEnum,
  ConflictError,
  NotFoundError,
  SPAN_FIELDS,
  ValidationError,
  isQueuing,
  isTerminal,
  newAttemptId,
  newResourcesId,
  newRolloutId,
  systemClock,
} from "../types/index.ts";
import {
  ATTEMPT_FIELDS,
  RESOURCES_FIELDS,
  ROLLOUT_FIELDS,
  WORKER_FIELDS,
  type AttemptPatch,
  type LightningStore,
  type OtelReadableSpanLike,
  type PageOptions,
  type ResourcesQuery,
  type RolloutOptions,
  type RolloutPatch,
  type RolloutQuery,
  type SpanQuery,
  type StartRolloutOptions,
  type WaitOptions,
  type WorkerQuery,
} from "./base.ts";
import {
  attemptStatusEnds,
  heartbeatPatch,
  rolloutStatusAfterSpan,
  rolloutStatusFromAttempt,
  watchdogVerdict,
  workerPatchForAttempt,
  workerPatchForEmptyDequeue,
} from "./decisions.ts";
import {
  attemptPatch,
  filterLogic,
  heartbeatStats,
  namedResources,
  ownedSpan,
  pageOf,
  requireId,
  rolloutDraft,
  rolloutPatch,
  statusList,
  stringList,
  type Page,
  type RolloutDraft,
} from "./inputs.ts";
import { platform } from "../platform/index.ts";
import { spanFromOpenTelemetry } from "./otel-span.ts";
import type { FieldOps } from "./query.ts";
import { nextTurn } from "./next-turn.ts";
import type { AttemptPatchRow, CollectionName, DueRollout, MaybePromise, RolloutPatchRow, Storage, StorageTx, TxMode } from "./storage.ts";

export interface LightningStoreCoreOptions {
  clock?: Clock;
  /** Minimum seconds between two lazy watchdog scans (§3.2); <= 0 scans before every eligible call. Default 10. */
  scanDebounceSeconds?: number;
  /** Also run the watchdog on a timer every so many seconds (DECISIONS row 11); null/absent: lazy only. */
  watchdogIntervalSeconds?: number | null;
  /** How often `waitForRollouts` re-reads when the storage has other writers (`sharedWriters`). Default 1 s. */
  waitPollSeconds?: number;
}

/** Side effects to run once a transaction has committed. */
interface Effects {
  finished: string[];
}

/** Spans of one add-span call; `allocate`: give its single span the next sequence id. */
interface SpanRequest {
  spans: Span[];
  allocate: boolean;
}
interface QueuedSpanRequest extends SpanRequest {
  resolve(spans: Span[]): void;
  reject(err: unknown): void;
}

/** A (rollout, attempt) that spans of one write name, and whether it got a span. */
interface SpanTarget {
  attempt: Attempt;
  beat: boolean;
}

/**
 * The span targets of one write, in first-seen order. Nearly every write names a single (rollout,
 * attempt): that one is found without building a key string or a map.
 */
class SpanTargets {
  readonly list: SpanTarget[] = [];
  private index: Map<string, SpanTarget> | null = null;

  private static key(rolloutId: string, attemptId: string): string {
    return `${rolloutId}\u0000${attemptId}`;
  }

  get(rolloutId: string, attemptId: string): SpanTarget | undefined {
    if (this.index !== null) return this.index.get(SpanTargets.key(rolloutId, attemptId));
    const only = this.list[0];
    return only !== undefined && only.attempt.attempt_id === attemptId && only.attempt.rollout_id === rolloutId ? only : undefined;
  }

  add(attempt: Attempt): void {
    const target: SpanTarget = { attempt, beat: false };
    this.list.push(target);
    if (this.list.length === 1) return;
    this.index ??= new Map(this.list.slice(0, -1).map((x) => [SpanTargets.key(x.attempt.rollout_id, x.attempt.attempt_id), x]));
    this.index.set(SpanTargets.key(attempt.rollout_id, attempt.attempt_id), target);
  }

  /** Marks the targets that really got one of `inserted`. */
  noteBeats(inserted: readonly Span[]): void {
    for (let i = 0; i < inserted.length; i++) this.get(inserted[i]!.rollout_id, inserted[i]!.attempt_id)!.beat = true;
  }
}

/** The spans of every request that did not fail, in order. */
function acceptedSpans(results: readonly (Span[] | Error)[]): Span[] {
  if (results.length === 1) {
    const only = results[0]!;
    return only instanceof Error ? [] : only;
  }
  const all: Span[] = [];
  for (const r of results) if (!(r instanceof Error)) for (const s of r) all.push(s);
  return all;
}

/** Leaves each request only its spans that went in (insertSpans returns the very objects it was given). */
function keepInserted(results: (Span[] | Error)[], inserted: readonly Span[]): (Span[] | Error)[] {
  const kept = new Set(inserted);
  for (let i = 0; i < results.length; i++) {
    const r = results[i]!;
    if (!(r instanceof Error)) results[i] = r.filter((s) => kept.has(s));
  }
  return results;
}

/** The spans of the only request of a write, or its error. */
function onlyResult(results: (Span[] | Error)[]): Span[] {
  const r = results[0]!;
  if (r instanceof Error) throw r;
  return r;
}

/**
 * Rollouts the watchdog judges per transaction; the event loop gets a turn between pages. Small enough
 * that a page of expiries on the libSQL store takes a few milliseconds.
 */
const WATCHDOG_PAGE = 100;

/** Spans per group-commit transaction (a single bigger request still goes in whole). */
const MAX_GROUP_COMMIT_SPANS = 5000;

const ALL_FALSE_CAPABILITIES: StoreCapabilities = { thread_safe: false, async_safe: true, zero_copy: false, otlp_traces: false };

const withAttempt = (rollout: Rollout, attempt: Attempt): AttemptedRollout => Object.freeze({ ...rollout, attempt });

/**
 * A transaction body. It yields the result of each `StorageTx` call (a value or a promise) and gets
 * the value back: `const r: Rollout | null = yield t.getRollout(id)`. `drive` resumes it at once on a
 * value and waits only on a promise, so over a synchronous backend (memory) a whole transaction runs
 * without one microtask, promise or async frame, while an asynchronous one (SQL) is awaited as before.
 * (The yielded value is typed `any`: each `yield` names its type where it is assigned.)
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type TxBody<T> = Generator<unknown, T, any>;

const isThenable = <T>(v: T | PromiseLike<T>): v is PromiseLike<T> =>
  typeof v === "object" && v !== null && typeof (v as { then?: unknown }).then === "function";

/** Runs a body to its end: synchronously while it yields values, then asynchronously from its first promise. */
function drive<T>(body: TxBody<T>): MaybePromise<T> {
  let r = body.next();
  while (!r.done) {
    if (isThenable(r.value)) return driveAsync(body, r.value);
    r = body.next(r.value);
  }
  return r.value;
}

async function driveAsync<T>(body: TxBody<T>, pending: PromiseLike<unknown>): Promise<T> {
  for (;;) {
    let r: IteratorResult<unknown, T>;
    let value: unknown;
    let failed = false;
    try {
      value = await pending;
    } catch (e) {
      failed = true;
      value = e;
    }
    // A rejected storage call is thrown inside the body, where it may be caught.
    r = failed ? body.throw(value) : body.next(value);
    while (!r.done && !isThenable(r.value)) r = body.next(r.value);
    if (r.done) return r.value;
    pending = r.value as PromiseLike<unknown>;
  }
}

export class LightningStoreCore implements LightningStore {
  readonly capabilities: StoreCapabilities;
  protected readonly clock: Clock;
  private readonly debounce: number;
  private lastScan: number;
  private scanning = false;
  private readonly startedAt: number;
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly waitPollMs: number;
  private timer: ReturnType<typeof setInterval> | null = null;
  private closed = false;

  constructor(
    protected readonly storage: Storage,
    private readonly storeName: string,
    options: LightningStoreCoreOptions = {},
    capabilities: StoreCapabilities = ALL_FALSE_CAPABILITIES,
  ) {
    this.capabilities = Object.freeze({ ...capabilities });
    this.clock = options.clock ?? systemClock;
    this.debounce = options.scanDebounceSeconds ?? 10;
    this.startedAt = this.clock.now();
    // The first scan may run at once.
    this.lastScan = this.startedAt - this.debounce;
    this.waitPollMs = (options.waitPollSeconds ?? 1) * 1000;
    const interval = options.watchdogIntervalSeconds;
    if (interval !== undefined && interval !== null) {
      if (!(interval > 0)) throw new ValidationError("watchdogIntervalSeconds must be > 0", ["watchdogIntervalSeconds"]);
      this.startWatchdogTimer(interval);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Watchdog (§3.2)

  /**
   * The debounce gate: true when a lazy scan may run now, and then it records the scan time, so
   * among concurrent callers exactly one wins.
   */
  protected shouldScan(): boolean {
    if (this.scanning) return false;
    if (this.debounce <= 0) return true;
    const now = this.clock.now();
    if (now - this.lastScan < this.debounce) return false;
    this.lastScan = now;
    return true;
  }

  /** Runs before the public methods listed in §3.2; undefined (nothing to wait for) most of the time. */
  private healthcheck(): Promise<unknown> | undefined {
    return this.shouldScan() ? this.runWatchdog() : undefined;
  }

  /**
   * Runs a transaction body (a generator method of this class, see `TxBody`) with its arguments:
   * through the storage's `txSync` when it has one, else its `tx`.
   */
  private tx<T, A extends unknown[]>(
    mode: TxMode,
    body: (this: LightningStoreCore, t: StorageTx, ...args: A) => TxBody<T>,
    ...args: A
  ): MaybePromise<T> {
    if (this.storage.txSync !== undefined) return this.storage.txSync(mode, (t) => drive(body.call(this, t, ...args)) as T);
    return this.storage.tx(mode, (t) => drive(body.call(this, t, ...args)));
  }

  /** A transaction of a single storage call (nothing to drive). */
  private call<T>(mode: TxMode, fn: (t: StorageTx) => MaybePromise<T>): MaybePromise<T> {
    if (this.storage.txSync !== undefined) return this.storage.txSync(mode, fn as (t: StorageTx) => T);
    return this.storage.tx(mode, fn);
  }

  /**
   * Scans now (no debounce) and marks latest attempts that ran past `timeout_seconds` or stayed silent
   * past `unresponsive_seconds`. Returns how many attempts changed. A scan already in progress makes
   * this a no-op (0).
   *
   * It reads only rollouts whose deadline (decisions.ts `watchdogDeadline`, indexed by the storage) has
   * passed, a page at a time, and gives the event loop a turn between pages: with no rollout due, a scan
   * is one index lookup however many rollouts are unfinished, and a burst of expiries never holds the
   * loop for more than a page (docs/store.md).
   */
  async runWatchdog(): Promise<number> {
    if (this.scanning) return 0;
    this.scanning = true;
    try {
      const now = this.clock.now();
      let changed = 0;
      let after: DueRollout | null = null;
      for (;;) {
        // Look in a read transaction first and open a write transaction only for rollouts that are due
        // (a SQL write transaction is expensive and blocks writers).
        const cursor = after;
        const due: DueRollout[] = await this.call("r", (t) => t.listDueRollouts(now, cursor, WATCHDOG_PAGE));
        if (due.length === 0) break;
        const fx: Effects = { finished: [] };
        changed += await this.tx("w", this.watchdogApplyTx, due.map((d) => d.rollout_id), fx);
        this.notifyFinished(fx);
        if (due.length < WATCHDOG_PAGE) break;
        // Rollouts judged and left alone (a heartbeat came in between) stay behind the cursor.
        after = due[due.length - 1]!;
        await nextTurn();
      }
      return changed;
    } finally {
      this.scanning = false;
    }
  }

  /**
   * The status the watchdog gives a rollout's latest attempt now, or null. Only a still-running
   * rollout's preparing/running/unresponsive attempt is judged (a finished attempt never becomes
   * `timeout`), and a verdict equal to the current status changes nothing.
   */
  private dueVerdict(rollout: Rollout, attempt: Attempt | null, now: number): "timeout" | "unresponsive" | null {
    if (!attempt || !(rollout.status === "preparing" || rollout.status === "running")) return null;
    if (!(attempt.status === "preparing" || attempt.status === "running" || attempt.status === "unresponsive")) return null;
    const verdict = watchdogVerdict(attempt, rollout.config, now);
    return verdict === attempt.status ? null : verdict;
  }

  private startWatchdogTimer(seconds: number): void {
    const timer = setInterval(() => {
      this.runWatchdog().catch((err: unknown) => {
        // A timer has no caller to throw to: report it loudly rather than lose it.
        console.error("[lightning-ts] background watchdog scan failed:", err);
      });
    }, seconds * 1000);
    // Do not keep the process alive just for the watchdog.
    platform.unrefTimer(timer);
    this.timer = timer;
  }

  // ---------------------------------------------------------------------------------------------
  // Shared write steps (always inside a transaction)

  private newRollout(d: RolloutDraft, status: RolloutStatus, now: number, latestResources: string | null): Rollout {
    return {
      rollout_id: newRolloutId(),
      input: d.input,
      start_time: now,
      end_time: null,
      mode: d.mode,
      resources_id: d.resources_id ?? latestResources,
      status,
      config: d.config,
      metadata: d.metadata,
    };
  }

  private newAttempt(rolloutId: string, sequenceId: number, workerId: string | null, now: number): Attempt {
    return {
      rollout_id: rolloutId,
      attempt_id: newAttemptId(),
      sequence_id: sequenceId,
      start_time: now,
      end_time: null,
      status: "preparing",
      worker_id: workerId,
      last_heartbeat_time: null,
      metadata: null,
    };
  }

  private *latestResourcesId(t: StorageTx): TxBody<string | null> {
    const r: ResourcesUpdate | null = yield t.getLatestResources();
    return r?.resources_id ?? null;
  }

  /**
   * Writes a new rollout status (with `end_time` rules) and runs the post-update hook: a queuing status
   * puts the rollout back in the queue (once), a finished status wakes waiters after commit.
   */
  private *setRolloutStatus(
    t: StorageTx,
    rollout: Rollout,
    status: RolloutStatus,
    now: number,
    fx: Effects,
    extra?: RolloutPatchRow,
  ): TxBody<Rollout> {
    const patch: RolloutPatchRow = extra === undefined ? { status } : { ...extra, status };
    if (isTerminal(status)) patch.end_time = now;
    else if (rollout.end_time !== null) patch.end_time = null;
    const updated: Rollout = yield t.updateRollout(rollout.rollout_id, patch);
    if (isQueuing(status) && !(yield t.queueHas(rollout.rollout_id))) yield t.pushQueue([rollout.rollout_id]);
    if (isTerminal(status)) fx.finished.push(rollout.rollout_id);
    return updated;
  }

  /** §3.5.9 steps 2-4, shared by updateAttempt and the watchdog. */
  private *applyAttemptPatch(
    t: StorageTx,
    rollout: Rollout,
    attempt: Attempt,
    patch: AttemptPatch,
    now: number,
    fx: Effects,
  ): TxBody<Attempt> {
    const row: AttemptPatchRow = {};
    let sync = false;
    if (patch.worker_id !== undefined) {
      row.worker_id = patch.worker_id;
      if (patch.worker_id) sync = true;
    }
    if (patch.status !== undefined) {
      row.status = patch.status;
      if (attemptStatusEnds(patch.status)) row.end_time = now;
      if (row.worker_id ?? attempt.worker_id) sync = true;
    }
    if (patch.last_heartbeat_time !== undefined) row.last_heartbeat_time = patch.last_heartbeat_time;
    if (patch.metadata !== undefined) row.metadata = patch.metadata;
    const updated: Attempt = yield t.updateAttempt(attempt.rollout_id, attempt.attempt_id, row);
    if (patch.status !== undefined && rollout.status !== "cancelled") {
      const latest: Attempt | null = yield t.getLatestAttempt(rollout.rollout_id);
      if (latest?.attempt_id === attempt.attempt_id) {
        const derived = rolloutStatusFromAttempt(updated, rollout.config);
        if (derived !== rollout.status) yield* this.setRolloutStatus(t, rollout, derived, now, fx);
      }
    }
    if (sync && updated.worker_id) yield t.upsertWorker(updated.worker_id, workerPatchForAttempt(updated, now));
    return updated;
  }

  private notifyFinished(fx: Effects): void {
    for (const id of fx.finished) {
      const set = this.waiters.get(id);
      if (set) for (const wake of [...set]) wake();
    }
  }

  /** The rollout just read (`yield t.getRollout(id)`), or NotFoundError. */
  private static found(r: Rollout | null, rolloutId: string): Rollout {
    if (!r) throw new NotFoundError(`Rollout ${rolloutId} not found`, "rollout", rolloutId);
    return r;
  }

  // ---------------------------------------------------------------------------------------------
  // Rollouts and the queue

  async startRollout(input: unknown, options?: StartRolloutOptions): Promise<AttemptedRollout> {
    const draft = rolloutDraft(input, options);
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.tx("w", this.startRolloutTx, draft);
  }

  async enqueueRollout(input: unknown, options?: RolloutOptions): Promise<Rollout> {
    const draft = rolloutDraft(input, options);
    const hc = this.healthcheck();
    if (hc) await hc;
    const rollouts = this.enqueueDrafts([draft]);
    return (isThenable(rollouts) ? await rollouts : rollouts)[0]!;
  }

  async enqueueManyRollouts(requests: EnqueueRolloutRequest[]): Promise<Rollout[]> {
    if (!Array.isArray(requests)) throw new ValidationError("requests must be a list", []);
    const drafts = requests.map((r, i) => {
      if (r === null || typeof r !== "object") throw new ValidationError(`request #${i} must be an object`, [i]);
      const { input, ...options } = r;
      try {
        return rolloutDraft(input, options);
      } catch (e) {
        if (e instanceof ValidationError) for (const issue of e.issues) issue.path.unshift(i);
        throw e;
      }
    });
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.enqueueDrafts(drafts);
  }

  private enqueueDrafts(drafts: RolloutDraft[]): MaybePromise<Rollout[]> {
    if (drafts.length === 0) return [];
    return this.tx("w", this.enqueueTx, drafts);
  }

  async dequeueRollout(options?: { worker_id?: string | null }): Promise<AttemptedRollout | null> {
    // Not through dequeueManyRollouts: one async layer less on the runner's hot path.
    const claimed = this.dequeue(1, options?.worker_id);
    return (isThenable(claimed) ? await claimed : claimed)[0] ?? null;
  }

  async dequeueManyRollouts(options?: { limit?: number; worker_id?: string | null }): Promise<AttemptedRollout[]> {
    const limit = options?.limit ?? 1;
    if (!Number.isInteger(limit)) throw new ValidationError("limit must be an integer", ["limit"]);
    return this.dequeue(limit, options?.worker_id);
  }

  /** Checks the worker id, runs the healthcheck and claims up to `limit` rollouts. */
  private dequeue(limit: number, worker: string | null | undefined): MaybePromise<AttemptedRollout[]> {
    const workerId = worker ?? null;
    if (workerId !== null) requireId(workerId, "worker_id");
    if (limit <= 0) return [];
    const hc = this.healthcheck();
    if (hc) return hc.then(() => this.tx("w", this.dequeueTx, limit, workerId));
    return this.tx("w", this.dequeueTx, limit, workerId);
  }

  async startAttempt(rolloutId: string, options?: { worker_id?: string | null }): Promise<AttemptedRollout> {
    requireId(rolloutId, "rollout_id");
    const workerId = options?.worker_id ?? null;
    if (workerId !== null) requireId(workerId, "worker_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    const fx: Effects = { finished: [] };
    return this.tx("w", this.startAttemptTx, rolloutId, workerId, fx);
  }

  async queryRollouts(query: RolloutQuery = {}): Promise<PaginatedResult<Rollout | AttemptedRollout>> {
    const page = pageOf(query, ROLLOUT_FIELDS);
    const logic = filterLogic(query.filter_logic);
    const where: Record<string, FieldOps> = {
      status: { within: statusList(query.status_in ?? query.status, RolloutStatusEnum, "status_in") },
      rollout_id: { within: stringList(query.rollout_id_in ?? query.rollout_ids, "rollout_id_in"), contains: query.rollout_id_contains ?? null },
    };
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.tx("r", this.queryRolloutsTx, where, logic, page);
  }

  async getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null> {
    requireId(rolloutId, "rollout_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.tx("r", this.getRolloutByIdTx, rolloutId);
  }

  async updateRollout(rolloutId: string, patch: RolloutPatch): Promise<Rollout> {
    requireId(rolloutId, "rollout_id");
    const p = rolloutPatch(patch);
    const hc = this.healthcheck();
    if (hc) await hc;
    const fx: Effects = { finished: [] };
    const result = await this.tx("w", this.updateRolloutTx, rolloutId, p, fx);
    this.notifyFinished(fx);
    return result;
  }

  private getRollouts(ids: readonly string[]): MaybePromise<(Rollout | null)[]> {
    return this.tx("r", this.getRolloutsTx, ids);
  }

  async waitForRollouts(options: WaitOptions): Promise<Rollout[]> {
    const ids = stringList(options?.rollout_ids, "rollout_ids");
    if (ids === null) throw new ValidationError("rollout_ids is required", ["rollout_ids"]);
    for (const id of ids) requireId(id, "rollout_ids");
    const timeout = options.timeout ?? null;
    if (timeout !== null && (typeof timeout !== "number" || Number.isNaN(timeout))) {
      throw new ValidationError("timeout must be a number of seconds or null", ["timeout"]);
    }
    const signal = options.signal;
    signal?.throwIfAborted();
    await this.healthcheck();

    const unique = [...new Set(ids)];
    const finishedNow = new Map<string, Rollout>();
    // Listen before the first read, so a completion between the read and the wait is not missed.
    const notified = new Set<string>(unique);
    let wake: (() => void) | null = null;
    const listeners = new Map<string, () => void>();
    for (const id of unique) {
      const fn = () => {
        notified.add(id);
        wake?.();
      };
      listeners.set(id, fn);
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      set.add(fn);
    }
    const pending = new Set<string>(unique);
    const deadline = timeout === null ? null : Date.now() + Math.max(0, timeout) * 1000;
    let timer: ReturnType<typeof setTimeout> | null = null;
    let onAbort: (() => void) | null = null;
    try {
      for (;;) {
        const toRead = [...notified].filter((id) => pending.has(id));
        notified.clear();
        if (toRead.length > 0) {
          const rows = await this.getRollouts(toRead);
          toRead.forEach((id, i) => {
            const r = rows[i];
            // Unknown ids are left out at once; finished ones are done.
            if (!r) pending.delete(id);
            else if (isTerminal(r.status)) {
              pending.delete(id);
              finishedNow.set(id, r);
            }
          });
        }
        if (pending.size === 0 || (deadline !== null && Date.now() >= deadline)) break;
        if (notified.size > 0) continue;
        await new Promise<void>((resolve, reject) => {
          wake = resolve;
          const waitMs = deadline === null ? null : Math.max(0, deadline - Date.now());
          const pollMs = this.storage.sharedWriters ? this.waitPollMs : null;
          const ms = waitMs === null ? pollMs : pollMs === null ? waitMs : Math.min(waitMs, pollMs);
          if (ms !== null) {
            timer = setTimeout(() => {
              if (pollMs !== null) for (const id of pending) notified.add(id);
              resolve();
            }, ms);
          }
          if (signal) {
            // It may have fired while we were reading: an abort event is not sent twice.
            if (signal.aborted) return reject(signal.reason);
            onAbort = () => reject(signal.reason);
            signal.addEventListener("abort", onAbort, { once: true });
          }
        }).finally(() => {
          wake = null;
          if (timer !== null) clearTimeout(timer);
          timer = null;
          if (signal && onAbort) signal.removeEventListener("abort", onAbort);
          onAbort = null;
        });
      }
    } finally {
      for (const [id, fn] of listeners) {
        const set = this.waiters.get(id);
        set?.delete(fn);
        if (set && set.size === 0) this.waiters.delete(id);
      }
    }
    // Read the finished ones again: a rollout restarted meanwhile (startAttempt) is not reported.
    const finalRows = await this.getRollouts([...finishedNow.keys()]);
    const done = new Map<string, Rollout>();
    for (const r of finalRows) if (r && isTerminal(r.status)) done.set(r.rollout_id, r);
    return ids.filter((id) => done.has(id)).map((id) => done.get(id)!);
  }

  // ---------------------------------------------------------------------------------------------
  // Attempts

  async queryAttempts(rolloutId: string, query: PageOptions = {}): Promise<PaginatedResult<Attempt>> {
    requireId(rolloutId, "rollout_id");
    const page = pageOf(query, ATTEMPT_FIELDS, "sequence_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.call("r", (t) => t.query("attempts", { must: { rollout_id: { exact: rolloutId } }, ...page }));
  }

  async getLatestAttempt(rolloutId: string): Promise<Attempt | null> {
    requireId(rolloutId, "rollout_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.call("r", (t) => t.getLatestAttempt(rolloutId));
  }

  async updateAttempt(rolloutId: string, attemptId: string | "latest", patch: AttemptPatch): Promise<Attempt> {
    requireId(rolloutId, "rollout_id");
    requireId(attemptId, "attempt_id");
    const p = attemptPatch(patch);
    const hc = this.healthcheck();
    if (hc) await hc;
    const fx: Effects = { finished: [] };
    const pending = this.tx("w", this.updateAttemptTx, rolloutId, attemptId, p, fx);
    const result = isThenable(pending) ? await pending : pending;
    this.notifyFinished(fx);
    return result;
  }

  // ---------------------------------------------------------------------------------------------
  // Resources

  async addResources(resources: NamedResourcesInput): Promise<ResourcesUpdate> {
    const parsed = namedResources(resources);
    return this.tx("w", this.addResourcesTx, parsed);
  }

  async updateResources(resourcesId: string, resources: NamedResourcesInput): Promise<ResourcesUpdate> {
    requireId(resourcesId, "resources_id");
    const parsed = namedResources(resources);
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.tx("w", this.updateResourcesTx, resourcesId, parsed);
  }

  async getLatestResources(): Promise<ResourcesUpdate | null> {
    return this.call("r", (t) => t.getLatestResources());
  }

  async getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null> {
    requireId(resourcesId, "resources_id");
    return this.call("r", (t) => t.getResources(resourcesId));
  }

  async queryResources(query: ResourcesQuery = {}): Promise<PaginatedResult<ResourcesUpdate>> {
    const page = pageOf(query, RESOURCES_FIELDS);
    const where = { resources_id: { exact: query.resources_id ?? null, contains: query.resources_id_contains ?? null } };
    return this.call("r", (t) => t.query("resources", { where, logic: "and", ...page }));
  }

  // ---------------------------------------------------------------------------------------------
  // Spans

  async getNextSpanSequenceId(rolloutId: string, attemptId: string): Promise<number> {
    requireId(rolloutId, "rollout_id");
    requireId(attemptId, "attempt_id");
    // Per rollout; nothing is checked (upstream): the attempt id only documents who asks.
    return this.call("w", (t) => t.incSequence(rolloutId, 1));
  }

  async getManySpanSequenceIds(pairs: readonly (readonly [string, string])[]): Promise<number[]> {
    if (!Array.isArray(pairs)) throw new ValidationError("pairs must be a list", []);
    const perRollout = new Map<string, number>();
    for (const pair of pairs) {
      if (!Array.isArray(pair) || pair.length !== 2) throw new ValidationError("each pair must be [rollout_id, attempt_id]", []);
      requireId(pair[0], "rollout_id");
      requireId(pair[1], "attempt_id");
      perRollout.set(pair[0], (perRollout.get(pair[0]) ?? 0) + 1);
    }
    if (pairs.length === 0) return [];
    return this.tx("w", this.sequenceIdsTx, perRollout, pairs);
  }

  async addSpan(span: Span): Promise<Span | null> {
    const done = this.insertSpans([ownedSpan(span)], false);
    return (isThenable(done) ? await done : done)[0] ?? null;
  }

  async addManySpans(spans: Span[]): Promise<Span[]> {
    if (!Array.isArray(spans)) throw new ValidationError("spans must be a list", []);
    return this.insertSpans(spans.map((s, i) => ownedSpan(s, i)), false);
  }

  async addOtelSpan(rolloutId: string, attemptId: string, span: OtelReadableSpanLike, sequenceId?: number | null): Promise<Span | null> {
    requireId(rolloutId, "rollout_id");
    requireId(attemptId, "attempt_id");
    if (sequenceId !== undefined && sequenceId !== null && !Number.isInteger(sequenceId)) {
      throw new ValidationError("sequence_id must be an integer", ["sequence_id"]);
    }
    // Convert and validate first (with a placeholder sequence id), so a bad span changes nothing.
    const converted = ownedSpan(spanFromOpenTelemetry(span, rolloutId, attemptId, sequenceId ?? 0));
    return (await this.insertSpans([converted], sequenceId === undefined || sequenceId === null))[0] ?? null;
  }

  /**
   * The add-span path for validated, owned spans. With a storage that asks for group commit
   * (`storage.groupCommit`, e.g. libSQL, where a transaction costs far more than a row), span writes of
   * concurrent callers are coalesced: requests queue while a batch is being written, and the next batch
   * takes all of them in ONE transaction (one multi-row insert); each caller's promise settles only after
   * that commit. Otherwise each call is its own transaction.
   */
  private insertSpans(spans: Span[], allocate: boolean): MaybePromise<Span[]> {
    if (spans.length === 0) return [];
    if (!this.storage.groupCommit) {
      const results = this.writeSpanRequests([{ spans, allocate }]);
      return isThenable(results) ? results.then(onlyResult) : onlyResult(results);
    }
    return new Promise<Span[]>((resolve, reject) => {
      this.spanQueue.push({ spans, allocate, resolve, reject });
      this.spanWriter ??= this.drainSpanQueue();
    });
  }

  private readonly spanQueue: QueuedSpanRequest[] = [];
  private spanWriter: Promise<void> | null = null;

  private async drainSpanQueue(): Promise<void> {
    // Let every caller of the current tick join the first batch.
    await Promise.resolve();
    while (this.spanQueue.length > 0) {
      let n = 0;
      let take = 0;
      while (take < this.spanQueue.length && (take === 0 || n + this.spanQueue[take]!.spans.length <= MAX_GROUP_COMMIT_SPANS)) {
        n += this.spanQueue[take]!.spans.length;
        take++;
      }
      const batch = this.spanQueue.splice(0, take);
      try {
        this.settleSpanRequests(batch, await this.writeSpanRequests(batch));
      } catch (e) {
        if (batch.length === 1) batch[0]!.reject(e);
        // The batch rolled back as a whole: retry each request alone, so only a bad one fails.
        else {
          for (const r of batch) {
            let out: (Span[] | Error)[];
            try {
              out = await this.writeSpanRequests([r]);
            } catch (err) {
              r.reject(err);
              continue;
            }
            this.settleSpanRequests([r], out);
          }
        }
      }
    }
    this.spanWriter = null;
  }

  private settleSpanRequests(batch: readonly QueuedSpanRequest[], results: readonly (Span[] | Error)[]): void {
    batch.forEach((r, i) => {
      const out = results[i]!;
      if (out instanceof Error) r.reject(out);
      else r.resolve(out);
    });
  }

  /**
   * Writes span requests in one transaction: check every rollout and attempt (a request naming a
   * missing one fails alone, before anything is written for it), raise the sequence counters, insert,
   * then one heartbeat per (rollout, attempt) that really got a span. A request with `allocate` has one
   * span, which gets the next sequence id of its rollout inside the transaction.
   * Returns, per request, the spans it inserted or the error it failed with.
   */
  private writeSpanRequests(requests: readonly SpanRequest[]): MaybePromise<(Span[] | Error)[]> {
    const fx: Effects = { finished: [] };
    const results = this.tx("w", this.writeSpansTx, requests, fx);
    if (isThenable(results)) return this.notifyAfter(results, fx);
    this.notifyFinished(fx);
    return results;
  }

  /** Wakes waiters once an asynchronous transaction has committed. */
  private async notifyAfter<T>(committed: PromiseLike<T>, fx: Effects): Promise<T> {
    const out = await committed;
    this.notifyFinished(fx);
    return out;
  }

  async querySpans(rolloutId: string, query: SpanQuery = {}): Promise<PaginatedResult<Span>> {
    requireId(rolloutId, "rollout_id");
    const page = pageOf(query, SPAN_FIELDS, "sequence_id");
    const logic = filterLogic(query.filter_logic);
    const where: Record<string, FieldOps> = {
      trace_id: { exact: query.trace_id ?? null, contains: query.trace_id_contains ?? null },
      span_id: { exact: query.span_id ?? null, contains: query.span_id_contains ?? null },
      parent_id: { exact: query.parent_id ?? null, contains: query.parent_id_contains ?? null },
      name: { exact: query.name ?? null, contains: query.name_contains ?? null },
    };
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.tx("r", this.querySpansTx, rolloutId, query, page, where, logic);
  }

  // ---------------------------------------------------------------------------------------------
  // Workers

  async updateWorker(workerId: string, stats?: Record<string, unknown>): Promise<Worker> {
    requireId(workerId, "worker_id");
    const owned = stats === undefined ? undefined : heartbeatStats(stats);
    return this.call("w", (t) => {
      const now = this.clock.now();
      return t.upsertWorker(
        workerId,
        owned === undefined ? { last_heartbeat_time: now } : { last_heartbeat_time: now, heartbeat_stats: owned },
      );
    });
  }

  async getWorkerById(workerId: string): Promise<Worker | null> {
    requireId(workerId, "worker_id");
    return this.call("r", (t) => t.getWorker(workerId));
  }

  async queryWorkers(query: WorkerQuery = {}): Promise<PaginatedResult<Worker>> {
    const page = pageOf(query, WORKER_FIELDS);
    const logic = filterLogic(query.filter_logic);
    const where: Record<string, FieldOps> = {
      status: { within: statusList(query.status_in, WorkerStatusEnum, "status_in") },
      worker_id: { contains: query.worker_id_contains ?? null },
    };
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.call("r", (t) => t.query("workers", { where, logic, ...page }));
  }

  // ---------------------------------------------------------------------------------------------

  async statistics(): Promise<StoreStatistics> {
    const c = await this.call("r", (t) => t.counts());
    return {
      name: this.storeName,
      total_rollouts: c.rollouts,
      total_attempts: c.attempts,
      total_spans: c.spans,
      total_resources: c.resources,
      total_workers: c.workers,
      uptime: this.clock.now() - this.startedAt,
      ...this.storage.statistics?.(),
    };
  }

  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    if (this.closed) return;
    this.closed = true;
    await this.storage.close();
  }

  // ---------------------------------------------------------------------------------------------
  // Transaction bodies (generator methods: a generator closure per call would cost a new hidden class)

  private *watchdogApplyTx(t: StorageTx, due: string[], fx: Effects): TxBody<number> {
    const now = this.clock.now();
    const latest: Map<string, Attempt> = yield t.getLatestAttempts(due);
    let n = 0;
    for (const id of due) {
      // Judged again on fresh rows: a span or an update may have landed in between.
      const rollout: Rollout | null = yield t.getRollout(id);
      const attempt = latest.get(id) ?? null;
      const verdict = rollout && this.dueVerdict(rollout, attempt, now);
      if (!verdict || !rollout || !attempt) continue;
      yield* this.applyAttemptPatch(t, rollout, attempt, { status: verdict }, now, fx);
      n++;
    }
    return n;
  }

  private *startRolloutTx(t: StorageTx, draft: RolloutDraft): TxBody<AttemptedRollout> {
    const now = this.clock.now();
    const rollout = this.newRollout(draft, "preparing", now, draft.resources_id ?? (yield* this.latestResourcesId(t)));
    const attempt = this.newAttempt(rollout.rollout_id, 1, draft.worker_id, now);
    yield t.insertRollouts([rollout]);
    yield t.insertAttempt(attempt);
    if (draft.worker_id) yield t.upsertWorker(draft.worker_id, workerPatchForAttempt(attempt, now));
    return withAttempt(rollout, attempt);
  }

  private *enqueueTx(t: StorageTx, drafts: RolloutDraft[]): TxBody<Rollout[]> {
    const now = this.clock.now();
    const latest = drafts.some((d) => d.resources_id === null) ? yield* this.latestResourcesId(t) : null;
    const rollouts = drafts.map((d) => this.newRollout(d, "queuing", now, latest));
    yield t.insertRollouts(rollouts);
    yield t.pushQueue(rollouts.map((r) => r.rollout_id));
    return rollouts;
  }

  private *dequeueTx(t: StorageTx, limit: number, workerId: string | null): TxBody<AttemptedRollout[]> {
    const now = this.clock.now();
    const claimed: AttemptedRollout[] = [];
    while (claimed.length < limit) {
      const ids: string[] = yield t.popQueue(limit - claimed.length);
      if (ids.length === 0) break;
      for (const id of ids) {
        const rollout: Rollout | null = yield t.getRollout(id);
        // Changed while it waited (cancelled, finished, started by hand): drop the queue entry.
        if (!rollout || !isQueuing(rollout.status)) continue;
        const count: number = yield t.countAttempts(id);
        const attempt = this.newAttempt(id, count + 1, workerId, now);
        yield t.insertAttempt(attempt);
        const updated: Rollout = yield t.updateRollout(id, { status: "preparing" });
        claimed.push(withAttempt(updated, attempt));
      }
    }
    if (workerId) {
      const last = claimed[claimed.length - 1];
      if (last) yield t.upsertWorker(workerId, workerPatchForAttempt(last.attempt, now, true));
      else yield t.upsertWorker(workerId, workerPatchForEmptyDequeue(yield t.getWorker(workerId), now));
    }
    return claimed;
  }

  private *startAttemptTx(t: StorageTx, rolloutId: string, workerId: string | null, fx: Effects): TxBody<AttemptedRollout> {
    const rollout = LightningStoreCore.found(yield t.getRollout(rolloutId), rolloutId);
    const now = this.clock.now();
    // max_attempts does not limit manual attempts (upstream MUST).
    const count: number = yield t.countAttempts(rolloutId);
    const attempt = this.newAttempt(rolloutId, count + 1, workerId, now);
    yield t.insertAttempt(attempt);
    const updated = yield* this.setRolloutStatus(t, rollout, "preparing", now, fx);
    if (workerId) yield t.upsertWorker(workerId, workerPatchForAttempt(attempt, now));
    return withAttempt(updated, attempt);
  }

  private *queryRolloutsTx(t: StorageTx, where: Record<string, FieldOps>, logic: FilterLogic, page: Page): TxBody<PaginatedResult<Rollout | AttemptedRollout>> {
    const result: PaginatedResult<Rollout> = yield t.query("rollouts", { where, logic, ...page });
    const latest: Map<string, Attempt> = yield t.getLatestAttempts(result.items.map((r) => r.rollout_id));
    const items = result.items.map((r) => {
      const a = latest.get(r.rollout_id);
      return a ? withAttempt(r, a) : r;
    });
    return { ...result, items };
  }

  private *getRolloutByIdTx(t: StorageTx, rolloutId: string): TxBody<Rollout | AttemptedRollout | null> {
    const r: Rollout | null = yield t.getRollout(rolloutId);
    if (!r) return null;
    const a: Attempt | null = yield t.getLatestAttempt(rolloutId);
    return a ? withAttempt(r, a) : r;
  }

  private *updateRolloutTx(t: StorageTx, rolloutId: string, p: RolloutPatch, fx: Effects): TxBody<Rollout> {
    const rollout: Rollout | null = yield t.getRollout(rolloutId);
    if (!rollout) {
      throw new NotFoundError(
        `Rollout ${rolloutId} not found (Item does not exist with primary key(s): rollout_id='${rolloutId}')`,
        "rollout",
        rolloutId,
      );
    }
    const row: RolloutPatchRow = {};
    if (p.input !== undefined) row.input = p.input;
    if (p.mode !== undefined) row.mode = p.mode;
    if (p.resources_id !== undefined) row.resources_id = p.resources_id;
    if (p.config !== undefined) row.config = p.config as Rollout["config"];
    if (p.metadata !== undefined) row.metadata = p.metadata;
    if (p.status === undefined) return (yield t.updateRollout(rolloutId, row)) as Rollout;
    return yield* this.setRolloutStatus(t, rollout, p.status, this.clock.now(), fx, row);
  }

  private *getRolloutsTx(t: StorageTx, ids: readonly string[]): TxBody<(Rollout | null)[]> {
    const rows: (Rollout | null)[] = [];
    for (const id of ids) rows.push(yield t.getRollout(id));
    return rows;
  }

  private *updateAttemptTx(t: StorageTx, rolloutId: string, attemptId: string, p: AttemptPatch, fx: Effects): TxBody<Attempt> {
    const rollout = LightningStoreCore.found(yield t.getRollout(rolloutId), rolloutId);
    const latest: Attempt | null = yield t.getLatestAttempt(rolloutId);
    if (!latest) throw new NotFoundError(`No attempts found for rollout ${rolloutId}`, "attempt", attemptId);
    const attempt: Attempt | null =
      attemptId === "latest" || attemptId === latest.attempt_id ? latest : yield t.getAttempt(rolloutId, attemptId);
    if (!attempt) throw new NotFoundError(`Attempt ${attemptId} not found for rollout ${rolloutId}`, "attempt", attemptId);
    if (p.status === "preparing" && attempt.status !== "preparing") {
      throw new ConflictError(
        `Attempt ${attempt.attempt_id} of rollout ${rolloutId} is ${attempt.status} and cannot go back to preparing; start a new attempt instead`,
      );
    }
    return yield* this.applyAttemptPatch(t, rollout, attempt, p, this.clock.now(), fx);
  }

  private *addResourcesTx(t: StorageTx, parsed: NamedResources): TxBody<ResourcesUpdate> {
    const now = this.clock.now();
    const row: ResourcesUpdate = { resources_id: newResourcesId(), create_time: now, update_time: now, version: 1, resources: parsed };
    yield t.putResources(row);
    return row;
  }

  private *updateResourcesTx(t: StorageTx, resourcesId: string, parsed: NamedResources): TxBody<ResourcesUpdate> {
    const now = this.clock.now();
    const old: ResourcesUpdate | null = yield t.getResources(resourcesId);
    const row: ResourcesUpdate = old
      ? { ...old, update_time: now, version: old.version + 1, resources: parsed }
      : { resources_id: resourcesId, create_time: now, update_time: now, version: 1, resources: parsed };
    yield t.putResources(row);
    return row;
  }

  private *sequenceIdsTx(t: StorageTx, perRollout: Map<string, number>, pairs: readonly (readonly [string, string])[]): TxBody<number[]> {
    const next = new Map<string, number>();
    for (const [rid, n] of perRollout) next.set(rid, ((yield t.incSequence(rid, n)) as number) - n + 1);
    return pairs.map(([rid]) => {
      const v = next.get(rid)!;
      next.set(rid, v + 1);
      return v;
    });
  }

  private *writeSpansTx(t: StorageTx, requests: readonly SpanRequest[], fx: Effects): TxBody<(Span[] | Error)[]> {
    const targets = new SpanTargets();
    const out: (Span[] | Error)[] = [];
    for (let r = 0; r < requests.length; r++) {
      const req = requests[r]!;
      try {
        // Every (rollout, attempt) of the request must exist before anything is written.
        for (let i = 0; i < req.spans.length; i++) {
          const s = req.spans[i]!;
          if (targets.get(s.rollout_id, s.attempt_id) !== undefined) continue;
          LightningStoreCore.found(yield t.getRollout(s.rollout_id), s.rollout_id);
          const attempt: Attempt | null = yield t.getAttempt(s.rollout_id, s.attempt_id);
          if (!attempt) throw new NotFoundError(`Attempt ${s.attempt_id} not found for rollout ${s.rollout_id}`, "attempt", s.attempt_id);
          targets.add(attempt);
        }
      } catch (e) {
        if (!(e instanceof NotFoundError)) throw e;
        out.push(e);
        continue;
      }
      const first = req.spans[0]!;
      out.push(req.allocate ? [Object.freeze({ ...first, sequence_id: (yield t.incSequence(first.rollout_id, 1)) as number })] : req.spans);
    }
    const all = acceptedSpans(out);
    if (all.length === 0) return out;
    // Also raises each rollout's sequence counter to its spans' largest sequence_id (chmax, §3.5.17).
    const done: Span[] = yield t.insertSpans(all);
    if (done.length === 0) return keepInserted(out, done);
    const now = this.clock.now();
    targets.noteBeats(done);
    // §3.4, once per (rollout, attempt) that got a span. Rollouts are re-read per heartbeat: an earlier
    // heartbeat of this batch may have changed one.
    for (let i = 0; i < targets.list.length; i++) {
      const { attempt, beat } = targets.list[i]!;
      if (!beat) continue;
      const rollout: Rollout = yield t.getRollout(attempt.rollout_id);
      const updated: Attempt = yield t.updateAttempt(attempt.rollout_id, attempt.attempt_id, heartbeatPatch(attempt, now));
      const latest: Attempt | null = yield t.getLatestAttempt(attempt.rollout_id);
      const next = rolloutStatusAfterSpan(rollout.status, updated.status, latest?.attempt_id === attempt.attempt_id);
      if (next !== null) yield* this.setRolloutStatus(t, rollout, next, now, fx);
    }
    return done.length === all.length ? out : keepInserted(out, done);
  }



  private *querySpansTx(t: StorageTx, rolloutId: string, query: SpanQuery, page: Page, where: Record<string, FieldOps>, logic: FilterLogic): TxBody<PaginatedResult<Span>> {
    let attemptId = query.attempt_id ?? null;
    if (attemptId === "latest") {
      const latest: Attempt | null = yield t.getLatestAttempt(rolloutId);
      if (!latest) return { items: [], limit: page.limit, offset: page.offset, total: 0 };
      attemptId = latest.attempt_id;
    }
    const must: Record<string, FieldOps> = { rollout_id: { exact: rolloutId }, attempt_id: { exact: attemptId } };
    return (yield t.query("spans", { must, where, logic, ...page })) as PaginatedResult<Span>;
  }
}

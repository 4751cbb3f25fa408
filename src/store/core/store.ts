/**
 * `LightningStoreCore`: every semantic of the LightningStore (docs/store.md; docs/departures.md rows 3-6, 9-11,
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
  NamedResourcesInput,
  PaginatedResult,
  ResourcesUpdate,
  Rollout,
  Span,
  StoreCapabilities,
  StoreStatistics,
  Worker,
} from "../../types/index.ts";
import {
  RolloutMode as RolloutModeEnum,
  RolloutStatus as RolloutStatusEnum,
  WorkerStatus as WorkerStatusEnum,
  SPAN_FIELDS,
  ValidationError,
  systemClock,
} from "../../types/index.ts";
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
} from "../base.ts";
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
  type RolloutDraft,
} from "../inputs.ts";
import { spanFromOpenTelemetry } from "../otel-span.ts";
import type { FieldOps } from "../query.ts";
import type { MaybePromise, Storage } from "../storage.ts";
import { type Effects, TxDriver, isThenable } from "./driver.ts";
import { addResourcesTx, updateResourcesTx, upsertWorkerHeartbeat } from "./resources.ts";
import {
  dequeueTx,
  enqueueTx,
  getRolloutByIdTx,
  getRolloutsTx,
  queryRolloutsTx,
  startAttemptTx,
  startRolloutTx,
  updateAttemptTx,
  updateRolloutTx,
} from "./rollouts.ts";
import { SpanWriter } from "./span-queue.ts";
import { querySpansTx, sequenceIdsTx } from "./spans.ts";
import { storeStatistics } from "./statistics.ts";
import { type StoreChange, type WaitSource, Waits } from "./waits.ts";
import { Watchdog } from "./watchdog.ts";

export interface LightningStoreCoreOptions {
  clock?: Clock;
  /** Minimum seconds between two lazy watchdog scans; <= 0 scans before every eligible call. Default 10. */
  scanDebounceSeconds?: number;
  /** Also run the watchdog on a timer every so many seconds (docs/departures.md#11); null/absent: lazy only. */
  watchdogIntervalSeconds?: number | null;
  /** How often `waitForRollouts` re-reads when the storage has other writers (`sharedWriters`). Default 1 s. */
  waitPollSeconds?: number;
}

const ALL_FALSE_CAPABILITIES: StoreCapabilities = { thread_safe: false, async_safe: true, zero_copy: false, otlp_traces: false };

/**
 * The façade: checks each call's input, runs the lazy watchdog before the calls that read or hand out rollouts, and hands the
 * work to the modules of `core/` (transaction bodies run by the `TxDriver`, the `Watchdog`, the
 * `SpanWriter`'s group commit, `Waits`).
 */
export class LightningStoreCore implements LightningStore {
  readonly capabilities: StoreCapabilities;
  protected readonly clock: Clock;
  private readonly startedAt: number;
  private readonly driver: TxDriver;
  private readonly watchdog: Watchdog;
  private readonly waits: Waits;
  private readonly spans: SpanWriter;
  private readonly waitSource: WaitSource;
  private closed = false;

  constructor(
    protected readonly storage: Storage,
    private readonly storeName: string,
    options: LightningStoreCoreOptions = {},
    capabilities: StoreCapabilities = ALL_FALSE_CAPABILITIES,
  ) {
    this.capabilities = Object.freeze({ ...capabilities });
    const clock = options.clock ?? systemClock;
    this.clock = clock;
    this.startedAt = clock.now();
    this.driver = new TxDriver(storage, { clock });
    this.waits = new Waits((options.waitPollSeconds ?? 1) * 1000);
    this.watchdog = new Watchdog(clock, options.scanDebounceSeconds ?? 10, this.driver, this.waits);
    this.spans = new SpanWriter(this.driver, this.waits, storage.groupCommit === true);
    this.waitSource = {
      healthcheck: () => this.healthcheck(),
      getRollouts: (ids) => this.driver.tx("r", getRolloutsTx, ids),
      get sharedWriters() {
        return storage.sharedWriters === true;
      },
    };
    const interval = options.watchdogIntervalSeconds;
    if (interval !== undefined && interval !== null) {
      if (!(interval > 0)) throw new ValidationError("watchdogIntervalSeconds must be > 0", ["watchdogIntervalSeconds"]);
      // Through the instance's `runWatchdog`, so a scan on the timer is the same call as any other.
      this.watchdog.startTimer(interval, () => this.runWatchdog());
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Watchdog (core/watchdog.ts)

  /**
   * The debounce gate: true when a lazy scan may run now, and then it records the scan time, so
   * among concurrent callers exactly one wins.
   */
  protected shouldScan(): boolean {
    return this.watchdog.shouldScan();
  }

  /** Runs before the calls that read or hand out rollouts (docs/store.md#the-watchdog); undefined (nothing to wait for) most of the time. */
  private healthcheck(): Promise<unknown> | undefined {
    return this.watchdog.shouldScan() ? this.runWatchdog() : undefined;
  }

  /**
   * Scans now (no debounce) and marks latest attempts that ran past `timeout_seconds` or stayed silent
   * past `unresponsive_seconds`. Returns how many attempts changed. A scan already in progress makes
   * this a no-op (0).
   */
  runWatchdog(): Promise<number> {
    return this.watchdog.scan();
  }

  // ---------------------------------------------------------------------------------------------
  // Rollouts and the queue (core/rollouts.ts)

  async startRollout(input: unknown, options?: StartRolloutOptions): Promise<AttemptedRollout> {
    const draft = rolloutDraft(input, options);
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.driver.tx("w", startRolloutTx, draft);
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
    const enqueued = this.driver.tx("w", enqueueTx, drafts);
    if (!isThenable(enqueued)) {
      this.waits.notifyQueued();
      return enqueued;
    }
    return Promise.resolve(enqueued).then((rollouts) => {
      this.waits.notifyQueued();
      return rollouts;
    });
  }

  /**
   * Calls `listener` each time a rollout is enqueued or requeued through this store object; returns a
   * remover. Idle runners in this process wait for it instead of sleeping their whole poll interval.
   */
  onQueued(listener: () => void): () => void {
    return this.waits.onQueued(listener);
  }

  /**
   * Calls `listener` after each commit of this store object that finished rollouts or queued one;
   * returns a remover. A process sharing the storage with others (`agl store --workers`) passes it on,
   * so that their waits wake at once instead of at their next poll (`wake`).
   */
  onChange(listener: (change: StoreChange) => void): () => void {
    return this.waits.onChange(listener);
  }

  /** Wakes this store object's waits for a change committed by another process to the same storage (see `onChange`). */
  wake(change: StoreChange): void {
    this.waits.wake(change);
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
    if (hc) return hc.then(() => this.driver.tx("w", dequeueTx, limit, workerId));
    return this.driver.tx("w", dequeueTx, limit, workerId);
  }

  async startAttempt(rolloutId: string, options?: { worker_id?: string | null }): Promise<AttemptedRollout> {
    requireId(rolloutId, "rollout_id");
    const workerId = options?.worker_id ?? null;
    if (workerId !== null) requireId(workerId, "worker_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    const fx: Effects = { finished: [] };
    return this.driver.tx("w", startAttemptTx, rolloutId, workerId, fx);
  }

  async queryRollouts(query: RolloutQuery = {}): Promise<PaginatedResult<Rollout | AttemptedRollout>> {
    const page = pageOf(query, ROLLOUT_FIELDS);
    const logic = filterLogic(query.filter_logic);
    const where: Record<string, FieldOps> = {
      status: { within: statusList(query.status_in ?? query.status, RolloutStatusEnum, "status_in") },
      rollout_id: {
        within: stringList(query.rollout_id_in ?? query.rollout_ids, "rollout_id_in"),
        contains: query.rollout_id_contains ?? null,
      },
      mode: { within: statusList(query.mode_in, RolloutModeEnum, "mode_in") },
    };
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.driver.tx("r", queryRolloutsTx, where, logic, page);
  }

  async getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null> {
    requireId(rolloutId, "rollout_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.driver.tx("r", getRolloutByIdTx, rolloutId);
  }

  async updateRollout(rolloutId: string, patch: RolloutPatch): Promise<Rollout> {
    requireId(rolloutId, "rollout_id");
    const p = rolloutPatch(patch);
    const hc = this.healthcheck();
    if (hc) await hc;
    const fx: Effects = { finished: [] };
    const result = await this.driver.tx("w", updateRolloutTx, rolloutId, p, fx);
    this.waits.notifyFinished(fx);
    return result;
  }

  // ---------------------------------------------------------------------------------------------
  // Waits (core/waits.ts)

  waitForRollouts(options: WaitOptions): Promise<Rollout[]> {
    return this.waits.waitForRollouts(this.waitSource, options);
  }

  // ---------------------------------------------------------------------------------------------
  // Attempts (core/rollouts.ts)

  async queryAttempts(rolloutId: string, query: PageOptions = {}): Promise<PaginatedResult<Attempt>> {
    requireId(rolloutId, "rollout_id");
    const page = pageOf(query, ATTEMPT_FIELDS, "sequence_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.driver.call("r", (t) => t.query("attempts", { must: { rollout_id: { exact: rolloutId } }, ...page }));
  }

  async getLatestAttempt(rolloutId: string): Promise<Attempt | null> {
    requireId(rolloutId, "rollout_id");
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.driver.call("r", (t) => t.getLatestAttempt(rolloutId));
  }

  async updateAttempt(rolloutId: string, attemptId: string | "latest", patch: AttemptPatch): Promise<Attempt> {
    requireId(rolloutId, "rollout_id");
    requireId(attemptId, "attempt_id");
    const p = attemptPatch(patch);
    const hc = this.healthcheck();
    if (hc) await hc;
    const fx: Effects = { finished: [] };
    const pending = this.driver.tx("w", updateAttemptTx, rolloutId, attemptId, p, fx);
    const result = isThenable(pending) ? await pending : pending;
    this.waits.notifyFinished(fx);
    return result;
  }

  // ---------------------------------------------------------------------------------------------
  // Resources (core/resources.ts)

  async addResources(resources: NamedResourcesInput): Promise<ResourcesUpdate> {
    const parsed = namedResources(resources);
    return this.driver.tx("w", addResourcesTx, parsed);
  }

  async updateResources(resourcesId: string, resources: NamedResourcesInput): Promise<ResourcesUpdate> {
    requireId(resourcesId, "resources_id");
    const parsed = namedResources(resources);
    const hc = this.healthcheck();
    if (hc) await hc;
    return this.driver.tx("w", updateResourcesTx, resourcesId, parsed);
  }

  async getLatestResources(): Promise<ResourcesUpdate | null> {
    return this.driver.call("r", (t) => t.getLatestResources());
  }

  async getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null> {
    requireId(resourcesId, "resources_id");
    return this.driver.call("r", (t) => t.getResources(resourcesId));
  }

  async queryResources(query: ResourcesQuery = {}): Promise<PaginatedResult<ResourcesUpdate>> {
    const page = pageOf(query, RESOURCES_FIELDS);
    const where = { resources_id: { exact: query.resources_id ?? null, contains: query.resources_id_contains ?? null } };
    return this.driver.call("r", (t) => t.query("resources", { where, logic: "and", ...page }));
  }

  // ---------------------------------------------------------------------------------------------
  // Spans (core/spans.ts, core/span-queue.ts)

  async getNextSpanSequenceId(rolloutId: string, attemptId: string): Promise<number> {
    requireId(rolloutId, "rollout_id");
    requireId(attemptId, "attempt_id");
    // Per rollout; nothing is checked (upstream): the attempt id only documents who asks.
    return this.driver.call("w", (t) => t.incSequence(rolloutId, 1));
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
    return this.driver.tx("w", sequenceIdsTx, perRollout, pairs);
  }

  async addSpan(span: Span): Promise<Span | null> {
    const done = this.spans.insert([ownedSpan(span)], false);
    return (isThenable(done) ? await done : done)[0] ?? null;
  }

  async addManySpans(spans: Span[]): Promise<Span[]> {
    if (!Array.isArray(spans)) throw new ValidationError("spans must be a list", []);
    return this.spans.insert(
      spans.map((s, i) => ownedSpan(s, i)),
      false,
    );
  }

  async addOtelSpan(rolloutId: string, attemptId: string, span: OtelReadableSpanLike, sequenceId?: number | null): Promise<Span | null> {
    requireId(rolloutId, "rollout_id");
    requireId(attemptId, "attempt_id");
    if (sequenceId !== undefined && sequenceId !== null && !Number.isInteger(sequenceId)) {
      throw new ValidationError("sequence_id must be an integer", ["sequence_id"]);
    }
    // Convert and validate first (with a placeholder sequence id), so a bad span changes nothing.
    const converted = ownedSpan(spanFromOpenTelemetry(span, rolloutId, attemptId, sequenceId ?? 0));
    return (await this.spans.insert([converted], sequenceId === undefined || sequenceId === null))[0] ?? null;
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
    return this.driver.tx("r", querySpansTx, rolloutId, query, page, where, logic);
  }

  // ---------------------------------------------------------------------------------------------
  // Workers (core/resources.ts)

  async updateWorker(workerId: string, stats?: Record<string, unknown>): Promise<Worker> {
    requireId(workerId, "worker_id");
    const owned = stats === undefined ? undefined : heartbeatStats(stats);
    return this.driver.call("w", (t) => upsertWorkerHeartbeat(t, workerId, this.clock.now(), owned));
  }

  async getWorkerById(workerId: string): Promise<Worker | null> {
    requireId(workerId, "worker_id");
    return this.driver.call("r", (t) => t.getWorker(workerId));
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
    return this.driver.call("r", (t) => t.query("workers", { where, logic, ...page }));
  }

  // ---------------------------------------------------------------------------------------------
  // Statistics (core/statistics.ts) and closing

  async statistics(): Promise<StoreStatistics> {
    const c = await this.driver.call("r", (t) => t.counts());
    return storeStatistics(this.storeName, c, this.clock.now() - this.startedAt, this.storage);
  }

  async close(): Promise<void> {
    this.watchdog.stopTimer();
    if (this.closed) return;
    this.closed = true;
    await this.storage.close();
  }
}

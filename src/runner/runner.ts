/**
 * Runners: `Runner` (the base contract) and `LitAgentRunner`, which claims rollouts from the store, runs
 * the agent inside the tracer's context, stores what it returns and records the attempt's final status
 * (docs/runner.md).
 */
import type { LightningStore } from "../store/base.ts";
import { finishAttempt, finishFailure } from "../client/finish.ts";
import type { DeferredSpans, Tracer } from "../tracer/base.ts";
import { DEFAULT_DELIVERY_LIMITS, isStoreUnavailable, monotonicMs, retryWhileUnavailable } from "../tracer/delivery.ts";
import { errorLine, getLogger } from "../platform/log.ts";
import { OtelTracer } from "../tracer/otel.ts";
import { bindToActiveContext } from "../tracer/context.ts";
import type { AttemptedRollout, NamedResourcesInput, Rollout, RolloutMode, Span } from "../types/index.ts";
import { systemClock, ValidationError } from "../types/index.ts";
import { findFinalReward } from "../adapter/reward.ts";
import { AbortError, RuntimeError } from "./errors.ts";
import { sleepUnlessStopped, type ExecutionEvent } from "./event.ts";
import { startHeartbeatLoop } from "./heartbeat.ts";
import { Hook, type HookName } from "./hooks.ts";
import type { LitAgent } from "./litagent.ts";
import { ResourcesCache } from "./resources-cache.ts";
import { postProcessRolloutResult } from "./result.ts";

const log = getLogger("agentlightning.runner");

export interface IterOptions {
  /** The shared stop flag: checked between rollouts and while idle. */
  event?: ExecutionEvent | null;
  /** Stops polling and abandons (fails) the rollout in flight. */
  signal?: AbortSignal | null;
}

export interface StepOptions {
  resources?: NamedResourcesInput | null;
  mode?: RolloutMode | null;
  event?: ExecutionEvent | null;
}

export interface RunContextOptions<T> {
  agent: LitAgent<T>;
  store: LightningStore;
  hooks?: Hook | readonly Hook[] | null;
  workerId?: number | null;
}

export const workerLabel = (id: number | null): string => (id === null ? "Worker-Unknown" : `Worker-${id}`);

export abstract class Runner<T = unknown> {
  abstract init(agent: LitAgent<T>, options?: { hooks?: Hook | readonly Hook[] | null }): void | Promise<void>;
  abstract initWorker(workerId: number, store: LightningStore): void | Promise<void>;
  abstract teardown(): void | Promise<void>;
  abstract teardownWorker(workerId: number): void | Promise<void>;
  abstract iter(options?: IterOptions): Promise<void>;
  abstract step(input: T, options?: StepOptions): Promise<Rollout>;

  run(): never {
    throw new RuntimeError("The behavior of run() on a Runner is undefined. Use iter() or step().");
  }

  /** init → initWorker → fn(runner) → teardownWorker → teardown; teardown errors are logged, fn's propagate. */
  async withRunContext<R>(o: RunContextOptions<T>, fn: (runner: this) => R | Promise<R>): Promise<R> {
    const id = o.workerId ?? 0;
    await this.init(o.agent, { hooks: o.hooks ?? null });
    let workerReady = false;
    try {
      await this.initWorker(id, o.store);
      workerReady = true;
      return await fn(this);
    } finally {
      if (workerReady) {
        try {
          await this.teardownWorker(id);
        } catch (err) {
          log.error("Error during runner worker teardown", err);
        }
      }
      try {
        await this.teardown();
      } catch (err) {
        log.error("Error during runner teardown", err);
      }
    }
  }
}

export interface LitAgentRunnerOptions {
  tracer?: Tracer | null;
  /** Rollouts `iter` processes before returning (null: unlimited). */
  maxRollouts?: number | null;
  /** Seconds between dequeue polls while the queue is empty (default 5). */
  pollInterval?: number;
  /** Seconds between worker heartbeats; <= 0 disables them (default 10). */
  heartbeatInterval?: number;
  /** ± uniform jitter (seconds) on poll and heartbeat waits (default 0.5). */
  intervalJitter?: number;
  heartbeatLaunchMode?: "asyncio" | "thread";
  heartbeatIncludeGpu?: boolean;
  /**
   * Seconds the runner keeps trying its end-of-attempt writes (a returned reward, the final status) while
   * the store is unreachable, counted from the first of them (default 30; docs/tracing.md).
   */
  storeRetryTimeoutSeconds?: number;
}

/** How long `step` and `iter` keep retrying end-of-attempt writes to an unreachable store, by default. */
export const DEFAULT_STORE_RETRY_TIMEOUT_SECONDS = 30;

function normaliseHooks(hooks: Hook | readonly Hook[] | null | undefined): Hook[] {
  if (!hooks) return [];
  return hooks instanceof Hook ? [hooks] : [...hooks];
}

export class LitAgentRunner<T = unknown> extends Runner<T> {
  static readonly acceptedOptions = [
    "tracer",
    "maxRollouts",
    "pollInterval",
    "heartbeatInterval",
    "intervalJitter",
    "heartbeatLaunchMode",
    "heartbeatIncludeGpu",
    "storeRetryTimeoutSeconds",
  ] as const;

  readonly tracer: Tracer;
  readonly maxRollouts: number | null;
  readonly pollInterval: number;
  readonly heartbeatInterval: number;
  readonly intervalJitter: number;
  readonly heartbeatLaunchMode: string;
  readonly heartbeatIncludeGpu: boolean;
  readonly storeRetryTimeoutSeconds: number;
  private agent: LitAgent<T> | null = null;
  private hooks: Hook[] = [];
  private store: LightningStore | null = null;
  private readonly resources = new ResourcesCache();
  workerId: number | null = null;

  constructor(private readonly options: LitAgentRunnerOptions = {}) {
    super();
    this.tracer = options.tracer ?? new OtelTracer();
    this.maxRollouts = options.maxRollouts ?? null;
    this.pollInterval = options.pollInterval ?? 5.0;
    this.heartbeatInterval = options.heartbeatInterval ?? 10.0;
    this.intervalJitter = options.intervalJitter ?? 0.5;
    this.heartbeatLaunchMode = options.heartbeatLaunchMode ?? "thread";
    this.heartbeatIncludeGpu = options.heartbeatIncludeGpu ?? false;
    this.storeRetryTimeoutSeconds = options.storeRetryTimeoutSeconds ?? DEFAULT_STORE_RETRY_TIMEOUT_SECONDS;
    if (!(this.storeRetryTimeoutSeconds >= 0))
      throw new ValidationError("storeRetryTimeoutSeconds must be >= 0", ["storeRetryTimeoutSeconds"]);
    if (this.maxRollouts !== null && !(this.maxRollouts >= 0)) throw new ValidationError("maxRollouts must be >= 0", ["maxRollouts"]);
  }

  /** A fresh runner with the same options and a cloned tracer (one runner per worker, docs/departures.md#17). */
  clone(): LitAgentRunner<T> {
    return new LitAgentRunner<T>({ ...this.options, tracer: this.tracer.clone() });
  }

  async init(agent: LitAgent<T>, options: { hooks?: Hook | readonly Hook[] | null } = {}): Promise<void> {
    this.agent = agent;
    agent.setRunner(this);
    this.hooks = normaliseHooks(options.hooks);
    await this.tracer.init();
  }

  async initWorker(workerId: number, store: LightningStore): Promise<void> {
    this.workerId = workerId;
    this.store = store;
    this.resources.clear();
    await this.tracer.initWorker(workerId, store);
  }

  async teardown(): Promise<void> {
    this.agent = null;
    this.store = null;
    this.workerId = null;
    this.hooks = [];
    await this.tracer.teardown();
  }

  async teardownWorker(workerId: number): Promise<void> {
    this.workerId = null;
    await this.tracer.teardownWorker(workerId);
  }

  getAgent(): LitAgent<T> {
    if (this.agent === null) throw new RuntimeError("Agent not initialized. Call init() first.");
    return this.agent;
  }

  getStore(): LightningStore {
    if (this.store === null) throw new RuntimeError("Store not initialized. Call init_worker() first.");
    return this.store;
  }

  getWorkerId(): string {
    return workerLabel(this.workerId);
  }

  private prefix(rolloutId?: string): string {
    if (this.workerId !== null) return rolloutId ? `[Worker ${this.workerId} | Rollout ${rolloutId}]` : `[Worker ${this.workerId}]`;
    return rolloutId ? `[Rollout ${rolloutId}]` : "[Default Worker]";
  }

  private async runHooks(name: HookName, args: Record<string, unknown>): Promise<void> {
    const hookName = name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    for (const hook of this.hooks) {
      try {
        await (hook[name] as (a: unknown) => Promise<void>).call(hook, args);
      } catch (err) {
        log.error(`${this.prefix()} Exception during ${hookName} hook`, err);
      }
    }
  }

  /** The claim loop: dequeue with this worker's label, run, repeat until stopped or `maxRollouts`. */
  async iter(options: IterOptions = {}): Promise<void> {
    const { event = null, signal = null } = options;
    const store = this.getStore();
    const stopped = () => (event?.isSet() ?? false) || (signal?.aborted ?? false);
    let processed = 0;
    const stopHeartbeat =
      this.workerId === null && this.heartbeatInterval > 0
        ? (log.warn("Cannot start heartbeat loop without worker_id"), null)
        : startHeartbeatLoop({
            store,
            workerLabel: this.getWorkerId(),
            intervalSeconds: this.heartbeatInterval,
            jitterSeconds: this.intervalJitter,
            mode: this.heartbeatLaunchMode,
            includeGpu: this.heartbeatIncludeGpu,
          });
    try {
      // A rollout claimed by the previous attempt's finishing request runs next, even if a stop came after
      // that claim: a dequeue that returned is run too (an aborted signal fails it at once).
      let next: AttemptedRollout | null = null;
      const wantsMore = (): boolean => !stopped() && (this.maxRollouts === null || processed + 1 < this.maxRollouts);
      while (next !== null || (!stopped() && (this.maxRollouts === null || processed < this.maxRollouts))) {
        let rollout: AttemptedRollout | null = next;
        next = null;
        while (rollout === null && !stopped()) {
          // Listening before the dequeue: a rollout queued after it wakes the sleep below (a store in this
          // process tells; for others, such as a client, the poll interval is the bound).
          let wake!: () => void;
          const queued = new Promise<void>((resolve) => (wake = resolve));
          const stopListening = store.onQueued?.(() => wake());
          try {
            try {
              rollout = await store.dequeueRollout({ worker_id: this.getWorkerId() });
            } catch (err) {
              log.error(`${this.prefix()} Failed to dequeue a rollout; polling again`, err);
            }
            if (rollout !== null) break;
            await this.sleepUntilNextPoll(event, signal, queued);
          } finally {
            stopListening?.();
          }
        }
        if (rollout === null) return;
        next = await this.stepImpl(rollout, false, signal, wantsMore);
        processed++;
        if (processed === 1 || processed % 10 === 0)
          log.info(`${this.prefix()} Progress: ${processed}${this.maxRollouts === null ? "" : `/${this.maxRollouts}`} rollouts processed`);
      }
    } finally {
      await stopHeartbeat?.();
    }
  }

  private sleepUntilNextPoll(event: ExecutionEvent | null, signal: AbortSignal | null, wake: Promise<void>): Promise<boolean> {
    const interval = Math.max(this.pollInterval + (Math.random() * 2 - 1) * this.intervalJitter, 0.01);
    return sleepUnlessStopped(interval, event, signal, wake);
  }

  /** Runs one rollout directly (no queue): start it, run it, return its final state. Errors propagate after the attempt is marked failed. */
  async step(input: T, options: StepOptions = {}): Promise<Rollout> {
    const store = this.getStore();
    const resourcesId = options.resources ? (await store.addResources(options.resources)).resources_id : null;
    const attempted = await store.startRollout(input, {
      mode: options.mode ?? null,
      resources_id: resourcesId,
      worker_id: this.getWorkerId(),
    });
    await this.stepImpl(attempted, true, null, () => false);
    const done = await store.getRolloutById(attempted.rollout_id);
    if (done === null) throw new RuntimeError("Failed to fetch completed rollout by id after step");
    return done;
  }

  /**
   * Runs one claimed rollout and records its final status. When `claimNext()` says so at the end, the
   * same store call claims the next rollout for this worker and returns it (null otherwise). Without hooks
   * (which may read the store), the tracer's last spans go in that call too: one request over HTTP.
   * The writes after the agent's work (reward spans, final status) ride out a store that is briefly
   * unreachable for up to `storeRetryTimeoutSeconds`.
   */
  private async stepImpl(
    rollout: AttemptedRollout,
    raiseOnException: boolean,
    signal: AbortSignal | null,
    claimNext: () => boolean,
  ): Promise<AttemptedRollout | null> {
    const store = this.getStore();
    const agent = this.getAgent();
    const rid = rollout.rollout_id;
    const aid = rollout.attempt.attempt_id;
    const started = systemClock.now();
    let spans: Span[] = [];
    let failed = false;
    let hooksStarted = false;
    let deferred: DeferredSpans | null = null;
    let endBy: number | null = null;
    const retry = this.retryUntil(rid, () => (endBy ??= monotonicMs() + this.storeRetryTimeoutSeconds * 1000));
    let end: { next: AttemptedRollout | null; spansLost: unknown };
    try {
      const update = await this.resources.get(store, rollout);
      if (update === null) {
        // Upstream leaves the attempt "preparing" here; we mark it failed so the retry policy applies at once.
        throw new RuntimeError(`Failed to fetch resources ${rollout.resources_id ?? "(latest)"}. Skipping.`);
      }
      hooksStarted = true;
      await this.runHooks("onRolloutStart", { agent, runner: this, rollout });
      const deferFinalDelivery = this.hooks.length === 0;
      const raw = await this.tracer.traceContext({ name: rid, rolloutId: rid, attemptId: aid, deferFinalDelivery }, async () => {
        // The hooks and the agent are called in the trace's context explicitly: where the context does not
        // follow `await` (browsers) they still start inside their attempt (tracer/context.ts).
        const inTrace = bindToActiveContext(<R>(f: () => R): R => f());
        await inTrace(() => this.runHooks("onTraceStart", { agent, runner: this, tracer: this.tracer, rollout }));
        const result = await abortable(
          Promise.resolve().then(() => inTrace(() => agent.invoke(rollout.input as T, update.resources, rollout))),
          signal,
        );
        await inTrace(() => this.runHooks("onTraceEnd", { agent, runner: this, tracer: this.tracer, rollout }));
        return result;
      });
      deferred = deferFinalDelivery ? this.tracer.takeDeferredSpans() : null;
      if (deferred !== null && raw !== undefined && raw !== null) {
        // Post-processing stores more spans, numbered after the traced ones: those must be stored first.
        const d = deferred;
        deferred = null;
        await d.flush();
      }
      spans = await postProcessRolloutResult(store, this.tracer, rollout, raw, retry);
      if (log.isEnabled("info"))
        log.info(
          `${this.prefix(rid)} Completed in ${(systemClock.now() - started).toFixed(2)}s. Collected ${spans.length} span(s). Final reward: ${finalReward(spans)}`,
        );
    } catch (err) {
      failed = true;
      // One line per failed rollout; the stack and the error's fields (an API error's headers...) at DEBUG.
      log.error(`${this.prefix(rid)} Exception during rollout: ${errorLine(err)}`);
      log.debug(`${this.prefix(rid)} Exception during rollout`, err);
      if (raiseOnException) throw err;
    } finally {
      // A rollout skipped for missing resources never started, so it gets no hooks (as upstream).
      if (hooksStarted) await this.runHooks("onRolloutEnd", { agent, runner: this, rollout, spans });
      end = await this.finish(rid, aid, failed, deferred, claimNext() ? this.getWorkerId() : null, retry);
    }
    // The agent's work went well but its last spans never reached the store: `step` says so, as for spans lost earlier.
    if (raiseOnException && end.spansLost !== null) throw end.spansLost;
    return end.next;
  }

  /** Runs a store call, trying again with backoff while the store is unreachable, until `deadline()`. */
  private retryUntil(rid: string, deadline: () => number): StoreRetry {
    return (what, fn) =>
      retryWhileUnavailable(fn, {
        deadlineMs: deadline(),
        minDelayMs: DEFAULT_DELIVERY_LIMITS.retryMinDelaySeconds * 1000,
        maxDelayMs: DEFAULT_DELIVERY_LIMITS.retryMaxDelaySeconds * 1000,
        onRetry: (err, waitMs) =>
          log.warn(`${this.prefix(rid)} The store is unreachable during ${what}; trying again in ${(waitMs / 1000).toFixed(1)} s`, err),
      });
  }

  /**
   * Stores the deferred spans, the final status, and claims the next rollout for `claimFor` (one call,
   * see finishAttempt). Errors are logged: spans that could not be stored fail the attempt (and are
   * returned as `spansLost`); a claim that failed leaves the next dequeue to the loop. When that call fails
   * without saying what it stored, the spans go again the tracer's way (none stored twice) and the status
   * on its own, each retried while the store is unreachable.
   */
  private async finish(
    rid: string,
    aid: string,
    failed: boolean,
    deferred: DeferredSpans | null,
    claimFor: string | null,
    retry: StoreRetry,
  ): Promise<{ next: AttemptedRollout | null; spansLost: unknown }> {
    const store = this.getStore();
    const updateStatus = async (status: "failed" | "succeeded") => {
      try {
        await retry("update_attempt", () => store.updateAttempt(rid, aid, { status }));
      } catch (err) {
        log.error(`${this.prefix(rid)} Exception during update_attempt`, err);
      }
    };
    if (deferred === null && claimFor === null) {
      await updateStatus(failed ? "failed" : "succeeded");
      return { next: null, spansLost: null };
    }
    try {
      const done = await finishAttempt(store, {
        rollout_id: rid,
        attempt_id: aid,
        spans: deferred?.spans,
        attempt: { status: failed ? "failed" : "succeeded" },
        claim: claimFor === null ? null : { worker_id: claimFor },
      });
      await deferred?.delivered(done.sequence_ids);
      return { next: done.next, spansLost: null };
    } catch (err) {
      const part = finishFailure(err);
      if (part?.failed === "claim") {
        log.error(`${this.prefix(rid)} Failed to claim the next rollout; polling again`, err);
        return { next: null, spansLost: null };
      }
      if (part?.failed === "attempt") {
        log.error(`${this.prefix(rid)} Exception during update_attempt`, err);
        if (isStoreUnavailable(err)) await updateStatus(failed ? "failed" : "succeeded");
        return { next: null, spansLost: null };
      }
      // The spans were not stored, or it is unknown whether anything was.
      log.warn(`${this.prefix(rid)} Finishing the attempt in one request failed; sending its spans and status separately`, err);
      let spansLost: unknown = null;
      if (deferred !== null) {
        try {
          await deferred.redeliver();
        } catch (e) {
          spansLost = e;
          log.error(`${this.prefix(rid)} Exception while delivering the attempt's spans`, e);
        }
      }
      // Spans lost is a failed attempt.
      await updateStatus(failed || spansLost !== null ? "failed" : "succeeded");
      return { next: null, spansLost };
    }
  }
}

/** A store call tried again while the store is unreachable; `what` names it in the log. */
type StoreRetry = <R>(what: string, fn: () => Promise<R>) => Promise<R>;

function finalReward(spans: Span[]): string {
  try {
    return String(findFinalReward(spans));
  } catch {
    return "unreadable";
  }
}

/** Rejects with AbortError when `signal` aborts first; the agent's own promise is then abandoned. */
function abortable<T>(p: Promise<T>, signal: AbortSignal | null): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(new AbortError("Rollout aborted"));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new AbortError("Rollout aborted"));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

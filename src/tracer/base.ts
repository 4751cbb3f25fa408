/**
 * The tracer contract (process and worker setup, a trace context per attempt, the last trace's spans) and
 * `DummyTracer` (builds spans locally, stores nothing). A tracer opens a trace context per
 * attempt; while it is open the tracer is the *active tracer* of that async context, which the
 * emitters use. The active tracer lives in the OpenTelemetry context, not in a process global, so
 * concurrent rollouts (several runners in one process) each see their own; nesting two trace contexts
 * in one async context is still an error, as upstream.
 */
import { context, type Context } from "@opentelemetry/api";
import type { LightningStore } from "../store/base.ts";
import type { Attributes, Span, SpanCoreFields, StatusCode, TraceStatus } from "../types/index.ts";
import { LightningError, ValidationError, systemClock } from "../types/index.ts";
import { formatExceptionAttributes } from "./attributes.ts";
import { ACTIVE_TRACER_KEY, installContextManager } from "./context.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.tracer");

export interface TraceContextOptions {
  /** A label for the trace (the runner passes the rollout id). */
  name?: string | null;
  rolloutId?: string | null;
  attemptId?: string | null;
  /** Deprecated: the store normally comes from `initWorker`. */
  store?: LightningStore | null;
  /**
   * Leave the attempt's spans unsent at the end when they can all go in one request the store numbers
   * itself (a store client, nothing sent yet): the caller takes them with `takeDeferredSpans()` and sends
   * them with the attempt's final update (`finishAttempt`), one request instead of two.
   */
  deferFinalDelivery?: boolean;
}

/** The spans of a trace context left unsent by `deferFinalDelivery`. Exactly one of `delivered`, `flush` or `redeliver` must follow. */
export interface DeferredSpans {
  /** The spans in start order, with `sequence_id` null: the store numbers them, consecutively. */
  readonly spans: Span[];
  /** The caller stored them: the sequence ids the store gave them, in order (fewer when it skipped duplicates). */
  delivered(sequenceIds: readonly number[]): Promise<void>;
  /**
   * Sends them the tracer's own way (retrying while the store is unreachable); throws the delivery error
   * (`SpanDeliveryError`), as the end of `traceContext` would have.
   */
  flush(): Promise<void>;
  /** As `flush`, after the caller's own send failed and may or may not have stored them: none is stored twice. */
  redeliver(): Promise<void>;
}

export interface CreateSpanOptions {
  attributes?: Attributes;
  /** Seconds; start and end of the (instant) span. Default now. */
  timestamp?: number | null;
  status?: TraceStatus | null;
}

export interface OperationContextOptions {
  attributes?: Attributes;
  startTime?: number | null;
  endTime?: number | null;
}

/** What an open operation can record; `getRecordedSpan` works once the operation has ended. */
export interface OperationRecorder {
  recordException(error: unknown): void;
  recordAttributes(attributes: Attributes): void;
  recordStatus(code: StatusCode, description?: string | null): void;
  getRecordedSpan(): SpanCoreFields;
}

/** Thrown when an emitter needs the active tracer and none is open. */
export class NoActiveTracerError extends LightningError {
  override readonly errorType = "NoActiveTracerError";
}

export function getActiveTracer(): Tracer | null {
  return (context.active().getValue(ACTIVE_TRACER_KEY) as Tracer | undefined) ?? null;
}

export function requireActiveTracer(): Tracer {
  const t = getActiveTracer();
  if (t === null)
    throw new NoActiveTracerError(
      "No active tracer found. Emit inside a rollout (a tracer's traceContext) or pass propagate: false. In a browser the context does not follow `await`: run the code in the rollout's context with `tracer.inTrace(() => ...)` (an agent: `this.tracer.inTrace`).",
    );
  return t;
}

/** The contexts of the trace contexts each tracer has open now, oldest first. */
const openTraces = new WeakMap<Tracer, Context[]>();

/** Runs `fn` with `tracer` active (and `extra` context values); refuses to nest. */
export function withActiveTracer<T>(
  tracer: Tracer,
  fn: () => T,
  extra?: (ctx: ReturnType<typeof context.active>) => ReturnType<typeof context.active>,
): T {
  installContextManager();
  if (getActiveTracer() !== null) throw new ValidationError("An active tracer is already set; trace contexts cannot be nested");
  let ctx = context.active().setValue(ACTIVE_TRACER_KEY, tracer);
  if (extra) ctx = extra(ctx);
  const open = openTraces.get(tracer) ?? [];
  openTraces.set(tracer, [...open, ctx]);
  return finallyAfter(
    () => context.with(ctx, fn),
    () =>
      openTraces.set(
        tracer,
        (openTraces.get(tracer) ?? []).filter((c) => c !== ctx),
      ),
  );
}

export const isPromiseLike = (v: unknown): v is PromiseLike<unknown> =>
  typeof v === "object" && v !== null && typeof (v as { then?: unknown }).then === "function";

/**
 * Runs `fn` and then `after(error?)` exactly once, synchronously for a sync result and when the
 * promise settles otherwise; errors are re-thrown. Sync stays sync.
 */
export function finallyAfter<T>(fn: () => T, after: (error: unknown, failed: boolean) => void): T {
  let result: T;
  try {
    result = fn();
  } catch (err) {
    after(err, true);
    throw err;
  }
  if (isPromiseLike(result)) {
    return Promise.resolve(result).then(
      (v) => {
        after(undefined, false);
        return v;
      },
      (err: unknown) => {
        after(err, true);
        throw err;
      },
    ) as T;
  }
  after(undefined, false);
  return result;
}

export abstract class Tracer {
  protected store: LightningStore | null = null;
  protected workerId: number | null = null;

  /** A fresh tracer with the same configuration (one per runner: a tracer's last trace is per worker). */
  clone(): Tracer {
    return new (this.constructor as new () => Tracer)();
  }

  /** Process-level setup; no-op by default. */
  init(): void | Promise<void> {}
  teardown(): void | Promise<void> {}

  initWorker(workerId: number, store?: LightningStore | null): void | Promise<void> {
    this.workerId = workerId;
    this.store = store ?? null;
  }

  teardownWorker(_workerId: number): void | Promise<void> {
    this.workerId = null;
  }

  /**
   * Runs `fn` as one traced attempt. Both ids (with a store) or neither; spans are delivered before
   * the returned promise settles.
   */
  abstract traceContext<T>(options: TraceContextOptions, fn: () => T | Promise<T>): Promise<T>;

  /**
   * The OpenTelemetry context of the trace this tracer has open (the attempt it traces now): the active
   * context when this tracer is active in it, else the one trace context it has open. For code that lost
   * the implicit context (in a browser, anything after an `await`): `inTrace(fn)`, or pass it to
   * OpenTelemetry's explicit-context calls (`startSpan(name, options, ctx)`, `context.with(ctx, fn)`).
   * Throws NoActiveTracerError when none is open, and a ValidationError when several are (one tracer
   * tracing concurrent attempts: only the implicit context can tell them apart).
   */
  traceContextValue(): Context {
    if (getActiveTracer() === this) return context.active();
    const open = openTraces.get(this) ?? [];
    if (open.length === 1) return open[0]!;
    if (open.length === 0) throw new NoActiveTracerError("This tracer has no trace context open: inTrace works while it traces an attempt");
    throw new ValidationError(
      `This tracer has ${open.length} trace contexts open at once; which one a call belongs to is known only from the implicit context`,
    );
  }

  /** Runs `fn` in this tracer's open trace context (`traceContextValue`): its emitters and spans go to that attempt. */
  inTrace<T>(fn: () => T): T {
    return context.with(this.traceContextValue(), fn);
  }

  /** The spans of the most recent trace context, in sequence order. */
  abstract getLastTrace(): Span[];

  /** The spans the last `traceContext` left unsent (`deferFinalDelivery`), handed over once; null when none. */
  takeDeferredSpans(): DeferredSpans | null {
    return null;
  }

  /** Records an instant span (fire and forget) and returns its core fields. */
  abstract createSpan(name: string, options?: CreateSpanOptions): SpanCoreFields;

  /** Runs `fn` inside an operation span; a sync `fn` stays sync. */
  abstract operationContext<T>(name: string, options: OperationContextOptions, fn: (op: OperationRecorder) => T): T;

  /** init → initWorker(0, store) → fn → teardownWorker(0) → teardown, undoing only the steps that succeeded. */
  async lifespan<T>(store: LightningStore | null, fn: () => T | Promise<T>): Promise<T> {
    await this.init();
    try {
      await this.initWorker(0, store);
      try {
        return await fn();
      } finally {
        await this.teardownWorker(0);
      }
    } finally {
      await this.teardown();
    }
  }

  protected checkIds(o: TraceContextOptions): { rolloutId: string | null; attemptId: string | null; store: LightningStore | null } {
    const rolloutId = o.rolloutId ?? null;
    const attemptId = o.attemptId ?? null;
    if ((rolloutId === null) !== (attemptId === null)) {
      throw new ValidationError("rolloutId and attemptId must be given together (or both left out)", [
        rolloutId === null ? "rolloutId" : "attemptId",
      ]);
    }
    if (o.store) log.warn("Passing a store to traceContext is deprecated; the store given to initWorker is used otherwise");
    return { rolloutId, attemptId, store: o.store ?? this.store };
  }
}

/** A recorder that keeps everything in plain fields (DummyTracer, and emitters with propagate: false). */
export class PlainOperationRecorder implements OperationRecorder {
  private attributes: Attributes;
  private status: TraceStatus = { status_code: "OK", description: null };
  private startTime: number;
  private endTime: number | null = null;

  constructor(
    private readonly name: string,
    options: OperationContextOptions,
  ) {
    this.attributes = { ...(options.attributes ?? {}) };
    this.startTime = options.startTime ?? systemClock.now();
  }

  recordException(error: unknown): void {
    this.attributes = { ...this.attributes, ...formatExceptionAttributes(error) };
  }
  recordAttributes(attributes: Attributes): void {
    this.attributes = { ...this.attributes, ...attributes };
  }
  recordStatus(code: StatusCode, description: string | null = null): void {
    this.status = { status_code: code, description };
  }
  end(endTime?: number | null): void {
    this.endTime = endTime ?? systemClock.now();
  }
  getRecordedSpan(): SpanCoreFields {
    if (this.endTime === null) throw new LightningError("The operation has not ended yet; its span is available after the block exits");
    return {
      name: this.name,
      status: { ...this.status },
      attributes: { ...this.attributes },
      start_time: this.startTime,
      end_time: this.endTime,
    };
  }
}

/** Runs `fn(recorder)`; an error becomes status ERROR(message) plus exception attributes and propagates; `end` runs last either way. */
export function runRecorded<T>(recorder: OperationRecorder, fn: (op: OperationRecorder) => T, end: () => void): T {
  return finallyAfter(
    () => fn(recorder),
    (err, failed) => {
      if (failed) {
        recorder.recordException(err);
        recorder.recordStatus("ERROR", err instanceof Error ? err.message : String(err));
      }
      end();
    },
  );
}

/** Builds spans locally and stores nothing. */
export class DummyTracer extends Tracer {
  async traceContext<T>(options: TraceContextOptions, fn: () => T | Promise<T>): Promise<T> {
    this.checkIds(options);
    return withActiveTracer(this, async () => await fn());
  }

  getLastTrace(): Span[] {
    return [];
  }

  createSpan(name: string, options: CreateSpanOptions = {}): SpanCoreFields {
    const t = options.timestamp ?? systemClock.now();
    return {
      name,
      status: options.status ?? { status_code: "OK", description: null },
      attributes: { ...(options.attributes ?? {}) },
      start_time: t,
      end_time: t,
    };
  }

  operationContext<T>(name: string, options: OperationContextOptions, fn: (op: OperationRecorder) => T): T {
    const recorder = new PlainOperationRecorder(name, options);
    return runRecorded(recorder, fn, () => recorder.end(options.endTime));
  }
}

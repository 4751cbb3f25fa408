/**
 * `OtelTracer`: traces attempts with the OpenTelemetry JS SDK. Spans from the emitters, from
 * `operation`, and from any OpenTelemetry-instrumented library called inside `traceContext` go through
 * the process-wide Lightning span processor into the attempt's scope, which delivers them to the store
 * in batches (docs/tracing.md; see scope.ts for the sequence ids).
 */
import { context, SpanStatusCode, trace, type HrTime, type Span as ApiSpan, type Tracer as ApiTracer } from "@opentelemetry/api";
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { hrTimeToSeconds } from "../store/otel-span.ts";
import type { Attributes, Span, SpanCoreFields, StatusCode, TraceStatus } from "../types/index.ts";
import { LightningError, ValidationError } from "../types/index.ts";
import { formatExceptionAttributes } from "./attributes.ts";
import {
  Tracer,
  runRecorded,
  withActiveTracer,
  type CreateSpanOptions,
  type DeferredSpans,
  type OperationContextOptions,
  type OperationRecorder,
  type TraceContextOptions,
} from "./base.ts";
import { ROLLOUT_SCOPE_KEY } from "./context.ts";
import { DEFAULT_DELIVERY_LIMITS, type DeliveryLimits } from "./delivery.ts";
import { getLogger } from "../platform/log.ts";
import { lightningTracing } from "./processor.ts";
import { RolloutScope } from "./scope.ts";

const log = getLogger("agentlightning.tracer");

/**
 * `maxBufferedSpans`, `maxBufferedBytes`, `retryMinDelaySeconds`, `retryMaxDelaySeconds` and
 * `finalFlushTimeoutSeconds` bound how spans wait for a store that is briefly away (DeliveryLimits,
 * docs/tracing.md).
 */
export interface OtelTracerOptions extends Partial<DeliveryLimits> {
  /** Spans per store delivery (default 512). */
  maxBatchSize?: number;
  /** Seconds an ended span may wait before it is sent while the attempt runs (default 1). */
  flushIntervalSeconds?: number;
}

export const secondsToHrTime = (s: number): HrTime => {
  const sec = Math.floor(s);
  return [sec, Math.round((s - sec) * 1e9)];
};

const CODE: Record<StatusCode, SpanStatusCode> = { UNSET: SpanStatusCode.UNSET, OK: SpanStatusCode.OK, ERROR: SpanStatusCode.ERROR };
const NAME: StatusCode[] = ["UNSET", "OK", "ERROR"];

function coreFields(span: ApiSpan): SpanCoreFields {
  const r = span as unknown as ReadableSpan;
  return {
    name: r.name,
    status: { status_code: NAME[r.status.code] ?? "UNSET", description: r.status.message ?? null },
    attributes: { ...(r.attributes as Attributes) },
    start_time: hrTimeToSeconds(r.startTime),
    end_time: hrTimeToSeconds(r.endTime),
  };
}

class OtelOperationRecorder implements OperationRecorder {
  ended = false;
  constructor(private readonly span: ApiSpan) {}
  recordException(error: unknown): void {
    this.span.setAttributes(formatExceptionAttributes(error));
    this.span.recordException(error instanceof Error ? error : String(error));
  }
  recordAttributes(attributes: Attributes): void {
    this.span.setAttributes(attributes);
  }
  recordStatus(code: StatusCode, description: string | null = null): void {
    this.span.setStatus(description === null ? { code: CODE[code] } : { code: CODE[code], message: description });
  }
  getRecordedSpan(): SpanCoreFields {
    if (!this.ended) throw new LightningError("The operation has not ended yet; its span is available after the block exits");
    return coreFields(this.span);
  }
}

export class OtelTracer extends Tracer {
  static readonly acceptedOptions = [
    "maxBatchSize",
    "flushIntervalSeconds",
    ...(Object.keys(DEFAULT_DELIVERY_LIMITS) as (keyof DeliveryLimits)[]),
  ] as const;
  private otel: ApiTracer | null = null;
  private lastScope: RolloutScope | null = null;
  private readonly maxBatchSize: number;
  private readonly flushIntervalMs: number;
  private readonly delivery: DeliveryLimits;

  constructor(private readonly options: OtelTracerOptions = {}) {
    super();
    this.maxBatchSize = options.maxBatchSize ?? 512;
    this.flushIntervalMs = (options.flushIntervalSeconds ?? 1) * 1000;
    if (!(this.maxBatchSize >= 1)) throw new ValidationError("maxBatchSize must be >= 1", ["maxBatchSize"]);
    this.delivery = { ...DEFAULT_DELIVERY_LIMITS };
    for (const key of Object.keys(DEFAULT_DELIVERY_LIMITS) as (keyof DeliveryLimits)[]) {
      const v = options[key];
      if (v === undefined) continue;
      if (typeof v !== "number" || !(v >= 0)) throw new ValidationError(`${key} must be a number >= 0`, [key]);
      this.delivery[key] = v;
    }
    if (this.delivery.retryMaxDelaySeconds < this.delivery.retryMinDelaySeconds) {
      throw new ValidationError("retryMaxDelaySeconds must be >= retryMinDelaySeconds", ["retryMaxDelaySeconds"]);
    }
  }

  override clone(): OtelTracer {
    return new OtelTracer(this.options);
  }

  override initWorker(workerId: number, store?: Parameters<Tracer["initWorker"]>[1]): void {
    super.initWorker(workerId, store);
    this.otel ??= lightningTracing().provider.getTracer("agentlightning");
  }

  private tracer(): ApiTracer {
    if (this.otel === null) throw new LightningError("OtelTracer is not initialized; call initWorker() first");
    return this.otel;
  }

  async traceContext<T>(options: TraceContextOptions, fn: () => T | Promise<T>): Promise<T> {
    this.tracer();
    const { rolloutId, attemptId, store } = this.checkIds(options);
    if (rolloutId !== null && store === null) {
      throw new ValidationError("A store is required to trace a rollout attempt; give one to initWorker", ["store"]);
    }
    const scope = new RolloutScope({
      store,
      rolloutId,
      attemptId,
      maxBatchSize: this.maxBatchSize,
      flushIntervalMs: this.flushIntervalMs,
      delivery: this.delivery,
    });
    this.lastScope = scope;
    let result: T;
    try {
      result = await withActiveTracer(
        this,
        async () => await fn(),
        (ctx) => ctx.setValue(ROLLOUT_SCOPE_KEY, scope),
      );
    } catch (err) {
      // The agent's error wins; a delivery failure on top of it is only logged.
      await scope.close().catch((e: unknown) => log.error("Span delivery also failed", e));
      throw err;
    }
    await scope.close(options.deferFinalDelivery === true);
    return result;
  }

  override takeDeferredSpans(): DeferredSpans | null {
    return this.lastScope?.takeDeferred() ?? null;
  }

  getLastTrace(): Span[] {
    return this.lastScope?.spans() ?? [];
  }

  createSpan(name: string, options: CreateSpanOptions = {}): SpanCoreFields {
    const t = options.timestamp != null ? secondsToHrTime(options.timestamp) : undefined;
    const span = this.tracer().startSpan(name, { attributes: options.attributes ?? {}, startTime: t }, context.active());
    if (options.status) setStatus(span, options.status);
    span.end(t);
    return coreFields(span);
  }

  operationContext<T>(name: string, options: OperationContextOptions, fn: (op: OperationRecorder) => T): T {
    if (options.endTime != null) log.warn("OtelTracer ignores an explicit operation end time; the span ends when the block exits");
    const start = options.startTime != null ? secondsToHrTime(options.startTime) : undefined;
    return this.tracer().startActiveSpan(name, { attributes: options.attributes ?? {}, startTime: start }, (span) => {
      const recorder = new OtelOperationRecorder(span);
      return runRecorded(recorder, fn, () => {
        span.end();
        recorder.ended = true;
      });
    });
  }
}

function setStatus(span: ApiSpan, status: TraceStatus): void {
  span.setStatus(status.description ? { code: CODE[status.status_code], message: status.description } : { code: CODE[status.status_code] });
}

/** The OpenTelemetry API tracer to instrument your own code with; its spans inside a rollout reach the store. */
export const getOtelTracer = (name = "agentlightning.user"): ApiTracer => {
  lightningTracing();
  return trace.getTracer(name);
};

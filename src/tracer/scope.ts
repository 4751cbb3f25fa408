/**
 * One traced attempt: collects the spans that end inside it and delivers them to the store in batches.
 *
 * Sequence ids follow span START order. A span gets its index within the attempt when it starts; the
 * first delivery asks the store's per-rollout counter once (`getNextSpanSequenceId`) for a base, and
 * every span is stored as `base + index`. So ids never go backwards across batches even when a parent
 * ends (and is sent) after its children, spans of an earlier attempt of the same rollout stay below
 * this attempt's, and spans written by others before (an LLM proxy) stay below what follows them.
 * `addManySpans` raises the store counter past the ids used, so a later `getNextSpanSequenceId` (the
 * runner's reward span) lands after them. The cost is one counter request per attempt, except over
 * HTTP when all of an attempt's spans go in one batch: then the server numbers them in the same request.
 */
import { LightningStoreClient } from "../client/client.ts";
import type { LightningStore, OtelReadableSpanLike } from "../store/base.ts";
import { spanFromOpenTelemetry } from "../store/otel-span.ts";
import type { Span } from "../types/index.ts";
import type { DeferredSpans } from "./base.ts";
import { getLogger } from "./log.ts";

const log = getLogger("agentlightning.tracer");

export interface ScopeOptions {
  store: LightningStore | null;
  rolloutId: string | null;
  attemptId: string | null;
  /** Spans per delivery; a full buffer is sent at once. */
  maxBatchSize: number;
  /** Ended spans wait at most this long before they are sent (they also act as attempt heartbeats). */
  flushIntervalMs: number;
}

function unrefTimer(t: ReturnType<typeof setTimeout>): void {
  if (typeof t === "object" && t !== null && "unref" in t) (t as { unref(): void }).unref();
  else (globalThis as { Deno?: { unrefTimer?(id: number): void } }).Deno?.unrefTimer?.(t as unknown as number);
}

export class RolloutScope {
  readonly store: LightningStore | null;
  readonly rolloutId: string | null;
  readonly attemptId: string | null;
  private nextIndex = 0;
  private pending: Span[] = [];
  private readonly delivered: Span[] = [];
  private base: number | null = null;
  private chain: Promise<void> = Promise.resolve();
  private timer: ReturnType<typeof setTimeout> | null = null;
  private failure: unknown = undefined;
  private closed = false;
  /** The last batch, kept back by `close(true)` until taken. */
  private deferred: Span[] | null = null;
  private deferredTaken = false;

  constructor(private readonly options: ScopeOptions) {
    this.store = options.rolloutId !== null ? options.store : null;
    this.rolloutId = options.rolloutId;
    this.attemptId = options.attemptId;
  }

  /** Called when a span starts inside this scope: its position in start order. */
  claimIndex(): number {
    return this.nextIndex++;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Called when a span of this scope ends. */
  add(otelSpan: OtelReadableSpanLike, index: number): void {
    const span = spanFromOpenTelemetry(otelSpan, this.rolloutId ?? "rollout-dummy", this.attemptId ?? "attempt-dummy", index);
    if (this.store === null) {
      // No store: the span is only kept for getLastTrace, numbered locally in start order.
      this.delivered.push(span);
      return;
    }
    this.pending.push(span);
    if (this.pending.length >= this.options.maxBatchSize) void this.flush();
    else if (this.timer === null) {
      this.timer = setTimeout(() => void this.flush(), this.options.flushIntervalMs);
      unrefTimer(this.timer);
    }
  }

  /** Sends everything ended so far; resolves when it (and every earlier delivery) is done. */
  flush(): Promise<void> {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const batch = this.pending;
    this.pending = [];
    if (batch.length > 0) {
      this.chain = this.chain.then(() =>
        this.send(batch).catch((err: unknown) => {
          if (this.failure === undefined) this.failure = err;
          log.error(`Failed to deliver ${batch.length} span(s) of rollout ${this.rolloutId} attempt ${this.attemptId} to the store`, err);
        }),
      );
    }
    return this.chain;
  }

  private async send(batch: Span[]): Promise<void> {
    const store = this.store!;
    batch.sort((a, b) => a.sequence_id - b.sequence_id);
    if (this.storeNumbers(batch)) {
      // Every span started so far is in this batch: the server's batch route numbers spans sent without
      // a sequence id consecutively, in order, in the same request, which saves the counter round trip.
      this.numbered(batch, await (store as LightningStoreClient).addManySpansForSequenceIds(unnumbered(batch)));
      return;
    }
    if (this.base === null) this.base = await store.getNextSpanSequenceId(this.rolloutId!, this.attemptId!);
    for (const s of batch) s.sequence_id = this.base + s.sequence_id;
    // Kept for getLastTrace even if the store refuses them: the trace happened.
    this.delivered.push(...batch);
    await store.addManySpans(batch);
  }

  /** True when the store can number `batch` itself: a client, nothing sent yet, and `batch` holds every span started. */
  private storeNumbers(batch: readonly Span[]): boolean {
    return this.base === null && this.store instanceof LightningStoreClient && this.delivered.length + batch.length === this.nextIndex;
  }

  /** Records the ids the store gave `batch` (sorted by local index), which it numbered consecutively. */
  private numbered(batch: Span[], sequenceIds: readonly number[]): void {
    const first = sequenceIds[0];
    if (first !== undefined) {
      this.base = first - batch[0]!.sequence_id;
      for (const s of batch) s.sequence_id += this.base;
    }
    this.delivered.push(...batch);
  }

  /**
   * Ends the scope: flushes, and throws the first delivery error (spans lost is a failed attempt).
   * With `deferLast`, a last batch the store can number itself is kept back for `takeDeferred()` instead.
   * Spans that end later (leaked async work) are still delivered, by their own timer.
   */
  async close(deferLast = false): Promise<void> {
    this.closed = true;
    this.pending.sort((a, b) => a.sequence_id - b.sequence_id);
    if (deferLast && this.pending.length > 0 && this.storeNumbers(this.pending)) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      this.deferred = this.pending;
      this.pending = [];
    }
    await this.flush();
    if (this.failure !== undefined) throw this.failure;
  }

  /** The batch `close(true)` kept back, handed over once (it counts in `spans()` until settled). */
  takeDeferred(): DeferredSpans | null {
    const batch = this.deferred;
    if (batch === null || this.deferredTaken) return null;
    this.deferredTaken = true;
    const settle = () => {
      if (this.deferred !== batch) throw new Error("deferred spans were already delivered or flushed");
      this.deferred = null;
    };
    return {
      spans: unnumbered(batch),
      delivered: (ids) => {
        settle();
        this.numbered(batch, ids);
      },
      flush: async () => {
        settle();
        this.pending = batch.concat(this.pending);
        await this.flush();
        if (this.failure !== undefined) throw this.failure;
      },
    };
  }

  /** The spans recorded so far, in sequence (start) order (a batch kept back: numbered by start order within the attempt). */
  spans(): Span[] {
    const all = this.deferred === null ? this.delivered : [...this.delivered, ...this.deferred];
    return [...all].sort((a, b) => a.sequence_id - b.sequence_id);
  }
}

/** Copies of `spans` without sequence ids, for a store that numbers them itself. */
const unnumbered = (spans: readonly Span[]): Span[] => spans.map((s) => ({ ...s, sequence_id: null }) as unknown as Span);

/**
 * One traced attempt: collects the spans that end inside it and delivers them to the store in batches,
 * riding out a store that is briefly away (docs/tracing.md).
 *
 * Sequence ids follow span START order (docs/departures.md#28). A span gets its index within the attempt
 * when it starts; the first delivery asks the store's per-rollout counter once (`getNextSpanSequenceId`)
 * for a base, and every span is stored as `base + index`. So ids never go backwards across batches even
 * when a parent ends (and is sent) after its children, spans of an earlier attempt of the same rollout
 * stay below this attempt's, and spans written by others before (an LLM proxy) stay below what follows
 * them. `addManySpans` raises the store counter past the ids used, so a later `getNextSpanSequenceId`
 * (the runner's reward span) lands after them. The cost is one counter request per attempt, except over
 * HTTP when all of an attempt's spans go in one batch: then the server numbers them in the same request.
 *
 * Delivery failures (docs/departures.md#29): a batch the store could not take because it was
 * unreachable (or answered 408, 429, 5xx) stays buffered and is tried again with backoff while the
 * attempt runs, and until a bounded final flush after it ends; the buffer is bounded in spans and bytes.
 * Retries store nothing twice: the store keeps the first copy of a (rollout, attempt, span_id), and a
 * span is resent with the same id. A batch the store numbered itself whose answer was lost is resent
 * with explicit ids; spans it turns out to have stored keep the ids the store gave them (looked up).
 * Spans that are never stored fail the attempt with a `SpanDeliveryError` saying how many and why.
 */
import { LightningStoreClient } from "../client/client.ts";
import type { LightningStore, OtelReadableSpanLike } from "../store/base.ts";
import { spanFromOpenTelemetry } from "../store/otel-span.ts";
import { jsonSpanSize } from "../store/span-size.ts";
import type { Span } from "../types/index.ts";
import type { DeferredSpans } from "./base.ts";
import {
  Backoff,
  DEFAULT_DELIVERY_LIMITS,
  SpanDeliveryError,
  describeError,
  isStoreUnavailable,
  monotonicMs,
  type DeliveryLimits,
} from "./delivery.ts";
import { platform } from "../platform/index.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.tracer");

export interface ScopeOptions {
  store: LightningStore | null;
  rolloutId: string | null;
  attemptId: string | null;
  /** Spans per delivery; a full buffer is sent at once. */
  maxBatchSize: number;
  /** Ended spans wait at most this long before they are sent (they also act as attempt heartbeats). */
  flushIntervalMs: number;
  /** Buffer bounds and retry timing; DEFAULT_DELIVERY_LIMITS where left out. */
  delivery?: Partial<DeliveryLimits>;
}

/** An ended span of this scope, with its start-order index (its `sequence_id` is the stored id once numbered). */
interface Entry {
  span: Span;
  readonly index: number;
  readonly bytes: number;
  /** Sent in a store-numbered request whose outcome is unknown: the store may hold it under an id it chose. */
  maybeStored: boolean;
}

/** Spans a query page asks for when looking up stored ids. */
const LOOKUP_PAGE = 500;

export class RolloutScope {
  readonly store: LightningStore | null;
  readonly rolloutId: string | null;
  readonly attemptId: string | null;
  private readonly limits: DeliveryLimits;
  private nextIndex = 0;
  /** Ended spans not stored yet, oldest first. */
  private pending: Entry[] = [];
  private pendingBytes = 0;
  /** Spans stored, or given up on: what `spans()` reports. */
  private readonly recorded: Entry[] = [];
  private base: number | null = null;
  /** False once a store-numbered request failed: from then on every span carries its id, so resending is safe. */
  private storeMayNumber = true;
  /** The delivery loop while it runs; one at a time, so batches go out in order. */
  private pump: Promise<void> | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly backoff: Backoff;
  /** Ends a backoff wait early (the attempt ended: the final flush starts at once). */
  private wake: (() => void) | null = null;
  /** Set by close(): when the final flush gives up on a store that stays away (`monotonicMs`). */
  private deadline: number | null = null;
  /** The failure of the outage in progress, if any (logged once per outage). */
  private outage: unknown = undefined;
  private undelivered = 0;
  /** Spans given up on, by reason. */
  private readonly reasons = new Map<string, number>();
  private firstFailure: unknown = undefined;
  private closed = false;
  /** The last batch, kept back by `close(true)` until taken. */
  private deferred: Entry[] | null = null;
  private deferredTaken = false;

  constructor(private readonly options: ScopeOptions) {
    this.store = options.rolloutId !== null ? options.store : null;
    this.rolloutId = options.rolloutId;
    this.attemptId = options.attemptId;
    this.limits = { ...DEFAULT_DELIVERY_LIMITS, ...options.delivery };
    this.backoff = new Backoff(this.limits.retryMinDelaySeconds * 1000, this.limits.retryMaxDelaySeconds * 1000);
  }

  /** Called when a span starts inside this scope: its position in start order. */
  claimIndex(): number {
    return this.nextIndex++;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private get where(): string {
    return `rollout ${this.rolloutId} attempt ${this.attemptId}`;
  }

  /** Called when a span of this scope ends. */
  add(otelSpan: OtelReadableSpanLike, index: number): void {
    const span = spanFromOpenTelemetry(otelSpan, this.rolloutId ?? "rollout-dummy", this.attemptId ?? "attempt-dummy", index);
    if (this.store === null) {
      // No store: the span is only kept for getLastTrace, numbered locally in start order.
      this.recorded.push({ span, index, bytes: 0, maybeStored: false });
      return;
    }
    const entry: Entry = { span, index, bytes: jsonSpanSize(span), maybeStored: false };
    if (this.pending.length >= this.limits.maxBufferedSpans || this.pendingBytes + entry.bytes > this.limits.maxBufferedBytes) {
      const why = `dropped because the delivery buffer was full (${this.limits.maxBufferedSpans} spans or ${this.limits.maxBufferedBytes} bytes, maxBufferedSpans / maxBufferedBytes)`;
      this.giveUp([entry], why, this.outage ?? new Error("span delivery buffer full"));
      return;
    }
    this.pending.push(entry);
    this.pendingBytes += entry.bytes;
    if (this.pending.length >= this.options.maxBatchSize) void this.flush();
    else if (this.timer === null) {
      this.timer = setTimeout(() => void this.flush(), this.options.flushIntervalMs);
      platform.unrefTimer(this.timer);
    }
  }

  /** Sends everything ended so far; resolves when it is stored or given up on (never rejects). */
  flush(): Promise<void> {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.pump === null) {
      if (this.pending.length === 0) return Promise.resolve();
      this.pump = this.deliverPending().finally(() => {
        this.pump = null;
      });
    }
    // A loop that has just found nothing left may end without the spans that ended since: go again then.
    return this.pump.then(() => (this.pending.length > 0 ? this.flush() : undefined));
  }

  /** The delivery loop: one batch at a time, oldest spans first, until nothing is pending. */
  private async deliverPending(): Promise<void> {
    while (this.pending.length > 0) {
      this.pending.sort((a, b) => a.index - b.index);
      const batch = this.pending.slice(0, this.options.maxBatchSize);
      try {
        await this.send(batch);
        this.removePending(batch);
        this.recorded.push(...batch);
        if (this.outage !== undefined) log.info(`The store is back; delivering the buffered spans of ${this.where}`);
        this.outage = undefined;
        this.backoff.reset();
      } catch (err) {
        if (!isStoreUnavailable(err)) {
          this.removePending(batch);
          this.giveUp(batch, `refused by the store (${describeError(err)})`, err);
          continue;
        }
        if (this.deadline !== null && monotonicMs() >= this.deadline) {
          const all = this.pending;
          this.pending = [];
          this.pendingBytes = 0;
          this.giveUp(
            all,
            `still waiting when the final flush gave up: the store was unreachable for ${this.limits.finalFlushTimeoutSeconds} s after the attempt ended (finalFlushTimeoutSeconds; last error: ${describeError(err)})`,
            err,
          );
          return;
        }
        if (this.outage === undefined) {
          log.warn(`The store is unreachable; keeping ${this.pending.length} span(s) of ${this.where} and trying again with backoff`, err);
        }
        this.outage = err;
        await this.wait(this.backoff.next());
      }
    }
  }

  /** Waits `ms` (at most until the deadline); close() ends the wait early. Unref'd only while the attempt runs. */
  private wait(ms: number): Promise<void> {
    const cap = this.deadline === null ? ms : Math.max(0, Math.min(ms, this.deadline - monotonicMs()));
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.wake = null;
        resolve();
      };
      const t = setTimeout(done, cap);
      // While the attempt runs the agent keeps the process alive; the final flush must keep it alive itself.
      if (!this.closed) platform.unrefTimer(t);
      this.wake = done;
    });
  }

  private removePending(batch: readonly Entry[]): void {
    const sent = new Set(batch);
    this.pending = this.pending.filter((e) => !sent.has(e));
    for (const e of batch) this.pendingBytes -= e.bytes;
  }

  /** Counts `entries` as not delivered (kept for getLastTrace: the trace happened) and logs why, once per reason. */
  private giveUp(entries: readonly Entry[], why: string, err: unknown): void {
    if (entries.length === 0) return;
    this.recorded.push(...entries);
    this.undelivered += entries.length;
    const before = this.reasons.get(why) ?? 0;
    this.reasons.set(why, before + entries.length);
    if (this.firstFailure === undefined) this.firstFailure = err;
    if (before === 0) log.error(`${entries.length} span(s) of ${this.where} could not be delivered to the store: ${why}`, err);
  }

  private async send(batch: Entry[]): Promise<void> {
    const store = this.store!;
    if (this.storeNumbers(batch)) {
      // Every span started so far is in this batch: the server's batch route numbers spans sent without
      // a sequence id consecutively, in order, in the same request, which saves the counter round trip.
      let ids: number[];
      try {
        ids = await (store as LightningStoreClient).addManySpansForSequenceIds(unnumbered(batch));
      } catch (err) {
        this.storeNumberingFailed(batch);
        throw err;
      }
      await this.numbered(batch, ids);
      return;
    }
    if (this.base === null) this.base = await store.getNextSpanSequenceId(this.rolloutId!, this.attemptId!);
    // Fresh objects: a span handed out by getLastTrace or kept by an in-process store is never changed.
    for (const e of batch) e.span = { ...e.span, sequence_id: this.base + e.index };
    const stored = await store.addManySpans(batch.map((e) => e.span));
    // Spans the store skipped as duplicates were stored before: by an earlier try of this same request
    // (same id, nothing to do), or by a store-numbered request whose answer was lost (look up its ids).
    const unsure = batch.filter((e) => e.maybeStored);
    if (unsure.length > 0) {
      const inserted = new Set(stored.map((s) => s.span_id));
      for (const e of unsure) if (inserted.has(e.span.span_id)) e.maybeStored = false;
      await this.lookUpStoredIds(unsure.filter((e) => e.maybeStored));
    }
  }

  /** A store-numbered request failed: it may have stored the batch anyway; resend with explicit ids from now on. */
  private storeNumberingFailed(batch: readonly Entry[]): void {
    this.storeMayNumber = false;
    for (const e of batch) e.maybeStored = true;
  }

  /** True when the store can number `batch` itself: a client, nothing sent yet, and `batch` holds every span started. */
  private storeNumbers(batch: readonly Entry[]): boolean {
    return this.storeMayNumber && this.base === null && this.store instanceof LightningStoreClient && batch.length === this.nextIndex;
  }

  /** Records the ids the store gave `batch` (sorted by index, which it numbered consecutively). */
  private async numbered(batch: Entry[], sequenceIds: readonly number[]): Promise<void> {
    const first = sequenceIds[0];
    if (sequenceIds.length === batch.length && first !== undefined) {
      this.base = first - batch[0]!.index;
      for (const e of batch) e.span = { ...e.span, sequence_id: this.base + e.index };
      return;
    }
    // The store skipped some as duplicates: the client retried a request whose first answer was lost.
    this.storeNumberingFailed(batch);
    await this.lookUpStoredIds(batch);
  }

  /**
   * Sets each entry's id to the one the store holds for its span (paging through the attempt's spans).
   * The spans are stored either way: a failed lookup is logged, and they keep ids by start order.
   */
  private async lookUpStoredIds(entries: readonly Entry[]): Promise<void> {
    const wanted = new Map(entries.map((e) => [e.span.span_id, e]));
    try {
      for (let offset = 0; wanted.size > 0; ) {
        const page = await this.store!.querySpans(this.rolloutId!, {
          attempt_id: this.attemptId,
          limit: LOOKUP_PAGE,
          offset,
          sort_by: "sequence_id",
        });
        for (const s of page.items) {
          const e = wanted.get(s.span_id);
          if (e === undefined) continue;
          e.span = { ...e.span, sequence_id: s.sequence_id };
          wanted.delete(s.span_id);
        }
        offset += page.items.length;
        if (page.items.length === 0 || offset >= page.total) break;
      }
    } catch (err) {
      log.warn(
        `Could not look up the sequence ids the store gave ${wanted.size} span(s) of ${this.where}; getLastTrace numbers them by start order`,
        err,
      );
    }
    for (const e of entries) e.maybeStored = false;
    // Not found (evicted since) or not looked up: the id this scope would have given them.
    for (const e of wanted.values()) e.span = { ...e.span, sequence_id: (this.base ?? 0) + e.index };
  }

  /** Throws what went wrong so far, if anything: spans lost is a failed attempt. */
  private throwIfUndelivered(): void {
    if (this.undelivered === 0) return;
    const reasons = [...this.reasons].map(([why, n]) => `${n} ${why}`);
    throw new SpanDeliveryError(this.undelivered, reasons, this.where, this.firstFailure);
  }

  /**
   * Ends the scope: flushes — trying for up to `finalFlushTimeoutSeconds` while the store is unreachable —
   * and throws a `SpanDeliveryError` when spans could not be stored. With `deferLast`, a last batch the store
   * can number itself is kept back for `takeDeferred()` instead. Spans that end later (leaked async work)
   * are still delivered, by their own timer.
   */
  async close(deferLast = false): Promise<void> {
    this.closed = true;
    this.deadline = monotonicMs() + this.limits.finalFlushTimeoutSeconds * 1000;
    this.wake?.();
    this.pending.sort((a, b) => a.index - b.index);
    if (deferLast && this.pump === null && this.pending.length > 0 && this.storeNumbers(this.pending)) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      this.deferred = this.pending;
      this.pending = [];
      this.pendingBytes = 0;
    }
    await this.flush();
    this.throwIfUndelivered();
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
    const deliver = async () => {
      this.pending = batch.concat(this.pending);
      for (const e of batch) this.pendingBytes += e.bytes;
      await this.flush();
      this.throwIfUndelivered();
    };
    return {
      spans: unnumbered(batch),
      delivered: async (ids) => {
        settle();
        await this.numbered(batch, ids);
        this.recorded.push(...batch);
      },
      flush: async () => {
        settle();
        await deliver();
      },
      redeliver: async () => {
        settle();
        this.storeNumberingFailed(batch);
        await deliver();
      },
    };
  }

  /** The spans recorded so far, in sequence (start) order (a batch kept back: numbered by start order within the attempt). */
  spans(): Span[] {
    const all = this.deferred === null ? this.recorded : [...this.recorded, ...this.deferred];
    return [...all].sort((a, b) => a.index - b.index).map((e) => e.span);
  }
}

/** Copies of the spans without sequence ids, for a store that numbers them itself. */
const unnumbered = (entries: readonly Entry[]): Span[] => entries.map((e) => ({ ...e.span, sequence_id: null }) as unknown as Span);

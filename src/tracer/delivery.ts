/**
 * Getting writes to a store that is briefly away (a server restart, a proxy answering 503): which errors
 * are worth another try, the backoff between tries, and the error an attempt fails with when its spans
 * could not be delivered in the end. Used by the tracer's span delivery (scope.ts) and by the runner's
 * end-of-attempt writes. See docs/tracing.md.
 */
import { StoreConnectionError, StoreHttpError } from "../client/errors.ts";
import { LightningError } from "../types/index.ts";

/** How a trace context buffers and retries its spans (OtelTracer options, in seconds and counts). */
export interface DeliveryLimits {
  /** Ended spans kept while they wait for the store; more are dropped (and fail the attempt). */
  maxBufferedSpans: number;
  /** The same bound in bytes (JSON size of the buffered spans). */
  maxBufferedBytes: number;
  /** First wait after a failed delivery; doubles on each failure in a row. */
  retryMinDelaySeconds: number;
  /** Longest wait between two tries. */
  retryMaxDelaySeconds: number;
  /** How long the end of a trace context keeps trying before it gives up on the spans left. */
  finalFlushTimeoutSeconds: number;
}

export const DEFAULT_DELIVERY_LIMITS: Readonly<DeliveryLimits> = Object.freeze({
  maxBufferedSpans: 10_000,
  maxBufferedBytes: 32 * 1024 * 1024,
  retryMinDelaySeconds: 0.5,
  retryMaxDelaySeconds: 8,
  finalFlushTimeoutSeconds: 30,
});

/** Thrown at the end of a trace context when some of its spans never reached the store. */
export class SpanDeliveryError extends LightningError {
  override readonly errorType = "SpanDeliveryError";
  constructor(
    /** How many spans were not stored. */
    readonly undelivered: number,
    /** One line per cause: how many spans and why. */
    readonly reasons: readonly string[],
    where: string,
    cause: unknown,
  ) {
    super(`${undelivered} span(s) of ${where} could not be delivered to the store: ${reasons.join("; ")}`, { cause });
  }
}

/** True for errors that say the store could not be reached or asked to be tried again later (408, 429, 5xx). */
export function isStoreUnavailable(err: unknown): boolean {
  if (err instanceof StoreConnectionError) return true;
  return err instanceof StoreHttpError && (err.status === 408 || err.status === 429 || err.status >= 500);
}

/** A short description of an error for messages. */
export const describeError = (err: unknown): string => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));

/**
 * Exponential backoff with jitter: each delay is the current step times a random factor in [0.5, 1]
 * (so runners that lost the same server do not all come back at once); the step doubles up to the maximum.
 */
export class Backoff {
  private step: number;
  constructor(
    private readonly minMs: number,
    private readonly maxMs: number,
    private readonly random: () => number = Math.random,
  ) {
    this.step = minMs;
  }
  next(): number {
    const d = this.step * (0.5 + this.random() / 2);
    this.step = Math.min(this.step * 2, this.maxMs);
    return d;
  }
  reset(): void {
    this.step = this.minMs;
  }
}

/** Milliseconds on a clock that only goes forward (deadlines must not move with the wall clock). */
export const monotonicMs = (): number => performance.now();

/**
 * Runs `fn` until it succeeds, trying again after a backoff wait while the error says the store is
 * unavailable and `deadlineMs` (a `monotonicMs()` time) has not passed; any other error, or the last
 * one at the deadline, is thrown. `onRetry` hears each failure that is tried again.
 */
export async function retryWhileUnavailable<T>(
  fn: () => Promise<T>,
  o: { deadlineMs: number; minDelayMs: number; maxDelayMs: number; onRetry?: (err: unknown, waitMs: number) => void },
): Promise<T> {
  const backoff = new Backoff(o.minDelayMs, o.maxDelayMs);
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      const left = o.deadlineMs - monotonicMs();
      if (!isStoreUnavailable(err) || left <= 0) throw err;
      const wait = Math.min(backoff.next(), left);
      o.onRetry?.(err, wait);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

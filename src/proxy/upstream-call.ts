/**
 * One request sent to a model's upstreams: each attempt goes to the next upstream in turn (round robin),
 * has its own timeout, and a 429, a 5xx, a connection error or a timeout is retried after a backoff
 * (exponential with jitter, or the upstream's `Retry-After` when it is short) until the entry's retries
 * are spent. The last upstream answer is then the caller's; no answer at all is a 502 (unreachable)
 * or a 504 (timed out).
 */
import { LightningError } from "../types/errors.ts";
import type { ResolvedModel } from "./llm-proxy-config.ts";

/** Milliseconds to wait before retry `retry` (0-based); `retryAfterS` is the upstream's `Retry-After`, if any. */
export type RetryDelay = (retry: number, retryAfterS: number | null) => number;

/** Longest `Retry-After` the proxy waits for; a longer one gets the ordinary backoff (and the next upstream). */
export const MAX_RETRY_AFTER_S = 10;

/** 0.25 s, 0.5 s, 1 s, … (at most 8 s), times a random factor in [0.5, 1.5) so callers do not retry in step. */
export function exponentialBackoff(random: () => number = Math.random): RetryDelay {
  return (retry, retryAfterS) => {
    if (retryAfterS !== null && retryAfterS <= MAX_RETRY_AFTER_S) return retryAfterS * 1000;
    return Math.min(8000, 250 * 2 ** retry) * (0.5 + random());
  };
}

/** Seconds from a `Retry-After` header (delta-seconds or an HTTP date), or null. */
export function parseRetryAfter(header: string | null, nowMs: number = Date.now()): number | null {
  if (header === null || header.trim() === "") return null;
  const n = Number(header);
  if (Number.isFinite(n)) return Math.max(0, n);
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, (at - nowMs) / 1000);
}

/** No upstream answered: every attempt failed to connect (502) or timed out (504). */
export class UpstreamUnavailableError extends LightningError {
  override readonly errorType = "UpstreamUnavailableError";
  constructor(
    override readonly status: 502 | 504,
    message: string,
    readonly upstream: string,
    readonly attempts: number,
  ) {
    super(message);
  }
}

/** The attempt's deadline passed (the abort reason of its signal). */
export class UpstreamTimeoutError extends LightningError {
  constructor(seconds: number) {
    super(`the upstream did not answer within ${seconds} s`);
  }
}

export interface UpstreamAnswer {
  /** The upstream's response: 2xx, a status not worth retrying, or the last one once retries are spent. */
  response: Response;
  /** The body, already read, unless the call was made with `stream` (then read it from `response`). */
  text: string | null;
  upstream: string;
  attempts: number;
  /** The attempt's signal: aborted when its timer fires or the call is cancelled. */
  signal: AbortSignal;
  /** Starts the attempt's timer again (a stream's timeout runs between chunks). */
  touch(): void;
  /** Clears the timer; call it when done with the response. */
  done(): void;
}

export interface UpstreamCallOptions {
  model: ResolvedModel;
  /** The URL of the call on an upstream, from its base URL (e.g. the base plus `/chat/completions`). */
  url: (upstream: string) => string;
  body: string;
  /** Headers for the upstream: its key, what is passed on from the caller (the agent's name) [none]. */
  headers?: Record<string, string>;
  /** Gives the upstream base URL of each attempt (the proxy's round robin). */
  pickUpstream: () => string;
  /** Cancels the whole call (the proxy is stopping or the caller went away). */
  signal: AbortSignal;
  /** Streaming: the body is left unread and the timer keeps running until `done()`. */
  stream: boolean;
  retryDelay: RetryDelay;
  /** Reaches the upstream for a stream (the body is read as it comes). */
  fetch: typeof fetch;
  /** Reaches the upstream for a whole answer (may collect the body itself, e.g. over undici's pools). */
  fetchWhole: typeof fetch;
}

const retryable = (status: number): boolean => status === 429 || status >= 500;

/** Waits `ms`, or rejects with the signal's reason as soon as it is aborted (the timer is cleared). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** An attempt's abort controller: aborted by its timer or by the call's signal. */
function attemptController(outer: AbortSignal, timeoutS: number) {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const onOuterAbort = () => controller.abort(outer.reason);
  outer.addEventListener("abort", onOuterAbort, { once: true });
  const touch = () => {
    clearTimeout(timer);
    timer = setTimeout(() => controller.abort(new UpstreamTimeoutError(timeoutS)), timeoutS * 1000);
  };
  const done = () => {
    clearTimeout(timer);
    outer.removeEventListener("abort", onOuterAbort);
  };
  touch();
  return { signal: controller.signal, touch, done };
}

export async function callUpstream(o: UpstreamCallOptions): Promise<UpstreamAnswer> {
  const headers: Record<string, string> = {
    ...o.headers,
    "content-type": "application/json",
    accept: o.stream ? "text/event-stream" : "application/json",
  };
  const tries = o.model.max_retries + 1;
  for (let attempt = 1; ; attempt++) {
    const upstream = o.pickUpstream();
    const a = attemptController(o.signal, o.model.timeout_s);
    let response: Response;
    let text: string | null = null;
    try {
      const send = o.stream ? o.fetch : o.fetchWhole;
      response = await send(o.url(upstream), { method: "POST", headers, body: o.body, signal: a.signal });
      if (!o.stream || !response.ok) text = await response.text();
    } catch (e) {
      a.done();
      if (o.signal.aborted) throw o.signal.reason;
      const timedOut = a.signal.reason instanceof UpstreamTimeoutError;
      if (attempt < tries) {
        await sleep(o.retryDelay(attempt - 1, null), o.signal);
        continue;
      }
      const why = timedOut
        ? (a.signal.reason as Error).message
        : `cannot reach the upstream: ${e instanceof Error ? e.message : String(e)}`;
      throw new UpstreamUnavailableError(
        timedOut ? 504 : 502,
        `${why} (${upstream}, ${attempt} attempt${attempt > 1 ? "s" : ""})`,
        upstream,
        attempt,
      );
    }
    if (retryable(response.status) && attempt < tries) {
      a.done();
      await sleep(o.retryDelay(attempt - 1, parseRetryAfter(response.headers.get("retry-after"))), o.signal);
      continue;
    }
    if (text !== null) a.done();
    return { response, text, upstream, attempts: attempt, signal: a.signal, touch: a.touch, done: a.done };
  }
}

/**
 * The messages between the primary of `agl store --workers N` and its workers, over the platform's IPC
 * channel (JSON). Both ends are this code, started from the same command line.
 */
import { decodeBase64, encodeBase64 } from "hono/utils/encode";
import type { StoreChange } from "../../store/core.ts";
import type { IdempotentAnswer } from "../idempotency.ts";
import type { ProcessMetrics } from "../metrics.ts";

/** An answer on the wire: its body as text when it is UTF-8 (store answers are JSON), else base64. */
export interface WireAnswer {
  status: number;
  headers: [string, string][];
  text?: string;
  base64?: string;
}

/** What a claim came to, on the wire (see `IdempotencyClaim`). */
export type WireClaim = { kind: "run" } | { kind: "reused" } | { kind: "replay"; answer: WireAnswer };

/** Primary to worker. */
export type ToWorker =
  /** Serve on `port`; `name` is the worker as the primary's log names it. */
  | { t: "start"; port: number; name: string }
  /** Another process committed this change: wake the waits it concerns. */
  | { t: "change"; change: StoreChange }
  /** The answer to claim `id`. */
  | { t: "claimed"; id: number; claim: WireClaim }
  /** Send your metrics for gathering `id` (another worker's scrape). */
  | { t: "collect"; id: number }
  /** The other workers' metrics for this worker's scrape `id`. */
  | { t: "gathered"; id: number; metrics: ProcessMetrics[] }
  /** Finish the requests in flight and exit. */
  | { t: "stop" };

/** Worker to primary. */
export type ToPrimary =
  /** Listening on the channel: the primary may send "start". */
  | { t: "ready" }
  /** Serving. */
  | { t: "listening" }
  /** This worker committed this change. */
  | { t: "change"; change: StoreChange }
  /** Decide the request with this scope and fingerprint (`IdempotencyBackend.claim`). */
  | { t: "claim"; id: number; scope: string; fingerprint: string }
  /** Claim `id` (a "run") has finished with this answer to remember, or none. */
  | { t: "finish"; id: number; answer: WireAnswer | null }
  /** A scrape here: gather the other workers' metrics (answered by "gathered" with this `id`). */
  | { t: "gather"; id: number }
  /** This worker's metrics, for gathering `id`. */
  | { t: "collected"; id: number; metrics: ProcessMetrics };

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

export function answerToWire(a: IdempotentAnswer): WireAnswer {
  try {
    return { status: a.status, headers: a.headers, text: strictUtf8.decode(a.body) };
  } catch {
    return {
      status: a.status,
      headers: a.headers,
      base64: encodeBase64(a.body.buffer.slice(a.body.byteOffset, a.body.byteOffset + a.body.byteLength)),
    };
  }
}

export function answerFromWire(w: WireAnswer): IdempotentAnswer {
  const body = w.text !== undefined ? new TextEncoder().encode(w.text) : decodeBase64(w.base64 ?? "");
  return { status: w.status, headers: w.headers, body };
}

/** The platform's end of a channel (`ClusterWorker` in the primary, `ClusterPrimary` in a worker). */
interface Port {
  send(message: unknown): void;
  onMessage(handler: (message: unknown) => void): void;
}

/** One end of the channel between the primary and a worker, typed by what it sends and what it receives. */
export interface Channel<Out, In> {
  send(message: Out): void;
  onMessage(handler: (message: In) => void): void;
}

/**
 * The messages sent in one turn of the event loop go as one array: a busy worker asks about many keyed
 * requests a turn, and each message on the channel is a write and a read of its own.
 */
export function batchedChannel<Out extends { t: string }, In extends { t: string }>(
  port: Port,
  schedule: (fn: () => void) => void,
): Channel<Out, In> {
  let pending: Out[] = [];
  const flush = () => {
    const batch = pending;
    pending = [];
    port.send(batch);
  };
  return {
    send(message) {
      if (pending.length === 0) schedule(flush);
      pending.push(message);
    },
    onMessage(handler) {
      port.onMessage((raw) => {
        // Anything else on the channel is not ours.
        if (!Array.isArray(raw)) return;
        for (const m of raw) if (typeof m === "object" && m !== null && typeof (m as { t?: unknown }).t === "string") handler(m as In);
      });
    },
  };
}

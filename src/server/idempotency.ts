/**
 * Idempotent writes (docs/departures.md#23, docs/http-api.md): a write that carries an `Idempotency-Key`
 * header (the name of the IETF httpapi draft) runs once; the same request sent again with the same key
 * gets the first answer (status, body, `content-type` and `preference-applied`) plus
 * `idempotent-replayed: true`, so a client that lost an answer can retry without writing twice.
 *
 * - Keys are scoped by method, path and `Authorization` header: the same key on another route or with
 *   another token is another call.
 * - A retry that arrives while the first request still runs waits for it, then gets its answer.
 * - The same key with a different body (or `Prefer` header) is a 422 `IdempotencyKeyReused`.
 * - Answers the client would retry anyway (408, 429, 5xx) are not remembered: the retry runs again.
 * - Answers are remembered in memory for `ttlSeconds`, at most `maxKeys` of them and `maxBytes` of
 *   bodies; the least recently used go first. A request without the header runs as it always did.
 * - Where the answers are kept is an `IdempotencyBackend`: this process's `IdempotencyCache`, or, for
 *   the workers of `agl store --workers N`, the primary's (server/cluster/), so a retry that reaches
 *   another worker still gets the first answer.
 */
import type { MiddlewareHandler } from "hono";
import { z } from "zod";
import { LightningError, parseOrThrow } from "../types/index.ts";
import { silentLogger, type LogWriter } from "../platform/log.ts";

export const IDEMPOTENCY_KEY_HEADER = "idempotency-key";
/** Response header set on a replayed answer. */
export const IDEMPOTENT_REPLAYED_HEADER = "idempotent-replayed";

export const DEFAULT_IDEMPOTENCY_TTL_SECONDS = 600;
export const DEFAULT_IDEMPOTENCY_MAX_KEYS = 10_000;
export const DEFAULT_IDEMPOTENCY_MAX_BYTES = 64 * 1024 * 1024;
/** Longest key accepted (a UUID is 36 characters). */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

export interface IdempotencyOptions {
  /** How long an answer is remembered, in seconds. Default 600. */
  ttlSeconds?: number;
  /** How many answers are remembered at most. Default 10,000. */
  maxKeys?: number;
  /** Total bytes of remembered answer bodies at most; a larger single answer is not remembered. Default 64 MiB. */
  maxBytes?: number;
  /** Milliseconds since the epoch (tests set it). Default `Date.now`. */
  now?: () => number;
}

/** The same key sent again with a different request (draft: 422). */
export class IdempotencyKeyReusedError extends LightningError {
  override readonly errorType = "IdempotencyKeyReused";
  override readonly status = 422;
}

/** A final answer as it is replayed: status, the headers of `REPLAYED_HEADERS`, body. */
export interface IdempotentAnswer {
  status: number;
  headers: [string, string][];
  body: Uint8Array;
}

interface RememberedAnswer extends IdempotentAnswer {
  fingerprint: string;
  expiresAt: number;
}

/**
 * What a backend decided for a request with a key: replay the first answer; refuse a different request
 * under a key already used; or run it, then `finish` with its final answer (null: nothing to remember,
 * a retry runs again). A request with the key of one still running is decided once that one finished.
 */
export type IdempotencyClaim =
  | { kind: "replay"; answer: IdempotentAnswer }
  | { kind: "reused" }
  | { kind: "run"; finish(answer: IdempotentAnswer | null): void };

/** Where answers are kept (see the module comment). */
export interface IdempotencyBackend {
  /** Largest answer body kept; a larger one is not remembered. */
  readonly maxBytes: number;
  /** Decides a request: `scope` is its method, path, token and key; `fingerprint` tells a retry from another request. */
  claim(scope: string, fingerprint: string): IdempotencyClaim | Promise<IdempotencyClaim>;
}

const REUSED: IdempotencyClaim = Object.freeze({ kind: "reused" });

interface RunningRequest {
  fingerprint: string;
  finished: Promise<void>;
}

/** Response headers that belong to the answer itself (CORS and the like are the current request's). */
const REPLAYED_HEADERS = ["content-type", "preference-applied"];
/** What the client retries (src/client/client.ts): such an answer is not final, so not remembered. */
const isFinal = (status: number): boolean => !(status === 408 || status === 429 || status >= 500);

/** Remembered answers by scope: a Map kept in least-recently-used order, with a TTL and two bounds. */
export class IdempotencyCache implements IdempotencyBackend {
  readonly ttlMs: number;
  readonly maxKeys: number;
  readonly maxBytes: number;
  private readonly now: () => number;
  private readonly answers = new Map<string, RememberedAnswer>();
  private readonly running = new Map<string, RunningRequest>();
  private bytes = 0;

  constructor(options: IdempotencyOptions = {}) {
    const ttl = options.ttlSeconds ?? DEFAULT_IDEMPOTENCY_TTL_SECONDS;
    const keys = options.maxKeys ?? DEFAULT_IDEMPOTENCY_MAX_KEYS;
    const bytes = options.maxBytes ?? DEFAULT_IDEMPOTENCY_MAX_BYTES;
    if (!(ttl > 0) || !Number.isFinite(ttl)) throw new RangeError(`idempotency ttlSeconds must be a positive number (got ${ttl})`);
    if (!Number.isSafeInteger(keys) || keys < 1) throw new RangeError(`idempotency maxKeys must be a positive integer (got ${keys})`);
    if (!Number.isSafeInteger(bytes) || bytes < 1) throw new RangeError(`idempotency maxBytes must be a positive integer (got ${bytes})`);
    this.ttlMs = ttl * 1000;
    this.maxKeys = keys;
    this.maxBytes = bytes;
    this.now = options.now ?? Date.now;
  }

  get size(): number {
    return this.answers.size;
  }

  /** The remembered answer, if still fresh; a hit becomes the most recently used. */
  answer(scope: string): RememberedAnswer | undefined {
    const a = this.answers.get(scope);
    if (a === undefined) return undefined;
    this.answers.delete(scope);
    if (a.expiresAt <= this.now()) {
      this.bytes -= a.body.byteLength;
      return undefined;
    }
    this.answers.set(scope, a);
    return a;
  }

  /** The request with this scope still running, if any. */
  inFlight(scope: string): RunningRequest | undefined {
    return this.running.get(scope);
  }

  /** Marks a scope as running; the returned function ends that (whether or not an answer was remembered). */
  begin(scope: string, fingerprint: string): () => void {
    let end!: () => void;
    this.running.set(scope, { fingerprint, finished: new Promise<void>((r) => (end = r)) });
    return () => {
      this.running.delete(scope);
      end();
    };
  }

  claim(scope: string, fingerprint: string): IdempotencyClaim | Promise<IdempotencyClaim> {
    const done = this.answer(scope);
    if (done) return done.fingerprint === fingerprint ? { kind: "replay", answer: done } : REUSED;
    const running = this.running.get(scope);
    if (running) return running.fingerprint === fingerprint ? running.finished.then(() => this.claim(scope, fingerprint)) : REUSED;
    const end = this.begin(scope, fingerprint);
    return {
      kind: "run",
      finish: (answer) => {
        if (answer !== null) this.remember(scope, { ...answer, fingerprint });
        end();
      },
    };
  }

  /** Remembers a final answer; false when it is larger than `maxBytes` alone. */
  remember(scope: string, answer: Omit<RememberedAnswer, "expiresAt">): boolean {
    if (answer.body.byteLength > this.maxBytes) return false;
    const old = this.answers.get(scope);
    if (old) {
      this.answers.delete(scope);
      this.bytes -= old.body.byteLength;
    }
    this.answers.set(scope, { ...answer, expiresAt: this.now() + this.ttlMs });
    this.bytes += answer.body.byteLength;
    this.evict();
    return true;
  }

  /** Drops expired answers at the old end, then the least recently used while over a bound. */
  private evict(): void {
    const now = this.now();
    for (const [scope, a] of this.answers) {
      const over = this.answers.size > this.maxKeys || this.bytes > this.maxBytes;
      if (!over && a.expiresAt > now) break;
      this.answers.delete(scope);
      this.bytes -= a.body.byteLength;
    }
  }
}

const KeyHeader = z.object({
  [IDEMPOTENCY_KEY_HEADER]: z
    .string()
    .min(1, "must not be empty")
    .max(MAX_IDEMPOTENCY_KEY_LENGTH, `must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`)
    .regex(/^[\x20-\x7e]+$/, "must be printable ASCII"),
});
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/;

/** The key, from the draft's quoted form (`"abc"`, a structured-field string) or a bare one (`abc`). */
export function parseIdempotencyKey(header: string): string {
  const trimmed = header.trim();
  const quoted = /^"((?:[^"\\]|\\["\\])*)"$/.exec(trimmed);
  const key = quoted ? quoted[1]!.replace(/\\(["\\])/g, "$1") : trimmed;
  // The common case is checked by hand; zod only words the error.
  if (key.length >= 1 && key.length <= MAX_IDEMPOTENCY_KEY_LENGTH && PRINTABLE_ASCII.test(key)) return key;
  return parseOrThrow(KeyHeader, { [IDEMPOTENCY_KEY_HEADER]: key }, "request headers")[IDEMPOTENCY_KEY_HEADER];
}

/**
 * A fast 64-bit fingerprint (two 32-bit FNV-1a variants) of a request's parts. It only has to tell a
 * retry from a different request under the same key; WebCrypto's SHA-256 cost ~100 µs a request here,
 * more than the route itself.
 */
function fingerprintOf(...parts: string[]): string {
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193 ^ 0x5bd1e995;
  for (const part of parts) {
    for (let i = 0; i < part.length; i++) {
      const c = part.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 0x01000193);
      h2 = Math.imul(h2 ^ c, 0x5bd1e995) ^ (h2 >>> 15);
    }
    h1 = Math.imul(h1 ^ 0x0a, 0x01000193);
    h2 = Math.imul(h2 ^ 0x0a, 0x5bd1e995);
  }
  return `${(h1 >>> 0).toString(16)}:${(h2 >>> 0).toString(16)}:${parts.reduce((n, p) => n + p.length, 0)}`;
}

/**
 * The middleware for a write route. Without the header it only calls the route. With it: replays a
 * remembered answer, waits for a running one with the same key, or runs the route and remembers its answer.
 */
export function idempotentWrites(cache: IdempotencyBackend, log: LogWriter = silentLogger): MiddlewareHandler {
  return async (c, next) => {
    const header = c.req.header(IDEMPOTENCY_KEY_HEADER);
    if (header === undefined) return next();
    // The body is read before a bad key is refused: a refusal sent while the body still arrives reaches
    // few clients on Node and Deno, whose node:http server (@hono/node-server) resets a connection whose
    // unread body takes over 500 ms to drain, and most clients read the answer only after sending the body.
    const text = await c.req.text();
    const key = parseIdempotencyKey(header);
    // The token is kept only as a fingerprint; the route reads the same (cached) body text.
    const scope = `${c.req.method} ${c.req.path}\n${fingerprintOf(c.req.header("authorization") ?? "")}\n${key}`;
    const fingerprint = fingerprintOf(c.req.header("prefer") ?? "", text);
    const pending = cache.claim(scope, fingerprint);
    const claim = pending instanceof Promise ? await pending : pending;
    if (claim.kind === "reused") {
      throw new IdempotencyKeyReusedError(
        `Idempotency-Key ${JSON.stringify(key)} was already used with a different request to ${c.req.method} ${c.req.path}`,
      );
    }
    if (claim.kind === "replay") {
      const headers: Record<string, string> = Object.fromEntries(claim.answer.headers);
      headers[IDEMPOTENT_REPLAYED_HEADER] = "true";
      return c.body(claim.answer.body.slice(), claim.answer.status as 200, headers);
    }
    let answer: IdempotentAnswer | null = null;
    try {
      await next();
      const res = c.res;
      if (!isFinal(res.status)) return;
      // Read once and answer from the same bytes: a clone() tees the stream, which costs more than the route.
      const body = new Uint8Array(await res.arrayBuffer());
      c.res = new Response(body.slice(), { status: res.status, headers: res.headers });
      const headers = REPLAYED_HEADERS.flatMap((h): [string, string][] => {
        const v = res.headers.get(h);
        return v === null ? [] : [[h, v]];
      });
      if (body.byteLength <= cache.maxBytes) answer = { status: res.status, headers, body };
      else
        log.warning(
          `${c.req.method} ${c.req.path}: an answer of ${body.byteLength} bytes is over the idempotency cache's ${cache.maxBytes} bytes; a retry would run again`,
        );
    } finally {
      claim.finish(answer);
    }
  };
}

/**
 * The fetch a runner's store client uses (client-server strategy).
 *
 * On Node: undici's `Pool.dispatch`, one keep-alive pool per origin, the answer collected whole into a
 * small Response-like object (status, ok, headers.get, text(), json()): store answers are small JSON,
 * and the stream objects of `Pool.request`, or the WHATWG Response and web streams of a `fetch` (Node's
 * global fetch is undici too), cost a runner noticeably more CPU per request (docs/perf.md). undici parses HTTP/1.1 with llhttp: a malformed answer
 * is an error, idle sockets do not keep the process alive, and a request is never sent twice (a POST
 * that claims a rollout must not claim two).
 *
 * Deno, Bun and browsers keep their global fetch; undici is loaded only on Node, on first use.
 */
import type { Dispatcher, Pool } from "undici";
import { platform } from "../platform/index.ts";

/** The headers of an undici answer (names lower-case), behind the part of `Headers` the store client reads. */
class AnswerHeaders {
  constructor(private readonly raw: Record<string, string | string[] | undefined>) {}
  get(name: string): string | null {
    const v = this.raw[name.toLowerCase()];
    return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
  }
  has(name: string): boolean {
    return this.raw[name.toLowerCase()] !== undefined;
  }
  forEach(fn: (value: string, key: string) => void): void {
    for (const key of Object.keys(this.raw)) {
      const v = this.get(key);
      if (v !== null) fn(v, key);
    }
  }
}

/** The part of a Response the store client reads, over a body already read. */
class Answer {
  readonly body = null;
  readonly ok: boolean;
  readonly headers: AnswerHeaders;
  constructor(
    readonly status: number,
    headers: Record<string, string | string[] | undefined>,
    private readonly bodyText: string,
  ) {
    this.ok = status >= 200 && status < 300;
    this.headers = new AnswerHeaders(headers);
  }
  async text(): Promise<string> {
    return this.bodyText;
  }
  async json(): Promise<unknown> {
    return JSON.parse(this.bodyText);
  }
}

let undici: Promise<typeof import("undici")> | null = null;
const pools = new Map<string, Pool>();

async function poolFor(origin: string): Promise<Pool> {
  const known = pools.get(origin);
  if (known !== undefined) return known;
  const { Pool } = await (undici ??= import("undici"));
  let pool = pools.get(origin);
  // The store client times each request itself (an AbortSignal): no undici timers per request.
  if (pool === undefined) pools.set(origin, (pool = new Pool(origin, { headersTimeout: 0, bodyTimeout: 0 })));
  return pool;
}

function headerRecord(h: HeadersInit | undefined): Record<string, string> | undefined {
  if (h === undefined || (typeof h === "object" && !(h instanceof Headers) && !Array.isArray(h)))
    return h as Record<string, string> | undefined;
  const out: Record<string, string> = {};
  new Headers(h).forEach((v, k) => (out[k] = v));
  return out;
}

/** One request through `pool.dispatch`: the answer's status, headers and whole body, or the error. */
function dispatch(pool: Pool, options: Dispatcher.DispatchOptions, signal: AbortSignal | undefined): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    let controller: Dispatcher.DispatchController | null = null;
    let abortReason: unknown;
    let settled = false;
    let status = 0;
    let headers: Record<string, string | string[] | undefined> = {};
    let chunks: Buffer[] = [];
    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      return true;
    };
    // The caller's abort rejects at once; undici drops the request when it reaches a socket, or
    // tears down the socket now carrying it.
    const onAbort = () => {
      abortReason = signal!.reason;
      if (controller !== null && !controller.aborted) controller.abort(signal!.reason as Error);
      if (settle()) reject(signal!.reason);
    };
    if (signal !== undefined) {
      if (signal.aborted) return reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
    }
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(c) {
        controller = c;
        if (abortReason !== undefined) c.abort(abortReason as Error);
      },
      onResponseStart(_c, statusCode, responseHeaders) {
        // Called again after a 1xx answer: the last call is the answer.
        status = statusCode;
        headers = responseHeaders;
        chunks = [];
      },
      onResponseData(_c, chunk) {
        chunks.push(chunk);
      },
      onResponseEnd() {
        if (settle()) resolve(new Answer(status, headers, (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString("utf8")));
      },
      onResponseError(_c, err) {
        if (settle()) reject(err);
      },
    };
    try {
      pool.dispatch(options, handler);
    } catch (err) {
      // Refused before anything was sent (an invalid header, say).
      if (settle()) reject(err);
    }
  });
}

/** A fetch over undici pools: string bodies, headers and an AbortSignal; answers as described above. */
export async function undiciFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  if (url.protocol !== "http:" && url.protocol !== "https:") return fetch(input, init);
  if (init.body !== undefined && init.body !== null && typeof init.body !== "string") {
    throw new TypeError("the runner's fetch sends string bodies only");
  }
  const pool = pools.get(url.origin) ?? (await poolFor(url.origin));
  const answer = await dispatch(
    pool,
    {
      path: `${url.pathname}${url.search}`,
      method: (init.method ?? "GET").toUpperCase() as Dispatcher.HttpMethod,
      headers: headerRecord(init.headers),
      body: init.body ?? null,
    },
    init.signal ?? undefined,
  );
  return answer as unknown as Response;
}

/** The fetch a runner's store client should use on this runtime (undefined: the global fetch). */
export function runnerFetch(): typeof fetch | undefined {
  return platform.runtime === "node" ? (undiciFetch as typeof fetch) : undefined;
}

/**
 * A lean `fetch` for runner processes on Node: HTTP/1.1 straight over keep-alive `node:net` sockets.
 *
 * A runner makes a few small requests per rollout to a server on the same host, so the client's own
 * CPU per request is a large share of a client-server run. Node's built-in fetch (undici with WHATWG
 * streams) costs about three times what `node:http` does, and `node:http` (ClientRequest, the agent,
 * IncomingMessage streams, two writes per request) still costs about twice what this does: one write
 * per request, and the response parsed from the socket's bytes. Only what LightningStoreClient uses is
 * supported: http URLs (others go to the global fetch), string bodies, headers, an AbortSignal, and a
 * response with status, ok, headers.get, text() and json() (not a full Response). Responses may be
 * sized by content-length, chunked, or end with the connection. Deno and Bun keep their native fetch.
 *
 * Keep-alive: an idle socket does not keep the process alive and is closed after IDLE_MS, below Node servers' default keep-alive timeout
 * (5 s), so a request rarely lands on a socket the server is closing; if one does (the socket closes
 * before any byte of the answer), the request is sent once more on a fresh socket, as Node's own
 * clients do for a reused socket.
 */
import net from "node:net";

const IDLE_MS = 4000;
/** Idle sockets kept per server; more are closed after use. */
const MAX_IDLE = 16;
const CRLF2 = Buffer.from("\r\n\r\n");
const BAD_HEADER = /[\r\n\0]/;

export function nodeHttpFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  if (url.protocol !== "http:") return fetch(input, init);
  const signal = init.signal ?? undefined;
  if (signal?.aborted) return Promise.reject(signal.reason);
  const method = (init.method ?? "GET").toUpperCase();
  const body = typeof init.body === "string" ? init.body : init.body == null ? "" : String(init.body);
  let head = `${method} ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\n`;
  try {
    for (const [k, v] of headerEntries(init.headers)) {
      const lower = k.toLowerCase();
      if (lower === "host" || lower === "content-length" || lower === "connection" || lower === "transfer-encoding") continue;
      if (BAD_HEADER.test(k) || BAD_HEADER.test(v)) throw new TypeError(`Invalid header ${JSON.stringify(k)}`);
      head += `${k}: ${v}\r\n`;
    }
  } catch (err) {
    return Promise.reject(err);
  }
  if (body !== "" || (method !== "GET" && method !== "HEAD")) head += `content-length: ${Buffer.byteLength(body)}\r\n`;
  const payload = `${head}\r\n${body}`;
  const pool = poolFor(url.hostname, Number(url.port || 80));
  return new Promise<Response>((resolve, reject) => {
    const ex = new Exchange(payload, method === "HEAD", resolve, reject, signal);
    pool.send(ex);
  });
}

function headerEntries(h: HeadersInit | undefined): [string, string][] {
  if (!h) return [];
  if (h instanceof Headers) {
    const out: [string, string][] = [];
    h.forEach((v, k) => out.push([k, v]));
    return out;
  }
  if (Array.isArray(h)) return h.map(([k, v]) => [k!, v!]);
  return Object.entries(h);
}

// ---------------------------------------------------------------------------------------------------
// Connections

const pools = new Map<string, Pool>();

function poolFor(host: string, port: number): Pool {
  const key = `${host}:${port}`;
  let pool = pools.get(key);
  if (pool === undefined) pools.set(key, (pool = new Pool(host, port)));
  return pool;
}

class Pool {
  private readonly idle: Conn[] = [];
  constructor(
    readonly host: string,
    readonly port: number,
  ) {}

  send(ex: Exchange, fresh = false): void {
    const conn = (!fresh && this.idle.pop()) || new Conn(this);
    conn.start(ex);
  }

  release(conn: Conn): void {
    if (this.idle.length >= MAX_IDLE) conn.destroy();
    else this.idle.push(conn);
  }

  forget(conn: Conn): void {
    const i = this.idle.indexOf(conn);
    if (i >= 0) this.idle.splice(i, 1);
  }
}

class Conn {
  private readonly socket: net.Socket;
  private ex: Exchange | null = null;
  private uses = 0;
  private idleTimer: ReturnType<typeof setTimeout> | null = null;
  private dead = false;

  constructor(private readonly pool: Pool) {
    this.socket = net.connect({ host: pool.host, port: pool.port, noDelay: true });
    this.socket.on("data", (chunk: Buffer) => this.onData(chunk));
    this.socket.on("end", () => this.onClosed(null));
    this.socket.on("close", () => this.onClosed(null));
    this.socket.on("error", (err) => this.onClosed(err));
  }

  start(ex: Exchange): void {
    if (this.idleTimer !== null) {
      clearTimeout(this.idleTimer);
      this.idleTimer = null;
    }
    this.ex = ex;
    this.uses++;
    this.socket.ref();
    ex.attach(() => {
      this.ex = null;
      this.destroy();
    });
    this.socket.write(ex.payload);
  }

  destroy(): void {
    this.dead = true;
    this.pool.forget(this);
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    const ex = this.ex;
    if (ex === null) return this.destroy(); // bytes nobody asked for
    let outcome: Outcome;
    try {
      outcome = ex.feed(chunk);
    } catch (err) {
      this.ex = null;
      this.destroy();
      return ex.fail(err);
    }
    if (outcome === "more") return;
    this.ex = null;
    ex.finish();
    if (outcome === "close" || this.dead) return this.destroy();
    this.idleTimer = setTimeout(() => this.destroy(), IDLE_MS);
    this.idleTimer.unref();
    // An idle socket must not keep the process alive (as Node's agent does for its free sockets).
    this.socket.unref();
    this.pool.release(this);
  }

  private onClosed(err: Error | null): void {
    const ex = this.ex;
    this.ex = null;
    if (!this.dead) this.destroy();
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    if (ex === null || ex.settled) return;
    if (ex.untilClose() && err === null) return ex.finish();
    // A reused socket the server closed before answering: it never saw the request; send it once more.
    if (this.uses > 1 && !ex.gotBytes && !ex.retried) {
      ex.retried = true;
      return this.pool.send(ex, true);
    }
    ex.fail(err ?? new Error("socket closed before the response was complete"));
  }
}

// ---------------------------------------------------------------------------------------------------
// One request and its response

type Outcome = "more" | "keep" | "close";

class Exchange {
  gotBytes = false;
  retried = false;
  private buf: Buffer = Buffer.alloc(0);
  private bodyStart = -1;
  private status = 0;
  private headers: Record<string, string> = {};
  private length = -1;
  private chunked = false;
  private keepAlive = true;
  private body: Buffer | null = null;
  settled = false;
  private onAbort: (() => void) | null = null;
  private abortConn: () => void = () => {};

  constructor(
    readonly payload: string,
    private readonly headOnly: boolean,
    private readonly resolve: (r: Response) => void,
    private readonly reject: (e: unknown) => void,
    private readonly signal: AbortSignal | undefined,
  ) {}

  /** Hooks the caller's AbortSignal to `abort` (which tears down the socket now carrying this exchange). */
  attach(abort: () => void): void {
    this.abortConn = abort;
    if (this.signal === undefined || this.onAbort !== null) return;
    this.onAbort = () => {
      this.abortConn();
      this.fail(this.signal!.reason);
    };
    this.signal.addEventListener("abort", this.onAbort, { once: true });
  }

  untilClose(): boolean {
    return this.bodyStart >= 0 && !this.chunked && this.length < 0;
  }

  feed(chunk: Buffer): Outcome {
    this.gotBytes = true;
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    if (this.bodyStart < 0) {
      const end = this.buf.indexOf(CRLF2);
      if (end < 0) return "more";
      this.parseHead(this.buf.toString("latin1", 0, end));
      this.bodyStart = end + 4;
      if (this.status >= 100 && this.status < 200) {
        // An interim answer (100 Continue): drop it and read the real one.
        this.buf = this.buf.subarray(this.bodyStart);
        this.bodyStart = -1;
        this.headers = {};
        return this.buf.length > 0 ? this.feed(Buffer.alloc(0)) : "more";
      }
    }
    if (this.headOnly || this.status === 204 || this.status === 304) this.length = 0;
    if (this.length >= 0) {
      if (this.buf.length < this.bodyStart + this.length) return "more";
      if (this.buf.length > this.bodyStart + this.length) throw new Error("the server sent more bytes than its content-length");
      this.body = this.buf.subarray(this.bodyStart);
      return this.keepAlive ? "keep" : "close";
    }
    if (this.chunked) {
      const body = dechunk(this.buf, this.bodyStart);
      if (body === null) return "more";
      this.body = body;
      return this.keepAlive ? "keep" : "close";
    }
    return "more"; // the body ends with the connection
  }

  private parseHead(text: string): void {
    const lines = text.split("\r\n");
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "");
    if (m === null) throw new Error(`not an HTTP/1.1 response: ${JSON.stringify((lines[0] ?? "").slice(0, 80))}`);
    this.status = Number(m[1]);
    this.keepAlive = !lines[0]!.startsWith("HTTP/1.0");
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      if (colon <= 0) continue;
      const k = line.slice(0, colon).trim().toLowerCase();
      const v = line.slice(colon + 1).trim();
      this.headers[k] = k in this.headers ? `${this.headers[k]}, ${v}` : v;
    }
    const te = this.headers["transfer-encoding"];
    this.chunked = te !== undefined && te.toLowerCase().includes("chunked");
    const cl = this.headers["content-length"];
    this.length = !this.chunked && cl !== undefined ? Number.parseInt(cl, 10) : -1;
    if (Number.isNaN(this.length)) throw new Error(`bad content-length ${JSON.stringify(cl)}`);
    const conn = this.headers["connection"]?.toLowerCase();
    if (conn === "close") this.keepAlive = false;
    else if (conn === "keep-alive") this.keepAlive = true;
  }

  finish(): void {
    const body = this.body ?? this.buf.subarray(Math.max(this.bodyStart, 0));
    this.settle();
    this.resolve(new LeanResponse(this.status, this.headers, body.toString("utf8")) as unknown as Response);
  }

  fail(err: unknown): void {
    if (this.settled) return;
    this.settle();
    this.reject(err);
  }

  private settle(): void {
    this.settled = true;
    if (this.onAbort !== null) this.signal!.removeEventListener("abort", this.onAbort);
  }
}

/** The body of a complete chunked message starting at `from`, or null while it is incomplete. */
function dechunk(buf: Buffer, from: number): Buffer | null {
  const parts: Buffer[] = [];
  let at = from;
  for (;;) {
    const eol = buf.indexOf("\r\n", at, "latin1");
    if (eol < 0) return null;
    const size = Number.parseInt(buf.toString("latin1", at, eol).split(";")[0]!.trim(), 16);
    if (Number.isNaN(size)) throw new Error("bad chunk size in a chunked response");
    if (size === 0) {
      // Trailers (none expected) end with an empty line.
      return buf.indexOf("\r\n\r\n", eol, "latin1") < 0 ? null : Buffer.concat(parts);
    }
    if (buf.length < eol + 2 + size + 2) return null;
    parts.push(buf.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

/** The part of Headers the store client reads. */
class LeanHeaders {
  constructor(private readonly map: Record<string, string>) {}
  get(name: string): string | null {
    return this.map[name.toLowerCase()] ?? null;
  }
  has(name: string): boolean {
    return name.toLowerCase() in this.map;
  }
  forEach(fn: (value: string, key: string) => void): void {
    for (const [k, v] of Object.entries(this.map)) fn(v, k);
  }
}

/**
 * The part of a Response the store client reads. A real Response would route the already-read body
 * through a web stream again, which costs about a tenth of a runner's CPU.
 */
class LeanResponse {
  readonly body = null;
  readonly ok: boolean;
  readonly headers: LeanHeaders;
  constructor(
    readonly status: number,
    headers: Record<string, string>,
    private readonly bodyText: string,
  ) {
    this.ok = status >= 200 && status < 300;
    this.headers = new LeanHeaders(headers);
  }
  async text(): Promise<string> {
    return this.bodyText;
  }
  async json(): Promise<unknown> {
    return JSON.parse(this.bodyText);
  }
}

/** The fetch a runner's store client should use on this runtime. */
export function runnerFetch(): typeof fetch | undefined {
  const g = globalThis as { Deno?: unknown; Bun?: unknown };
  return g.Deno || g.Bun ? undefined : (nodeHttpFetch as typeof fetch);
}

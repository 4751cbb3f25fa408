/**
 * A lean `fetch` for runner processes on Node: plain `node:http` over a keep-alive agent. Node's
 * built-in fetch (undici with WHATWG streams) costs about three times the CPU per request on loopback,
 * and a runner makes four requests per rollout, so this is the largest single cost of a client-server
 * run on Node. Only what LightningStoreClient uses is supported: http URLs, string bodies, headers,
 * an AbortSignal, and a response with status, ok, headers, text() and json() (not a full Response).
 * Deno and Bun keep their native fetch.
 */
import http from "node:http";

const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });

export function nodeHttpFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  if (url.protocol !== "http:") return fetch(input, init);
  const signal = init.signal ?? undefined;
  return new Promise<Response>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const headers: Record<string, string> = {};
    const given = init.headers;
    if (given && !(given instanceof Headers) && !Array.isArray(given)) Object.assign(headers, given);
    else new Headers(given).forEach((v, k) => (headers[k] = v));
    const body = typeof init.body === "string" ? init.body : init.body == null ? undefined : String(init.body);
    if (body !== undefined) headers["content-length"] = String(Buffer.byteLength(body));
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: init.method ?? "GET", headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        signal?.removeEventListener("abort", onAbort);
        resolve(new LeanResponse(res.statusCode ?? 500, res.headers, Buffer.concat(chunks).toString("utf8")) as unknown as Response);
      });
      res.on("error", fail);
    });
    const onAbort = () => req.destroy(signal!.reason instanceof Error ? signal!.reason : new Error(String(signal!.reason)));
    function fail(err: unknown) {
      signal?.removeEventListener("abort", onAbort);
      reject(err);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    req.on("error", fail);
    req.end(body);
  });
}

/**
 * The part of a Response the store client reads. A real Response would route the already-read body
 * through a web stream again, which costs about a tenth of a runner's CPU.
 */
class LeanResponse {
  readonly body = null;
  readonly ok: boolean;
  private lazyHeaders: Headers | null = null;
  constructor(
    readonly status: number,
    private readonly rawHeaders: http.IncomingHttpHeaders,
    private readonly bodyText: string,
  ) {
    this.ok = status >= 200 && status < 300;
  }
  get headers(): Headers {
    if (this.lazyHeaders === null) {
      const h = new Headers();
      for (const [k, v] of Object.entries(this.rawHeaders)) if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(", ") : v);
      this.lazyHeaders = h;
    }
    return this.lazyHeaders;
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

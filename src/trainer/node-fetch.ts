/**
 * A lean `fetch` for runner processes on Node: plain `node:http` over a keep-alive agent. Node's
 * built-in fetch (undici with WHATWG streams) costs about three times the CPU per request on loopback,
 * and a runner makes four requests per rollout, so this is the largest single cost of a client-server
 * run on Node. Only what LightningStoreClient uses is supported: http URLs, string bodies, headers,
 * an AbortSignal, and a Response with status, headers and text(). Deno and Bun keep their native fetch.
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
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    const body = typeof init.body === "string" ? init.body : init.body == null ? undefined : String(init.body);
    if (body !== undefined) headers["content-length"] = String(Buffer.byteLength(body));
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: init.method ?? "GET", headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        signal?.removeEventListener("abort", onAbort);
        const out = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) out.set(k, Array.isArray(v) ? v.join(", ") : v);
        const status = res.statusCode ?? 500;
        const text = Buffer.concat(chunks).toString("utf8");
        // Response refuses a body for these statuses.
        resolve(new Response(status === 204 || status === 304 ? null : text, { status, headers: out }));
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

/** The fetch a runner's store client should use on this runtime. */
export function runnerFetch(): typeof fetch | undefined {
  const g = globalThis as { Deno?: unknown; Bun?: unknown };
  return g.Deno || g.Bun ? undefined : (nodeHttpFetch as typeof fetch);
}

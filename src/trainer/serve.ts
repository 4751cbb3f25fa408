/**
 * Serving a fetch handler on whichever runtime we are on, with limits against slow and piled-up
 * clients. The store server (`agl store`, src/server/run.ts) and the Trainer's managed store server
 * both serve through here, so each runtime's limits live in this one place:
 * - Node and Deno: node:http through @hono/node-server, whose server has every knob (headers,
 *   whole-request and keep-alive timeouts, a connection cap). `Deno.serve` has none of them and
 *   cannot close a connection whose body is still trickling in (docs/server.md).
 * - Bun: `Bun.serve`, faster there than Bun's node:http. Its one knob is `idleTimeout`, which bounds
 *   a request's reception and handling together and an idle keep-alive connection; requests in
 *   flight are capped here (503 and the connection closed beyond the cap).
 */
import type { Logger } from "../server/log.ts";

export interface ServedApp {
  /** The port really bound (useful with port 0). */
  port: number;
  /**
   * Stops listening. `graceful`: requests in flight are answered first (callers abort their long
   * polls before); otherwise every connection is closed at once.
   */
  stop(graceful?: boolean): Promise<void>;
}

/** Limits of one server; see "Limits and defaults" in docs/departures.md. */
export interface ServeLimits {
  /** Longest wait for a request's headers (capped by `requestTimeoutSeconds`). */
  headersTimeoutSeconds: number;
  /** Longest wait for a whole request, headers and body; handling it afterwards is not bounded (Bun: see `longestHoldSeconds`). */
  requestTimeoutSeconds: number;
  /** How long an idle keep-alive connection stays open (Bun: `requestTimeoutSeconds` instead). */
  keepAliveTimeoutSeconds: number;
  /** Open connections at most (Bun: requests in flight); beyond it a new one is closed at once. */
  maxConnections: number;
}

export const DEFAULT_SERVE_LIMITS: Readonly<ServeLimits> = Object.freeze({
  headersTimeoutSeconds: 10,
  requestTimeoutSeconds: 60,
  keepAliveTimeoutSeconds: 5,
  maxConnections: 512,
});

export interface ServeOptions {
  hostname: string;
  port: number;
  limits?: Partial<ServeLimits>;
  /** Told (at most once a minute) when connections are refused at the cap. */
  log?: Pick<Logger, "warning">;
}

type FetchHandler = (req: Request) => Response | Promise<Response>;

interface BunServer {
  port: number;
  stop(closeActiveConnections?: boolean): Promise<void> | void;
}
interface BunLike {
  serve(o: { hostname: string; port: number; fetch: FetchHandler; idleTimeout?: number }): BunServer;
}

const runningOnBun = (): boolean => (globalThis as { Bun?: unknown }).Bun !== undefined;
/** Bun's `idleTimeout` is whole seconds, at most 255. */
const bunIdleSeconds = (l: ServeLimits): number => Math.min(255, Math.max(1, Math.ceil(l.requestTimeoutSeconds)));

/**
 * The longest a handler may hold a request (a long poll) before this runtime's server cuts it:
 * unbounded on node:http, where the request timeout ends once the body is in; on Bun the idle
 * timeout also runs while a request is handled, so a hold gets half of it.
 */
export function longestHoldSeconds(limits: Partial<ServeLimits> = {}): number {
  return runningOnBun() ? bunIdleSeconds({ ...DEFAULT_SERVE_LIMITS, ...limits }) / 2 : Number.POSITIVE_INFINITY;
}

/** Counts refusals and reports them now and then, not once per connection. */
function refusalReporter(log: Pick<Logger, "warning"> | undefined, max: number): () => void {
  let count = 0;
  let lastReport = Number.NEGATIVE_INFINITY;
  return () => {
    count++;
    const now = Date.now();
    if (log && now - lastReport >= 60_000) {
      log.warning(`connection cap reached (${max}): refused ${count} connection(s) since the last report; raise it with --max-connections`);
      lastReport = now;
      count = 0;
    }
  };
}

export async function serveFetch(fetch: FetchHandler, options: ServeOptions): Promise<ServedApp> {
  const limits: ServeLimits = { ...DEFAULT_SERVE_LIMITS, ...options.limits };
  const refused = refusalReporter(options.log, limits.maxConnections);
  const bun = (globalThis as { Bun?: BunLike }).Bun;
  if (bun) return serveOnBun(bun, fetch, options, limits, refused);
  return serveOnNodeHttp(fetch, options, limits, refused);
}

function serveOnBun(bun: BunLike, fetch: FetchHandler, at: ServeOptions, limits: ServeLimits, refused: () => void): ServedApp {
  let inFlight = 0;
  const capped = async (req: Request): Promise<Response> => {
    if (inFlight >= limits.maxConnections) {
      refused();
      return new Response(null, { status: 503, headers: { connection: "close", "retry-after": "1" } });
    }
    inFlight++;
    try {
      return await fetch(req);
    } finally {
      inFlight--;
    }
  };
  const server = bun.serve({ hostname: at.hostname, port: at.port, fetch: capped, idleTimeout: bunIdleSeconds(limits) });
  return { port: server.port, stop: async (graceful = false) => void (await server.stop(!graceful)) };
}

async function serveOnNodeHttp(fetch: FetchHandler, at: ServeOptions, limits: ServeLimits, refused: () => void): Promise<ServedApp> {
  const { serve } = await import("@hono/node-server");
  const ms = (s: number) => Math.round(s * 1000);
  const requestTimeout = ms(limits.requestTimeoutSeconds);
  const headersTimeout = Math.min(ms(limits.headersTimeoutSeconds), requestTimeout);
  return new Promise((resolve, reject) => {
    const server = serve(
      {
        fetch,
        hostname: at.hostname,
        port: at.port,
        serverOptions: {
          headersTimeout,
          requestTimeout,
          keepAliveTimeout: ms(limits.keepAliveTimeoutSeconds),
          // How often expired requests are looked for (Node's default, 30 s, would let them run that much longer).
          connectionsCheckingInterval: Math.max(50, Math.min(1000, headersTimeout / 4)),
        },
      },
      (info) =>
        resolve({
          port: info.port,
          stop: (graceful = false) =>
            new Promise<void>((done, fail) => {
              // close() waits for every connection to end: close the idle keep-alive ones, again as busy
              // ones fall idle after their answer, or all of them at once when not graceful.
              const closeIdle = graceful ? setInterval(() => http.closeIdleConnections?.(), 100) : undefined;
              server.close((e) => {
                clearInterval(closeIdle);
                if (e) fail(e);
                else done();
              });
              if (graceful) http.closeIdleConnections?.();
              else http.closeAllConnections?.();
            }),
        }),
    );
    const http = server as unknown as { maxConnections: number; closeIdleConnections?: () => void; closeAllConnections?: () => void };
    http.maxConnections = limits.maxConnections;
    server.on("drop", refused);
    server.once("error", reject);
  });
}

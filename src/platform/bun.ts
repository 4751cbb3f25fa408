/**
 * Bun's platform: Node's (Bun implements `node:*`), but serving through `Bun.serve`, faster there than
 * Bun's node:http. Its one knob is `idleTimeout`, which bounds a request's reception and handling
 * together and an idle keep-alive connection; requests in flight are capped here (503 and the
 * connection closed beyond the cap).
 */
import { nodeCompatible, thisProcess } from "./node.ts";
import { refusalReporter } from "./refusals.ts";
import { startWebWorker } from "./web-worker.ts";
import { DEFAULT_SERVE_LIMITS, type FetchHandler, type Platform, type ServeLimits, type ServeOptions, type ServedApp } from "./types.ts";

interface BunServer {
  port: number;
  stop(closeActiveConnections?: boolean): Promise<void> | void;
}
interface BunGlobal {
  version: string;
  serve(o: { hostname: string; port: number; fetch: FetchHandler; idleTimeout?: number }): BunServer;
}

/** Bun's `idleTimeout` is whole seconds, at most 255. */
export const bunIdleSeconds = (l: ServeLimits): number => Math.min(255, Math.max(1, Math.ceil(l.requestTimeoutSeconds)));

export function bunPlatform(bun: BunGlobal): Platform {
  return {
    ...nodeCompatible(),
    runtime: "bun",
    description: `bun ${bun.version}`,
    startWorker: startWebWorker,
    serveFetch: async (fetch, options) => serveOnBun(bun, fetch, options),
    // The idle timeout also runs while a request is handled, so a hold gets half of it.
    longestHoldSeconds: (limits = {}) => bunIdleSeconds({ ...DEFAULT_SERVE_LIMITS, ...limits }) / 2,
    selfCommand() {
      const self = thisProcess();
      return [self.execPath, self.script, ...self.args];
    },
  };
}

function serveOnBun(bun: BunGlobal, fetch: FetchHandler, at: ServeOptions): ServedApp {
  const limits: ServeLimits = { ...DEFAULT_SERVE_LIMITS, ...at.limits };
  const refused = refusalReporter(at.log, limits.maxConnections);
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

/**
 * Bun's platform: Node's (Bun implements `node:*`), but serving through `Bun.serve`, faster there than
 * Bun's node:http. Its one knob is `idleTimeout`, which bounds a request's reception and handling
 * together and an idle keep-alive connection. Bun shows no connection before its request's headers are
 * in, so what is capped here are requests in flight, in all and per client address (503 and the
 * connection closed beyond a limit); connections still sending headers are left to Bun's own timeout.
 */
import { nodeCompatible, runScriptWith, thisProcess } from "./node.ts";
import { limitReporters } from "./refusals.ts";
import { startWebWorker } from "./web-worker.ts";
import { type FetchHandler, type Platform, type ServeLimits, type ServeOptions, type ServedApp, portInUse, serveLimits } from "./types.ts";

interface BunServer {
  port: number;
  stop(closeActiveConnections?: boolean): Promise<void> | void;
  /** The client's address, known once a request is in (Bun shows no connection before that). */
  requestIP(req: Request): { address: string } | null;
}
interface BunGlobal {
  version: string;
  serve(o: {
    hostname: string;
    port: number;
    fetch: (req: Request, server: BunServer) => Response | Promise<Response>;
    idleTimeout?: number;
  }): BunServer;
}

/** Bun's `idleTimeout` is whole seconds, at most 255. */
export const bunIdleSeconds = (l: ServeLimits): number => Math.min(255, Math.max(1, Math.ceil(l.requestTimeoutSeconds)));

export function bunPlatform(bun: BunGlobal): Platform {
  return {
    ...nodeCompatible(),
    runtime: "bun",
    runScript: runScriptWith(["-e"]),
    description: `bun ${bun.version}`,
    startWorker: startWebWorker,
    serveFetch: async (fetch, options) => serveOnBun(bun, fetch, options),
    // The idle timeout also runs while a request is handled, so a hold gets half of it.
    longestHoldSeconds: (limits = {}) => bunIdleSeconds(serveLimits(limits)) / 2,
    selfCommand() {
      const self = thisProcess();
      return [self.execPath, self.script, ...self.args];
    },
  };
}

function serveOnBun(bun: BunGlobal, fetch: FetchHandler, at: ServeOptions): ServedApp {
  const limits = serveLimits(at.limits);
  const report = limitReporters(at.log, limits.maxConnections, limits.maxConnectionsPerAddress);
  let inFlight = 0;
  const perAddress = new Map<string, number>();
  const refuse = (): Response => new Response(null, { status: 503, headers: { connection: "close", "retry-after": "1" } });
  const capped = async (req: Request, server: BunServer): Promise<Response> => {
    if (inFlight >= limits.maxConnections) {
      report.refusedAtCap();
      return refuse();
    }
    const address = server.requestIP(req)?.address ?? "";
    const fromAddress = perAddress.get(address) ?? 0;
    if (limits.maxConnectionsPerAddress > 0 && fromAddress >= limits.maxConnectionsPerAddress) {
      report.refusedForAddress();
      return refuse();
    }
    inFlight++;
    perAddress.set(address, fromAddress + 1);
    try {
      return await fetch(req);
    } finally {
      inFlight--;
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left > 0) perAddress.set(address, left);
      else perAddress.delete(address);
    }
  };
  let server: BunServer;
  try {
    server = bun.serve({ hostname: at.hostname, port: at.port, fetch: capped, idleTimeout: bunIdleSeconds(limits) });
  } catch (e) {
    throw portInUse(e, at);
  }
  return { port: server.port, stop: async (graceful = false) => void (await server.stop(!graceful)) };
}

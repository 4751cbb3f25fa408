/**
 * Serving a fetch handler in-process on whichever runtime we are on (the algorithm side of the
 * client-server strategy): `Bun.serve`, `Deno.serve`, or @hono/node-server on Node.
 */
export interface ServedApp {
  /** The port really bound (useful with port 0). */
  port: number;
  stop(): Promise<void>;
}

type FetchHandler = (req: Request) => Response | Promise<Response>;

interface BunLike {
  serve(o: { hostname: string; port: number; fetch: FetchHandler; idleTimeout?: number }): { port: number; stop(force?: boolean): Promise<void> | void };
}
interface DenoLike {
  serve(o: { hostname: string; port: number; onListen?: (addr: { port: number }) => void }, handler: FetchHandler): { shutdown(): Promise<void> };
}

export async function serveFetch(fetch: FetchHandler, at: { hostname: string; port: number }): Promise<ServedApp> {
  const g = globalThis as { Bun?: BunLike; Deno?: DenoLike };
  if (g.Bun) {
    // idleTimeout 0: long polls are held up to 30 s, past Bun's default of 10 s.
    const server = g.Bun.serve({ hostname: at.hostname, port: at.port, fetch, idleTimeout: 0 });
    return { port: server.port, stop: async () => void (await server.stop(true)) };
  }
  if (g.Deno) {
    const deno = g.Deno;
    return new Promise((resolve) => {
      const server = deno.serve({ hostname: at.hostname, port: at.port, onListen: ({ port }) => resolve({ port, stop: () => server.shutdown() }) }, fetch);
    });
  }
  const { serve } = await import("@hono/node-server");
  return new Promise((resolve, reject) => {
    const server = serve({ fetch, hostname: at.hostname, port: at.port }, (info) =>
      resolve({
        port: info.port,
        stop: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            // Keep-alive sockets of runners would hold close() open.
            (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
          }),
      }),
    );
    server.once("error", reject);
  });
}

/**
 * Deno entry: serves the store app with `Deno.serve`.
 *   deno run -A runtimes/deno.ts [agl store options]
 */
import { runCli } from "../src/cli/agl.ts";
import type { ServerHost } from "../src/server/run.ts";

declare const Deno: {
  version: { deno: string };
  serve(
    options: { hostname: string; port: number; onListen?: (addr: { port: number }) => void },
    handler: (req: Request) => Response | Promise<Response>,
  ): { addr: { port: number }; shutdown(): Promise<void> };
  addSignalListener(signal: "SIGINT" | "SIGTERM", handler: () => void): void;
  args: string[];
  cwd(): string;
  env: { get(name: string): string | undefined };
  exit(code: number): never;
};

const host: ServerHost = {
  runtime: `deno ${Deno.version.deno}`,
  serve: async (fetch, { hostname, port }) => {
    const server = Deno.serve({ hostname, port, onListen: () => {} }, fetch);
    return { port: server.addr.port, stop: () => server.shutdown() };
  },
  onShutdownSignal(handler) {
    for (const s of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(s, () => handler(s));
  },
  cwd: () => Deno.cwd(),
  env: (name) => Deno.env.get(name),
  exit: (code) => Deno.exit(code),
};

Deno.exit(await runCli(["store", ...Deno.args], host));

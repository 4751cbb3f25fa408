/**
 * Bun entry: serves the store app with `Bun.serve`.
 *   bun runtimes/bun.ts [agl store options]
 */
import { runCli } from "../src/cli/agl.ts";
import type { ServerHost } from "../src/server/run.ts";

declare const Bun: {
  version: string;
  serve(options: { hostname: string; port: number; fetch: (req: Request) => Response | Promise<Response>; idleTimeout?: number }): {
    port: number;
    stop(closeActiveConnections?: boolean): Promise<void>;
  };
};
declare const process: {
  argv: string[];
  env: Record<string, string | undefined>;
  cwd(): string;
  on(signal: string, handler: () => void): void;
  exit(code: number): never;
};

const host: ServerHost = {
  runtime: `bun ${Bun.version}`,
  serve: async (fetch, { hostname, port }) => {
    // idleTimeout 0: long polls are held up to 30 s, past Bun's default of 10 s.
    const server = Bun.serve({ hostname, port, fetch, idleTimeout: 0 });
    return { port: server.port, stop: () => server.stop(false) };
  },
  onShutdownSignal(handler) {
    for (const s of ["SIGINT", "SIGTERM"]) process.on(s, () => handler(s));
  },
  cwd: () => process.cwd(),
  env: (name) => process.env[name],
  exit: (code) => process.exit(code),
};

process.exit(await runCli(["store", ...process.argv.slice(2)], host));

/**
 * Node entry: serves the store app with @hono/node-server. `tsx runtimes/node.ts [agl store options]`
 * starts the server; the `agl` binary (bin/agl.mjs) calls `main()` with its own arguments.
 */
import { serve } from "@hono/node-server";
import { realpathSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { runCli } from "../src/cli/agl.ts";
import type { ServerHost } from "../src/server/run.ts";

export const nodeHost: ServerHost = {
  runtime: `node ${process.version}`,
  serve: (fetch, { hostname, port }) =>
    new Promise((resolve, reject) => {
      const server = serve({ fetch, hostname, port }, (info: AddressInfo) =>
        resolve({
          port: info.port,
          stop: () => new Promise<void>((done, fail) => server.close((e) => (e ? fail(e) : done()))),
        }),
      );
      server.once("error", reject);
    }),
  onShutdownSignal(handler) {
    for (const s of ["SIGINT", "SIGTERM"] as const) process.on(s, () => handler(s));
  },
  cwd: () => process.cwd(),
  env: (name) => process.env[name],
  exit: (code) => process.exit(code),
};

export function main(argv: readonly string[]): Promise<number> {
  return runCli(argv, nodeHost);
}

const invokedDirectly = process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) process.exit(await main(["store", ...process.argv.slice(2)]));

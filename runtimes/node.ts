/**
 * Node entry: `tsx runtimes/node.ts [agl store options]` starts the server; the `agl` binary
 * (bin/agl.mjs) calls `main()` with its own arguments. Serving (node:http through @hono/node-server,
 * with its limits) is src/trainer/serve.ts.
 */
import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { runCli } from "../src/cli/agl.ts";
import type { ServerHost } from "../src/server/run.ts";

export const nodeHost: ServerHost = {
  runtime: `node ${process.version}`,
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

/**
 * Bun entry: `bun runtimes/bun.ts [agl store options]`. Serving (`Bun.serve`, with its limits) is
 * src/trainer/serve.ts.
 */
import { runCli } from "../src/cli/agl.ts";
import type { ServerHost } from "../src/server/run.ts";

declare const Bun: { version: string };
declare const process: {
  argv: string[];
  env: Record<string, string | undefined>;
  cwd(): string;
  on(signal: string, handler: () => void): void;
  exit(code: number): never;
};

const host: ServerHost = {
  runtime: `bun ${Bun.version}`,
  onShutdownSignal(handler) {
    for (const s of ["SIGINT", "SIGTERM"]) process.on(s, () => handler(s));
  },
  cwd: () => process.cwd(),
  env: (name) => process.env[name],
  exit: (code) => process.exit(code),
};

process.exit(await runCli(["store", ...process.argv.slice(2)], host));

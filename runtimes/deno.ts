/**
 * Deno entry: `deno run -A runtimes/deno.ts [agl store options]`. Serving (node:http, whose timeouts
 * and connection cap `Deno.serve` lacks) is src/trainer/serve.ts.
 */
import { runCli } from "../src/cli/agl.ts";
import type { ServerHost } from "../src/server/run.ts";

declare const Deno: {
  version: { deno: string };
  addSignalListener(signal: "SIGINT" | "SIGTERM", handler: () => void): void;
  args: string[];
  cwd(): string;
  env: { get(name: string): string | undefined };
  exit(code: number): never;
};

const host: ServerHost = {
  runtime: `deno ${Deno.version.deno}`,
  onShutdownSignal(handler) {
    for (const s of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(s, () => handler(s));
  },
  cwd: () => Deno.cwd(),
  env: (name) => Deno.env.get(name),
  exit: (code) => Deno.exit(code),
};

Deno.exit(await runCli(["store", ...Deno.args], host));

/**
 * Node entry: `tsx runtimes/node.ts [store or serve] [options]` starts the server; the `agl` binary
 * (bin/agl.mjs) calls `main()` with its own arguments. What differs per runtime (serving with limits,
 * signals, environment, exit) is src/platform/.
 */
import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { runCli, withCommand } from "../src/cli/agl.ts";
import { platform } from "../src/platform/index.ts";

export function main(argv: readonly string[]): Promise<number> {
  return runCli(argv);
}

const script = process.argv[1];
const invokedDirectly = script !== undefined && realpathSync(script) === fileURLToPath(import.meta.url);
if (invokedDirectly) platform.exit(await main(withCommand(platform.args())));

/**
 * Bun entry: `bun runtimes/bun.ts [agl store options]`. What differs per runtime (`Bun.serve` with its
 * limits, signals, environment, exit) is src/platform/.
 */
import { runCli } from "../src/cli/agl.ts";
import { platform } from "../src/platform/index.ts";

platform.exit(await runCli(["store", ...platform.args()]));

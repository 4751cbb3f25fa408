/**
 * Deno entry: `deno run -A runtimes/deno.ts [agl store options]`. What differs per runtime (serving
 * through node:http for its limits, signals, environment, exit) is src/platform/.
 */
import { runCli } from "../src/cli/agl.ts";
import { platform } from "../src/platform/index.ts";

platform.exit(await runCli(["store", ...platform.args()]));

/**
 * Deno entry: `deno run -A runtimes/deno.ts [store or serve] [options]`. What differs per runtime (serving
 * through node:http for its limits, signals, environment, exit) is src/platform/.
 */
import { runCli, withCommand } from "../src/cli/agl.ts";
import { platform } from "../src/platform/index.ts";

platform.exit(await runCli(withCommand(platform.args())));

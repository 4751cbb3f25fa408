/**
 * The `agl` command line, runtime-neutral: `runCli(argv, host)`, the host being this process's platform
 * unless a test gives its own (entries: runtimes/node.ts for the npm `agl` binary, runtimes/deno.ts and
 * runtimes/bun.ts for the others).
 */
import { STORE_USAGE, UsageError, parseStoreArgs } from "../server/config.ts";
import { platformHost, startStoreServer, type ServerHost } from "../server/run.ts";

export const AGL_USAGE = `Usage: agl <command> [options]

Commands:
  store     serve a LightningStore over HTTP (agl store --help)
`;

/** Runs a command to its end and returns the process exit code. */
export async function runCli(argv: readonly string[], host: ServerHost = platformHost()): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "-h" || command === "--help" || command === "help") {
    console.log(AGL_USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command !== "store") {
    console.error(`agl: unknown command ${JSON.stringify(command)}\n\n${AGL_USAGE}`);
    return 2;
  }
  try {
    const config = parseStoreArgs(rest, (n) => host.env(n));
    if (config.help) {
      console.log(STORE_USAGE);
      return 0;
    }
    const server = await startStoreServer(config, host);
    await server.stopped;
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`agl store: ${e.message}\n\n${STORE_USAGE}`);
      return 2;
    }
    console.error(`agl store: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

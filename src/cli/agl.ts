/**
 * The `agl` command line, runtime-neutral: `runCli(argv, host)`, the host being this process's platform
 * unless a test gives its own (entries: runtimes/node.ts for the npm `agl` binary, runtimes/deno.ts and
 * runtimes/bun.ts for the others).
 */
import { STORE_USAGE, UsageError, parseStoreArgs } from "../server/config.ts";
import { platformHost, startStoreServer, type ServerHost } from "../server/run.ts";
import { SERVE_USAGE, parseServeArgs, startPolicyServer } from "./serve.ts";

export const AGL_USAGE = `Usage: agl <command> [options]

Commands:
  store     serve a LightningStore over HTTP (agl store --help)
  serve     serve a Hugging Face model with an OpenAI-compatible API (agl serve --help)
`;

/** Runs a command to its end and returns the process exit code. */
export async function runCli(argv: readonly string[], host: ServerHost = platformHost()): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "-h" || command === "--help" || command === "help") {
    console.log(AGL_USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === "serve") return runServe(rest, host);
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

async function runServe(argv: readonly string[], host: ServerHost): Promise<number> {
  try {
    const config = parseServeArgs(argv, (n) => host.env(n));
    if (config.help) {
      console.log(SERVE_USAGE);
      return 0;
    }
    const server = await startPolicyServer(config, host);
    await server.stopped;
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`agl serve: ${e.message}\n\n${SERVE_USAGE}`);
      return 2;
    }
    console.error(`agl serve: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

/** A runtime entry's arguments as a command line: `serve ...` or `store ...` as given, else `store` options. */
export function withCommand(args: readonly string[]): string[] {
  return args[0] === "serve" || args[0] === "store" ? [...args] : ["store", ...args];
}

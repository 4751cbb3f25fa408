/**
 * The `agl` command line, runtime-neutral: `runCli(argv, host)`, the host being this process's platform
 * unless a test gives its own (entries: runtimes/node.ts for the npm `agl` binary, runtimes/deno.ts and
 * runtimes/bun.ts for the others).
 */
import { UsageError } from "../server/config.ts";
import { startStoreProcesses } from "../server/cluster/index.ts";
import { platformHost, type ServerHost } from "../server/run.ts";
import { platform } from "../platform/index.ts";
import { MissingFlagValueError, UnknownFlagError } from "./flags.ts";
import { PROXY_USAGE, parseProxyArgs, startLlmProxy } from "./proxy.ts";
import { SERVE_USAGE, parseServeArgs, startPolicyServer } from "./serve.ts";
import { STORE_USAGE, parseStoreArgs } from "./store.ts";
import { runTraining } from "./train.ts";
import { parseTrainArgs, TRAIN_USAGE } from "./train-config.ts";

export const AGL_USAGE = `Usage: agl <command> [options]

Commands:
  store     serve a LightningStore over HTTP (agl store --help)
  serve     serve a Hugging Face model with an OpenAI-compatible API (agl serve --help)
  proxy     an OpenAI-compatible proxy in front of model servers, recording calls as spans (agl proxy --help)
  train     train a LoRA adapter on a Hugging Face model with GRPO (agl train --help)
`;

/** Runs a command to its end and returns the process exit code. */
export async function runCli(argv: readonly string[], host: ServerHost = platformHost()): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "-h" || command === "--help" || command === "help") {
    console.log(AGL_USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === "serve")
    return runServer(
      "serve",
      SERVE_USAGE,
      () => parseServeArgs(rest, (n) => host.env(n)),
      (c) => startPolicyServer(c, host),
    );
  if (command === "proxy")
    return runServer(
      "proxy",
      PROXY_USAGE,
      () => parseProxyArgs(rest),
      (a) => startLlmProxy(a, host),
    );
  if (command === "train") return runTrain(rest, host);
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
    const server = await startStoreProcesses(config, host);
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

/** A server command: parse, start, run until stopped; usage errors exit 2, others 1. */
async function runServer<A extends { help: boolean }>(
  name: string,
  usage: string,
  parse: () => A,
  start: (args: A) => Promise<{ stopped: Promise<void> }>,
): Promise<number> {
  try {
    const args = parse();
    if (args.help) {
      console.log(usage);
      return 0;
    }
    const server = await start(args);
    await server.stopped;
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`agl ${name}: ${e.message}\n\n${usage}`);
      return 2;
    }
    console.error(`agl ${name}: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

async function runTrain(argv: readonly string[], host: ServerHost): Promise<number> {
  try {
    const parsed = parseTrainArgs(argv, (path) => platform.readTextFile(path));
    if (parsed.help) {
      console.log(TRAIN_USAGE);
      return 0;
    }
    // Checkpoints are complete or absent at any instant: Ctrl-C ends at once and the same command resumes.
    host.onShutdownSignal((signal) => {
      console.error(`[agl train] ${signal}: stopping; run the same command again to resume from the last checkpoint`);
      host.exit(130);
    });
    const r = await runTraining(parsed.config, { cwd: host.cwd() });
    const steps = r.reports.filter((x) => x.kind === "step");
    const vals = r.reports.filter((x) => x.kind === "validation");
    console.log(
      `[agl train] done: ${steps.length} steps on ${r.backend} in ${r.seconds.toFixed(0)} s` +
        (vals.length >= 2
          ? `; validation accuracy ${(vals[0].accuracy * 100).toFixed(1)}% -> ${(vals[vals.length - 1].accuracy * 100).toFixed(1)}%`
          : "") +
        `; ${parsed.config.fullFinetune ? "model" : "adapter"} ${r.weightsDir}, reward curve ${r.svgPath}`,
    );
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(
        // The long usage only where it answers the mistake: a flag it lists, or how that flag is given.
        `agl train: ${e.message}${e instanceof UnknownFlagError || e instanceof MissingFlagValueError ? `\n\n${TRAIN_USAGE}` : ""}`,
      );
      return 2;
    }
    console.error(`agl train: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

/** A runtime entry's arguments as a command line: `serve ...`, `proxy ...`, `train ...` or `store ...` as given, else `store` options. */
export function withCommand(args: readonly string[]): string[] {
  return ["serve", "proxy", "store", "train"].includes(args[0] ?? "") ? [...args] : ["store", ...args];
}

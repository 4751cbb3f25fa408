/**
 * How the tests run a TypeScript file on each runtime the library supports: the one launch table, a runner
 * that collects what the process printed, and the checks the cross-runtime tests share (the report a script
 * prints as its last line, and the same report on every runtime).
 */
import { deepStrictEqual } from "node:assert";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export type Runtime = "node" | "deno" | "bun";
export const RUNTIMES: readonly Runtime[] = ["node", "deno", "bun"];

/** The repository root: the working directory of every process started here. */
export const ROOT = fileURLToPath(new URL("../", import.meta.url));
const bin = (name: string): string => join(ROOT, "node_modules/.bin", name);

/**
 * The command line that runs the TypeScript file `script` (absolute, or relative to ROOT) with `args`:
 * Node through tsx's loader, Deno with every permission, Bun as it is (the runtimes installed from npm).
 */
export function launchCommand(runtime: Runtime, script: string, args: readonly string[] = []): [string, string[]] {
  switch (runtime) {
    case "node":
      return [process.execPath, ["--import", "tsx", script, ...args]];
    case "deno":
      return [bin("deno"), ["run", "-A", script, ...args]];
    case "bun":
      return [bin("bun"), [script, ...args]];
  }
}

/** The command line of `agl` under `runtime` (its entry in runtimes/). */
export const aglCommand = (runtime: Runtime, args: readonly string[] = []): [string, string[]] =>
  launchCommand(runtime, `runtimes/${runtime}.ts`, args);

export interface RunOptions {
  args?: readonly string[];
  /** Added to this process's environment (NO_COLOR=1 is always set). */
  env?: Record<string, string | undefined>;
  /** Milliseconds before the process is killed with SIGTERM (default 120 s). */
  timeout?: number;
}

export interface RunResult {
  runtime: Runtime;
  /** The exit code; null when a signal ended the process (a timeout's SIGTERM included). */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `script` under `runtime` in ROOT to its end; never rejects for how the process ended. */
export function runOnRuntime(runtime: Runtime, script: string, options: RunOptions = {}): Promise<RunResult> {
  const [cmd, args] = launchCommand(runtime, script, options.args);
  const env = { ...process.env, NO_COLOR: "1", ...options.env };
  return new Promise((resolve) => {
    const child = execFile(
      cmd,
      args,
      { cwd: ROOT, encoding: "utf8", env, timeout: options.timeout ?? 120_000, maxBuffer: 64 << 20 },
      (_err, stdout, stderr) => resolve({ runtime, code: child.exitCode, signal: child.signalCode, stdout, stderr }),
    );
  });
}

/** The JSON value of the last line of stdout, which the cross-runtime scripts print as their report. */
export function lastJsonLine<T>(stdout: string): T {
  return JSON.parse(stdout.trim().split("\n").pop()!) as T;
}

/**
 * Runs `script` under `runtime` and reads its report (the last stdout line); an exit code not in `codes`
 * (default: only 0) is an error that shows what the process printed.
 */
export async function runReport<T>(runtime: Runtime, script: string, options: RunOptions & { codes?: readonly number[] } = {}): Promise<T> {
  const r = await runOnRuntime(runtime, script, options);
  if (r.code === null || !(options.codes ?? [0]).includes(r.code))
    throw new Error(`${script} under ${runtime} ended with ${r.code ?? r.signal}:\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
  return lastJsonLine<T>(r.stdout);
}

/** Every runtime's `pick` of its report equals the first runtime's (node:assert, so that bench/ can share this module). */
export function expectSameOnEveryRuntime<R>(reports: ReadonlyMap<Runtime, R>, pick: (report: R) => unknown): void {
  const [first, ...rest] = [...reports];
  for (const [runtime, report] of rest) deepStrictEqual(pick(report), pick(first![1]), `${runtime} differs from ${first![0]}`);
}

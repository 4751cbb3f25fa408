/** Runs a test script under Node (tsx), Deno and Bun and reads the JSON line it prints last (shared by the cross-runtime tests). */
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

/** [runtime name, argv] for each runtime, running `script`. */
export function runtimesFor(script: string): Array<[string, string[]]> {
  return [
    ["node", ["node_modules/.bin/tsx", script]],
    ["deno", ["node_modules/.bin/deno", "run", "-A", script]],
    ["bun", ["node_modules/.bin/bun", script]],
  ];
}

/** The script's last stdout line as JSON. Exit code 3 means the script found no adapter and said why ({"skip": reason}). */
export async function runScript<T>(argv: string[]): Promise<T> {
  try {
    const { stdout } = await run(argv[0], argv.slice(1), { timeout: 150_000, maxBuffer: 1 << 20 });
    return JSON.parse(stdout.trim().split("\n").pop()!) as T;
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    if (err.code === 3 && err.stdout) return JSON.parse(err.stdout.trim().split("\n").pop()!) as T;
    throw new Error(`${argv.join(" ")} failed (${err.code}): ${err.stderr ?? ""}`.slice(0, 4000));
  }
}

/**
 * Starts the store server as a real process under Node, Deno or Bun (the runtimes/*.ts entries, from
 * the npm-installed runtimes) on a loopback port, and stops it with a signal.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { aglCommand, ROOT, type Runtime } from "../runtimes.ts";

export interface ServerProcess {
  url: string;
  proc: ChildProcess;
  /** Everything the process printed so far. */
  output(): string;
  /** Sends a signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Both startup lines of `agl store`: where it listens, then where the data lives. */
const STORE_READY = /listening on (http:\/\/\S+)[\s\S]*Data: .*\n/;

/** `ready` finds the server's URL (its first group) in what the process prints [agl store's lines]. */
export async function startServerProcess(
  runtime: Runtime,
  args: string[],
  env: Record<string, string> = {},
  ready: RegExp = STORE_READY,
): Promise<ServerProcess> {
  const [cmd, argv] = aglCommand(runtime, args);
  const proc = spawn(cmd, argv, {
    cwd: ROOT,
    env: { ...process.env, ...env, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const exited = new Promise<number | null>((resolve) => proc.once("exit", (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${runtime} server did not start within 60 s:\n${out}`)), 60_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = ready.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${runtime} server exited with ${code} before listening:\n${out}`));
    });
  });
  return {
    url,
    proc,
    output: () => out,
    async stop(signal = "SIGTERM") {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill(signal);
      return exited;
    },
  };
}

/**
 * Child processes for the client-server strategy, the same on Node, Deno 2 and Bun (all three implement
 * `node:child_process`). A child is told to stop with a line on its stdin (or by its stdin closing, so
 * children never outlive a parent that died), then by signals. Exit codes follow upstream: a death by
 * signal N reads as -N.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { constants, getPriority, setPriority } from "node:os";
import { getLogger } from "../tracer/log.ts";

const log = getLogger("agentlightning.execution.spawn");

export const STOP_LINE = "agl:stop\n";

/** The command line that runs this process's entry script again, on the current runtime. */
export function selfCommand(): string[] {
  const g = globalThis as { Deno?: unknown; Bun?: unknown };
  const script = process.argv[1];
  if (!script) throw new Error("Cannot tell this process's entry script (process.argv[1] is empty); give childCommand explicitly");
  const args = process.argv.slice(2);
  if (g.Deno) return [process.execPath, "run", "-A", script, ...args];
  if (g.Bun) return [process.execPath, script, ...args];
  return [process.execPath, ...process.execArgv, script, ...args];
}

export class ChildHandle {
  /** Mapped exit code (-N for signal N); null while running. */
  exitCode: number | null = null;
  readonly exited: Promise<number>;
  private readonly child: ChildProcess;

  constructor(
    readonly name: string,
    command: readonly string[],
    env: Record<string, string>,
    /** Added to this process's nice value for the child (0: the same CPU priority as this process). */
    niceness = 0,
  ) {
    this.child = spawn(command[0]!, command.slice(1), { env: { ...process.env, ...env }, stdio: ["pipe", "inherit", "inherit"] });
    if (niceness > 0 && this.child.pid !== undefined) lowerPriority(name, this.child.pid, niceness);
    // A child that exits before reading its stop line must not crash us with EPIPE.
    this.child.stdin?.on("error", () => {});
    this.exited = new Promise<number>((resolve) => {
      this.child.once("exit", (code, signal) => {
        this.exitCode = signal ? -((constants.signals as Record<string, number>)[signal] ?? 1) : (code ?? 0);
        resolve(this.exitCode);
      });
      this.child.once("error", () => {
        this.exitCode ??= 127;
        resolve(this.exitCode);
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.exitCode === null;
  }

  /** The cooperative stop: a line on stdin, then stdin closed. */
  requestStop(): void {
    if (!this.alive) return;
    const stdin = this.child.stdin;
    if (stdin && !stdin.destroyed) {
      stdin.write(STOP_LINE);
      stdin.end();
    }
  }

  signal(sig: "SIGINT" | "SIGTERM" | "SIGKILL"): void {
    if (this.alive) this.child.kill(sig);
  }

  /** True if the child exited within `seconds`. */
  async waitExit(seconds: number): Promise<boolean> {
    if (!this.alive) return true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<false>((r) => (timer = setTimeout(() => r(false), Math.max(0, seconds * 1000))));
    const done = await Promise.race([this.exited.then(() => true as const), timedOut]);
    clearTimeout(timer);
    return done;
  }
}

/**
 * Raises a child's nice value by `niceness` (capped at 19, the lowest priority), right after it started:
 * on Linux this sets the child's main thread, and every thread the runtime starts later inherits it.
 * A failure (a platform without priorities, a child already gone) is logged, and the child runs on.
 */
function lowerPriority(name: string, pid: number, niceness: number): void {
  try {
    setPriority(pid, Math.min(19, getPriority(pid) + niceness));
  } catch (err) {
    log.warn(`Could not lower the CPU priority of ${name} (pid ${pid}): ${(err as Error).message}`);
  }
}

/**
 * In a child: calls `onStop` when the parent writes the stop line or closes our stdin. Returns a
 * remover that also releases stdin so the process can exit.
 */
export function listenForParentStop(onStop: () => void): () => void {
  const stdin = process.stdin;
  let buffer = "";
  const onData = (chunk: Buffer | string) => {
    buffer += chunk.toString();
    if (buffer.includes(STOP_LINE.trim())) onStop();
  };
  const onEnd = () => onStop();
  stdin.on("data", onData);
  stdin.on("end", onEnd);
  stdin.on("error", onEnd);
  return () => {
    stdin.off("data", onData);
    stdin.off("end", onEnd);
    stdin.off("error", onEnd);
    stdin.pause();
    (stdin as unknown as { unref?: () => void }).unref?.();
    stdin.destroy();
  };
}

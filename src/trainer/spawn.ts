/**
 * Child processes for the client-server strategy, started through the platform (src/platform/). A
 * child is told to stop with a line on its stdin (or by its stdin closing, so children never outlive a
 * parent that died), then by signals. Exit codes follow upstream: a death by signal N reads as -N.
 */
import { platform, type ChildProcessPort } from "../platform/index.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.execution.spawn");

export const STOP_LINE = "agl:stop\n";

/** The command line that runs this process's entry script again, on the current runtime. */
export function selfCommand(): string[] {
  return platform.selfCommand();
}

export class ChildHandle {
  /** Mapped exit code (-N for signal N); null while running. */
  exitCode: number | null = null;
  readonly exited: Promise<number>;
  private readonly child: ChildProcessPort;

  constructor(
    readonly name: string,
    command: readonly string[],
    env: Record<string, string>,
    /** Added to this process's nice value for the child (0: the same CPU priority as this process). */
    niceness = 0,
  ) {
    let resolveExited!: (code: number) => void;
    this.exited = new Promise<number>((resolve) => (resolveExited = resolve));
    this.child = platform.spawnChild(command, {
      env,
      onExit: (code) => {
        this.exitCode = code;
        resolveExited(code);
      },
    });
    if (niceness > 0 && this.child.pid !== undefined) lowerPriority(name, this.child.pid, niceness);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.exitCode === null;
  }

  /** The cooperative stop: a line on stdin, then stdin closed. */
  requestStop(): void {
    if (this.alive) this.child.endStdin(STOP_LINE);
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
    platform.lowerPriority(pid, niceness);
  } catch (err) {
    log.warn(`Could not lower the CPU priority of ${name} (pid ${pid}): ${(err as Error).message}`);
  }
}

/**
 * In a child: calls `onStop` when the parent writes the stop line or closes our stdin. Returns a
 * remover that also releases stdin so the process can exit.
 */
export function listenForParentStop(onStop: () => void): () => void {
  let buffer = "";
  return platform.listenToStdin((text) => {
    buffer += text;
    if (buffer.includes(STOP_LINE.trim())) onStop();
  }, onStop);
}

/**
 * Roles split across processes around an external store, as a multi-machine deployment runs them: an
 * `agl store` process, an algorithm process and runner processes, each started with
 * AGL_MANAGED_STORE=0 and AGL_CURRENT_ROLE, reaching the store through `LightningStoreClient`. The
 * algorithm finishes; a runner with `maxRollouts` exits by itself, one stopped by SIGTERM in the middle of
 * a rollout and one stopped by SIGTERM while idle exit cleanly (code 0); every rollout ends succeeded
 * with its spans and reward.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { launchCommand, ROOT as root } from "../runtimes.ts";
import { startServerProcess } from "../server/processes.ts";

const fixture = launchCommand("node", join(root, "test/trainer/fixtures/cs-external-store.ts"));
const TASKS = 12;

interface Side {
  proc: ChildProcess;
  out(): string;
  /** Resolves with [exit code, signal]. */
  exited: Promise<[number | null, string | null]>;
  /** Resolves when the output holds a line matching `re`. */
  printed(re: RegExp): Promise<void>;
}

function startSide(env: Record<string, string>): Side {
  const proc = spawn(...fixture, {
    cwd: root,
    env: { ...process.env, NO_COLOR: "1", AGL_LOG_LEVEL: "error", AGL_MANAGED_STORE: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const waiters: (() => void)[] = [];
  const onData = (d: Buffer) => {
    out += d.toString();
    for (const w of waiters.splice(0)) w();
  };
  proc.stdout!.on("data", onData);
  proc.stderr!.on("data", onData);
  const exited = new Promise<[number | null, string | null]>((r) => proc.once("exit", (c, s) => r([c, s])));
  const printed = (re: RegExp) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (re.test(out)) resolve();
        else waiters.push(check);
      };
      void exited.then(() => (re.test(out) ? resolve() : reject(new Error(`exited before printing ${re}:\n${out}`))));
      check();
    });
  return { proc, out: () => out, exited, printed };
}

const lines = (side: Side, word: string): number[] =>
  [...side.out().matchAll(new RegExp(`^${word} (\\d+)$`, "gm"))].map((m) => Number(m[1]));

describe("roles split across processes around an external agl store (AGL_MANAGED_STORE=0, AGL_CURRENT_ROLE)", () => {
  it("the algorithm finishes; runners exit cleanly after maxRollouts or on SIGTERM, mid-rollout too; nothing is lost", async () => {
    const server = await startServerProcess("node", ["--port", "0", "--db", "memory", "--log-level", "warning"]);
    const sides: Side[] = [];
    const start = (env: Record<string, string>) => {
      const s = startSide({ STORE_URL: server.url, CS_TASKS: String(TASKS), ...env });
      sides.push(s);
      return s;
    };
    try {
      const algorithm = start({ AGL_CURRENT_ROLE: "algorithm" });
      const limited = start({ AGL_CURRENT_ROLE: "runner", CS_MAX_ROLLOUTS: "3", CS_TASK_MS: "150" });
      const slow = start({ AGL_CURRENT_ROLE: "runner", CS_TASK_MS: "1500" });
      // SIGTERM while the slow runner is in the middle of its first rollout.
      await slow.printed(/^START \d+$/m);
      slow.proc.kill("SIGTERM");
      expect(await slow.exited, slow.out()).toEqual([0, null]);
      const rest = start({ AGL_CURRENT_ROLE: "runner", CS_TASK_MS: "50" });

      expect(await limited.exited, limited.out()).toEqual([0, null]);
      expect(lines(limited, "DONE")).toHaveLength(3);
      expect(lines(limited, "EXIT")).toEqual([3]);

      expect(await algorithm.exited, algorithm.out()).toEqual([0, null]);
      const report = JSON.parse(/^REPORT (.*)$/m.exec(algorithm.out())![1]!) as {
        finished: number;
        rollouts: { input: { i: number }; status: string; attempts: string[]; spans: string[]; reward: number }[];
      };
      expect(report.finished).toBe(TASKS);
      for (const r of report.rollouts) {
        expect(r.status, JSON.stringify(r)).toBe("succeeded");
        expect(r.attempts.at(-1), JSON.stringify(r)).toBe("succeeded");
        expect(
          r.attempts.slice(0, -1).every((a) => a === "failed" || a === "unresponsive" || a === "timeout"),
          JSON.stringify(r),
        ).toBe(true);
        expect(r.spans).toEqual(["agentlightning.message", "agentlightning.annotation"]);
        expect(r.reward).toBeCloseTo(1 + r.input.i / 100);
      }

      // The idle runner stops on SIGTERM too.
      rest.proc.kill("SIGTERM");
      expect(await rest.exited, rest.out()).toEqual([0, null]);
      // Each rollout was finished once by the runners (a retried one by the runner that retried it).
      const finishedByRunners = [...lines(limited, "DONE"), ...lines(slow, "DONE"), ...lines(rest, "DONE")].sort((a, b) => a - b);
      expect(finishedByRunners).toEqual(Array.from({ length: TASKS }, (_, i) => i));
      expect([...lines(slow, "EXIT"), ...lines(rest, "EXIT")].reduce((a, b) => a + b, 0)).toBe(TASKS - 3);
    } finally {
      for (const s of sides) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill("SIGKILL");
      expect(await server.stop("SIGTERM")).toBe(0);
    }
  }, 180_000);
});

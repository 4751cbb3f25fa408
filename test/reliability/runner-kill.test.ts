/**
 * A runner child killed from outside (SIGKILL from this test process) in the middle of a rollout, with
 * the rollout config Baseline uses by default (no timeout, no unresponsive limit of its own): the
 * client-server strategy notices the exit, fails the attempt so the rollout's retry policy applies,
 * restarts the runner, and `Trainer.fit` finishes (docs/departures.md#21, docs/trainer-reliability.md).
 */
import { spawn, spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { launchCommand } from "../runtimes.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const fixture = join(root, "test/reliability/fixtures/kill-fit.ts");

interface Report {
  error: string | null;
  rollouts: {
    task: number;
    status: string;
    config: { unresponsive_seconds: number | null; timeout_seconds: number | null };
    attempts: { status: string; worker: string | null }[];
  }[];
  restarts: Record<string, number>;
  children: { name: string; pid: number; exitCode: number | null }[];
}

/** Process groups of runs still going when a test ends (a hung run must not outlive the test). */
const groups: number[] = [];
afterEach(() => {
  for (const pgid of groups.splice(0)) {
    try {
      process.kill(-pgid, "SIGKILL");
    } catch {
      // already gone
    }
  }
});

/**
 * Runs the fixture; when a runner prints `BLOCKED pid=N`, this process kills N with SIGKILL. Resolves
 * with the report, the killed pid and the run's exit code; a run that has not ended after `limitMs` is
 * a failure (the hang this guards against), not a wait.
 */
function runAndKill(env: Record<string, string>, limitMs = 150_000): Promise<{ report: Report; killed: number; code: number | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn(...launchCommand("node", fixture), {
      cwd: root,
      detached: true,
      env: { ...process.env, NO_COLOR: "1", AGL_LOG_LEVEL: "error", ...env },
      stdio: ["ignore", "pipe", "inherit"],
    });
    groups.push(child.pid!);
    let out = "";
    let killed = 0;
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      out += chunk;
      const m = /BLOCKED pid=(\d+)/.exec(out);
      if (m && killed === 0) {
        killed = Number(m[1]);
        process.kill(killed, "SIGKILL");
      }
    });
    const timer = setTimeout(() => reject(new Error(`the run did not finish within ${limitMs / 1000} s:\n${out}`)), limitMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      const line = out.split("\n").find((l) => l.startsWith("REPORT "));
      if (!line) return reject(new Error(`no report (exit ${code}):\n${out}`));
      resolve({ report: JSON.parse(line.slice(7)) as Report, killed, code });
    });
  });
}

const pidsOf = (pattern: string): string[] => spawnSync("pgrep", ["-f", pattern], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);

describe("a runner process killed mid-rollout (kill -9 from outside)", () => {
  it("default rollout config: the attempt is failed at once, the rollout fails, the runner is restarted and fit finishes", async () => {
    const { report, killed, code } = await runAndKill({ KILL_TASKS: "6", KILL_RUNNERS: "2" });
    expect(code).toBe(0);
    expect(report.error).toBeNull();
    expect(killed).toBeGreaterThan(0);
    const [victim, ...others] = report.rollouts;
    expect(victim!.task).toBe(0);
    // Failed by the strategy on the exit, not by a watchdog verdict (which would say unresponsive).
    expect(victim!.attempts.map((a) => a.status)).toEqual(["failed"]);
    expect(victim!.status).toBe("failed");
    expect(others.map((r) => r.status)).toEqual(["succeeded", "succeeded", "succeeded", "succeeded", "succeeded"]);
    // Baseline set no limit of its own; the Trainer's default applies (6 heartbeats of 0.5 s, at least 30 s).
    expect(victim!.config).toMatchObject({ unresponsive_seconds: 30, timeout_seconds: null });
    // The killed runner was replaced: one restart of that worker, its old process counted as killed.
    const victimChild = report.children.find((c) => c.pid === killed)!;
    expect(victimChild.exitCode).toBe(-9);
    const slot = victimChild.name.replace("runner-", "");
    expect(victim!.attempts[0]!.worker).toBe(`Worker-${slot}`);
    expect(report.restarts).toEqual({ [slot]: 1 });
    expect(report.children.filter((c) => c.pid !== killed).map((c) => c.exitCode)).toEqual([0, 0]);
    expect(pidsOf(fixture)).toEqual([]);
  }, 180_000);

  it("with retries configured, the rollout is retried and succeeds", async () => {
    const { report, code } = await runAndKill({ KILL_TASKS: "4", KILL_RUNNERS: "2", KILL_RETRY: "1" });
    expect(code).toBe(0);
    expect(report.error).toBeNull();
    const victim = report.rollouts[0]!;
    expect(victim.attempts.map((a) => a.status)).toEqual(["failed", "succeeded"]);
    expect(victim.status).toBe("succeeded");
    expect(report.rollouts.every((r) => r.status === "succeeded")).toBe(true);
    expect(pidsOf(fixture)).toEqual([]);
  }, 180_000);

  it("when the only runner dies and may not be restarted, fit fails with a clear error instead of waiting", async () => {
    const { report, code } = await runAndKill({ KILL_TASKS: "3", KILL_RUNNERS: "1", KILL_RESTARTS: "0" });
    expect(code).toBe(0);
    expect(report.error).toMatch(/^RuntimeError: Every runner process has exited \(runner-0 exitcode=-9\)/);
    expect(report.rollouts[0]!.attempts.map((a) => a.status)).toEqual(["failed"]);
    expect(report.restarts).toEqual({});
    expect(pidsOf(fixture)).toEqual([]);
  }, 180_000);
});

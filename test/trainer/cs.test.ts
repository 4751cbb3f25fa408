/**
 * The client-server strategy with real child processes: runners re-run the fixture script, talk to
 * the in-process server over HTTP, and are shut down so none lingers. Also a runner killed with
 * SIGKILL mid-rollout: the strategy fails its attempt, the rollout is requeued and finished, the runner
 * is restarted, and the trainer still finishes. Plus the example under Deno and Bun.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { launchCommand, ROOT as root, runOnRuntime } from "../runtimes.ts";

const fixture = join(root, "test/trainer/fixtures/cs-fit.ts");
const fixtureCommand = launchCommand("node", fixture);

interface Report {
  finished: number;
  rollouts: { status: string; attempts: { status: string; worker: string }[]; spans: string[]; message: string; reward: number }[];
  /** The algorithm process's nice value. */
  nice: number;
  workers: { id: string; host: string | null }[];
  exitCodes: [string, number | null][];
}

function run(env: Record<string, string>): Report {
  const out = spawnSync(...fixtureCommand, {
    cwd: root,
    encoding: "utf8",
    timeout: 120_000,
    env: { ...process.env, NO_COLOR: "1", AGL_LOG_LEVEL: "error", ...env },
  });
  const line = out.stdout.split("\n").find((l) => l.startsWith("REPORT "));
  if (!line) throw new Error(`no report (status ${out.status}):\n${out.stdout}\n${out.stderr}`);
  return JSON.parse(line.slice(7)) as Report;
}

/** The nice value of the runner that ran a rollout (the fixture's agent puts it in its message). */
const runnerNice = (r: Report["rollouts"][number]): number => Number(/ nice (-?\d+)$/.exec(r.message)![1]);

const pidsOf = (pattern: string): string[] => {
  const r = spawnSync("pgrep", ["-f", pattern], { encoding: "utf8" });
  return r.stdout.split("\n").filter(Boolean);
};

describe("ClientServerExecutionStrategy", () => {
  it("runs runners as child processes against the served store and shuts them all down", () => {
    const report = run({ CS_TASKS: "8", CS_RUNNERS: "2" });
    expect(report.finished).toBe(8);
    report.rollouts.forEach((r, i) => {
      expect(r.status).toBe("succeeded");
      expect(r.spans).toEqual(["agentlightning.message", "agentlightning.annotation"]);
      expect(r.reward).toBeCloseTo(1 + i / 100);
    });
    // Both runner processes reached the server (claims or heartbeats with telemetry); claims carry their labels.
    const workers = new Set(report.rollouts.flatMap((r) => r.attempts.map((a) => a.worker)));
    expect([...workers].every((w) => w === "Worker-0" || w === "Worker-1")).toBe(true);
    expect(report.workers.map((w) => w.id).sort()).toEqual(["Worker-0", "Worker-1"]);
    expect(report.exitCodes).toEqual([
      ["runner-0", 0],
      ["runner-1", 0],
    ]);
    expect(pidsOf(fixture)).toEqual([]);
    // Runner children run at a lower CPU priority than the serving process (default: nice + 10).
    const nices = new Set(report.rollouts.map(runnerNice));
    expect([...nices]).toEqual([Math.min(19, report.nice + 10)]);
  }, 120_000);

  it("runnerNiceness sets how much lower the runners' CPU priority is; 0 keeps it equal", () => {
    for (const niceness of ["0", "3"]) {
      const report = run({ CS_TASKS: "2", CS_RUNNERS: "1", CS_NICENESS: niceness });
      expect(report.finished).toBe(2);
      const nices = report.rollouts.map(runnerNice);
      const expected = Math.min(19, report.nice + Number(niceness));
      expect(nices).toEqual([expected, expected]);
    }
  }, 120_000);

  it("a runner SIGKILLed mid-rollout: the strategy fails its attempt at once, the rollout is retried, the runner restarted", () => {
    const report = run({ CS_TASKS: "4", CS_RUNNERS: "2", CS_KILL: "1" });
    expect(report.finished).toBe(4);
    const victim = report.rollouts[0]!;
    expect(victim.status).toBe("succeeded");
    // "failed" (the exit was noticed), not "unresponsive" (the watchdog after 2 s of silence).
    expect(victim.attempts.map((a) => a.status)).toEqual(["failed", "succeeded"]);
    expect(victim.reward).toBeCloseTo(1);
    expect(report.rollouts.slice(1).every((r) => r.status === "succeeded")).toBe(true);
    // The killed runner (-9) and its replacement, which stopped cleanly with the other one.
    expect(report.exitCodes.map(([, code]) => code).sort()).toEqual([-9, 0, 0]);
    expect(pidsOf(fixture)).toEqual([]);
  }, 120_000);

  for (const runtime of ["deno", "bun"] as const) {
    it(`${runtime}: the example trains under both strategies, children started with the same runtime`, async () => {
      for (const strategy of ["shm", "cs"]) {
        const r = await runOnRuntime(runtime, join(root, "examples/arithmetic/train.ts"), {
          args: [strategy],
          env: { AGL_LOG_LEVEL: "error" },
          timeout: 120_000,
        });
        expect(r.code, r.stderr).toBe(0);
        expect(r.stdout).toContain(`strategy=${strategy} rollouts=24 succeeded=24 mean_reward=1.000`);
      }
    }, 240_000);
  }
});

describe("shutdown escalation", () => {
  it("stop line, then SIGINT, SIGTERM and SIGKILL, each only for the children still alive", async () => {
    const { ChildHandle, ClientServerExecutionStrategy } = await import("../../src/trainer/index.ts");
    const { LocalEvent } = await import("../../src/runner/index.ts");
    const node = (code: string) => [process.execPath, "-e", code];
    const children = [
      // Cooperative: exits on the stop line.
      new ChildHandle(
        "polite",
        node(`process.stdin.on("data", (d) => { if (String(d).includes("agl:stop")) process.exit(0); }); setInterval(() => {}, 1000);`),
        {},
      ),
      // Ignores stdin, exits on SIGINT with code 0 (as a runner child does).
      new ChildHandle("sigint", node(`process.on("SIGINT", () => process.exit(0)); setInterval(() => {}, 1000);`), {}),
      // Ignores stdin and SIGINT: needs SIGTERM.
      new ChildHandle("sigterm", node(`process.on("SIGINT", () => {}); setInterval(() => {}, 1000);`), {}),
      // Ignores everything it can: needs SIGKILL.
      new ChildHandle("sigkill", node(`process.on("SIGINT", () => {}); process.on("SIGTERM", () => {}); setInterval(() => {}, 1000);`), {}),
    ];
    await new Promise((r) => setTimeout(r, 500));
    const strategy = new ClientServerExecutionStrategy({ gracefulTimeout: 1, terminateTimeout: 1 });
    const event = new LocalEvent();
    await (strategy as unknown as { shutdownProcesses(c: unknown[], e: unknown): Promise<void> }).shutdownProcesses(children, event);
    expect(event.isSet()).toBe(true);
    expect(children.map((c) => [c.name, c.exitCode])).toEqual([
      ["polite", 0],
      ["sigint", 0],
      ["sigterm", -15],
      ["sigkill", -9],
    ]);
    expect(() => (strategy as unknown as { checkExitCodes(c: unknown[]): void }).checkExitCodes(children)).toThrow(
      "Subprocesses failed with unexpected exit codes: sigkill (exitcode=-9)",
    );
  }, 30_000);
});

describe("roles in separate processes (AGL_CURRENT_ROLE, AGL_SERVER_HOST, AGL_SERVER_PORT)", () => {
  it("an algorithm process serves the store, a runner process does the rollouts, SIGINT ends the runner cleanly", async () => {
    const { spawn } = await import("node:child_process");
    const { createServer } = await import("node:net");
    const port = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, "127.0.0.1", () => {
        const p = (srv.address() as { port: number }).port;
        srv.close(() => resolve(p));
      });
    });
    const base = {
      ...process.env,
      NO_COLOR: "1",
      AGL_LOG_LEVEL: "error",
      AGL_SERVER_HOST: "127.0.0.1",
      AGL_SERVER_PORT: String(port),
      CS_TASKS: "4",
      CS_RUNNERS: "1",
    };
    const start = (role: string) =>
      spawn(...fixtureCommand, {
        cwd: root,
        env: { ...base, AGL_CURRENT_ROLE: role },
        stdio: ["ignore", "pipe", "pipe"],
      });
    const exited = (p: ReturnType<typeof start>) => new Promise<[number | null, string | null]>((r) => p.once("exit", (c, s) => r([c, s])));
    const algorithm = start("algorithm");
    let out = "";
    algorithm.stdout!.on("data", (d) => (out += d));
    const runner = start("runner");
    const runnerExit = exited(runner);
    expect(await exited(algorithm)).toEqual([0, null]);
    const report = JSON.parse(
      out
        .split("\n")
        .find((l) => l.startsWith("REPORT "))!
        .slice(7),
    ) as Report;
    expect(report.rollouts.map((r) => r.status)).toEqual(["succeeded", "succeeded", "succeeded", "succeeded"]);
    expect(new Set(report.rollouts.map((r) => r.attempts[0]!.worker))).toEqual(new Set(["Worker-0"]));
    expect(report.exitCodes).toEqual([]);
    runner.kill("SIGINT");
    expect(await runnerExit).toEqual([0, null]);
  }, 120_000);
});

describe("main_process='runner'", () => {
  it("runs runner 0 in this process and the algorithm (with the server) in a child, which ends the run", async () => {
    const { createServer } = await import("node:net");
    const port = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, "127.0.0.1", () => {
        const p = (srv.address() as { port: number }).port;
        srv.close(() => resolve(p));
      });
    });
    const report = run({ CS_TASKS: "3", CS_RUNNERS: "1", CS_MAIN: "runner", CS_PORT: String(port) });
    expect(report.rollouts.map((r) => r.status)).toEqual(["succeeded", "succeeded", "succeeded"]);
    expect(report.rollouts.every((r) => r.attempts[0]!.worker === "Worker-0")).toBe(true);
    expect(pidsOf(fixture)).toEqual([]);
  }, 120_000);
});

/**
 * `agl train` resumed after Ctrl-C in the middle of a step: the interrupted run's open rollouts (queued,
 * being run) would call its policy server, which is gone. The resumed run cancels them with one line and
 * trains on: no connection errors, no stack, a handful of lines. Both runs are child processes.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { trainTasks } from "../../examples/calc/tasks.ts";
import { exportHf, loadCheckpoint } from "../../src/model/index.ts";
import { openStore } from "../../src/store/index.ts";
import { ROOT } from "../runtimes.ts";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "agl-resume-"));
  const ckpt = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
  await exportHf(join(dir, "model"), { config: ckpt.config, params: ckpt.params });
  await writeFile(
    join(dir, "train.jsonl"),
    trainTasks(32, 3)
      .map((t) => `${JSON.stringify(t)}\n`)
      .join(""),
  );
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** `agl train` (the npm binary, from the clone) as a child process; resolves with its exit code and output. */
function agl(
  args: string[],
  env: Record<string, string> = {},
): { child: ChildProcess; done: Promise<{ code: number | null; output: string }> } {
  const child = spawn(process.execPath, ["bin/agl.mjs", "train", ...args], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
  const done = new Promise<{ code: number | null; output: string }>((resolve) => child.on("close", (code) => resolve({ code, output })));
  return { child, done };
}

describe("agl train resumed after Ctrl-C mid-step", () => {
  it("cancels the interrupted run's open rollouts in one line and trains on without connection errors", async () => {
    const out = join(dir, "run");
    const mark = join(dir, "held");
    const flags = (steps: number) => [
      ...["--model", join(dir, "model"), "--agent", "test/fixtures/train/hold-agent.ts", "--data", join(dir, "train.jsonl")],
      ...["--out", out, "--steps", String(steps), "--batch", "4", "--group", "4", "--checkpoint-every", "1", "--val-every", "0"],
      ...["--max-prompt", "58", "--max-response", "6", "--device", "cpu", "--runners", "2", "--no-progress"],
    ];
    // step 1 takes 16 calls; the 20th, in step 2, holds: its rollouts stay open
    const first = agl(flags(3), { AGL_TEST_HOLD_AFTER: "20", AGL_TEST_HOLD_MARK: mark });
    const deadline = Date.now() + 120_000;
    while (!existsSync(mark) && Date.now() < deadline && first.child.exitCode === null) await new Promise((r) => setTimeout(r, 100));
    expect(existsSync(mark), (await Promise.race([first.done, { output: "(still running)" }])).output).toBe(true);
    first.child.kill("SIGINT");
    const stopped = await first.done;
    expect(stopped.code).toBe(130);

    const store = await openStore(`file:${join(out, "store.db")}`);
    const left = (await store.queryRollouts({ status_in: ["queuing", "preparing", "running"] })).items.length;
    await store.close();
    expect(left).toBeGreaterThan(4);

    const resumed = await agl(flags(3)).done;
    expect(resumed.code, resumed.output).toBe(0);
    expect(resumed.output).not.toMatch(/ECONNREFUSED|Connection error/);
    expect(resumed.output).not.toMatch(/^\s+at /m);
    expect(resumed.output).toMatch(/resuming after step 1/);
    expect(resumed.output).toMatch(new RegExp(`cancelled ${left} rollouts an earlier, interrupted run left open`));
    expect(resumed.output).toMatch(/done: 3 steps on cpu/);
    // resuming, the cancel, the run's line, done
    expect(resumed.output.trim().split("\n").length).toBeLessThanOrEqual(5);
  }, 300_000);
});

/**
 * A newcomer's first hour, as the README tells it: its commands, read from its code blocks, run in order in
 * a fresh copy of the repository (no runs/, no dist/; node_modules linked as `npm ci` would have made it),
 * each a child process with short settings: the GRPO demo, the Hugging Face demo, `agl serve` and the
 * README's curl, `agl train` for a few steps, interrupted with Ctrl-C and resumed, the LLM proxy recording
 * into `agl store`, and the store's dashboard. What each prints is checked: no stack trace, and a failure
 * says what is wrong in a line or two.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LightningStoreClient } from "../../src/client/index.ts";
import { ROOT } from "../runtimes.ts";

const README = readFileSync(join(ROOT, "README.md"), "utf8");

/** The README's shell commands: each line of its ```sh blocks, continuation lines joined, comments dropped. */
function readmeCommands(): string[] {
  const commands: string[] = [];
  for (const block of README.matchAll(/^```sh\n([\s\S]*?)^```/gm))
    for (const line of block[1]!.replace(/\\\n\s*/g, "").split("\n")) {
      const command = line.replace(/\s+#.*$/, "").trim();
      if (command !== "" && !command.startsWith("#")) commands.push(command);
    }
  return commands;
}

/** The README command that starts with `prefix`, as words. */
function readme(prefix: string): string[] {
  const command = readmeCommands().find((c) => c.startsWith(prefix));
  if (command === undefined) throw new Error(`README.md shows no command starting with ${JSON.stringify(prefix)}`);
  return command.split(/\s+/);
}

/** `words` with each `--flag value` of `set` replaced (or added). */
function withFlags(words: string[], set: Record<string, string>): string[] {
  const out = [...words];
  for (const [flag, value] of Object.entries(set)) {
    const at = out.indexOf(flag);
    if (at >= 0) out[at + 1] = value;
    else out.push(flag, value);
  }
  return out;
}

let clone = "";
const started: ChildProcess[] = [];

beforeAll(() => {
  clone = mkdtempSync(join(tmpdir(), "agl-newcomer-"));
  const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z"], { cwd: ROOT, encoding: "utf8" })
    .split("\0")
    .filter((f) => f !== "" && f !== "node_modules" && existsSync(join(ROOT, f)));
  for (const f of files) {
    mkdirSync(dirname(join(clone, f)), { recursive: true });
    copyFileSync(join(ROOT, f), join(clone, f));
  }
  symlinkSync(realpathSync(join(ROOT, "node_modules")), join(clone, "node_modules"), "dir");
});

afterAll(() => {
  for (const p of started)
    try {
      process.kill(-p.pid!, "SIGKILL");
    } catch {
      // already ended
    }
  if (clone) rmSync(clone, { recursive: true, force: true });
});

interface Proc {
  child: ChildProcess;
  output: () => string;
  /** The exit code, or the signal that ended it (npm, under `npx` and `npm run`, dies of the terminal's signal). */
  done: Promise<number | NodeJS.Signals | null>;
}

/** Starts `words` (a README command) in the copy, in its own process group as a terminal would. */
function start(words: string[]): Proc {
  const [cmd, ...args] = words;
  const child = spawn(cmd!, args, {
    cwd: clone,
    env: { ...process.env, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  started.push(child);
  let output = "";
  child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
  const done = new Promise<number | NodeJS.Signals | null>((resolve) => child.on("close", (code, sig) => resolve(code ?? sig)));
  return { child, output: () => output, done };
}

/** Runs `words` to its end: its exit code and output. */
async function runToEnd(words: string[]): Promise<{ code: number | NodeJS.Signals | null; output: string }> {
  const p = start(words);
  const code = await p.done;
  return { code, output: p.output() };
}

/** Waits until the output matches `pattern` (the match), or fails with what was printed. */
async function waitFor(p: Proc, pattern: RegExp, seconds = 120): Promise<RegExpExecArray> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const m = pattern.exec(p.output());
    if (m) return m;
    if (p.child.exitCode !== null || Date.now() > deadline)
      throw new Error(`no ${pattern} (exit ${p.child.exitCode}):\n${p.output().slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Ctrl-C (or SIGTERM) to the process group, as a terminal sends it. */
const signal = (p: Proc, sig: "SIGINT" | "SIGTERM"): void => void process.kill(-p.child.pid!, sig);

/** No stack trace anywhere in what a command printed. */
function noStack(output: string): void {
  expect(output, output).not.toMatch(/^\s+at /m);
  expect(output).not.toMatch(/ECONNREFUSED/);
}

/** The chat request of the README's curl. */
const curlBody = (): { model: string } => JSON.parse(/curl [^\n]*\n\s*-d '([^']+)'/.exec(README)![1]!) as { model: string };

describe("the README, top to bottom, in a fresh copy", () => {
  let serve: Proc;
  let served = "";

  it("npm run demo (short)", async () => {
    expect(readmeCommands()[0]).toMatch(/^npm ci && npm run demo$/);
    const r = await runToEnd([
      "npm",
      "run",
      "demo",
      "--",
      "--steps",
      "2",
      "--batch",
      "4",
      "--n",
      "4",
      "--val-tasks",
      "8",
      "--runners",
      "2",
    ]);
    noStack(r.output);
    expect(r.output).toMatch(/held-out accuracy: .* before, .* after/);
    expect(r.code).toBe(0);
  }, 180_000);

  it("npm run demo:hf (short) leaves the model and tasks the LoRA command uses", async () => {
    const r = await runToEnd(["npm", "run", "demo:hf", "--", "--steps", "2", "--batch", "4", "--group", "4", "--val-tasks", "8"]);
    noStack(r.output);
    expect(r.code, r.output).toBe(0);
    for (const f of ["runs/calc-hf/model/config.json", "runs/calc-hf/train.jsonl", "runs/calc-hf/val.jsonl"])
      expect(existsSync(join(clone, f))).toBe(true);
  }, 180_000);

  it("agl serve, and the README's curl with the model name it prints", async () => {
    const words = readme("npx agl serve --model ./Qwen2.5-0.5B-Instruct --name");
    serve = start(withFlags(words, { "--model": "runs/calc-hf/model", "--port": "0" }));
    const [, url, name] = await waitFor(serve, /at (http:\/\/\S+\/v1); clients send "model": "([^"]+)"/);
    served = url!;
    const body = curlBody();
    expect(body.model).toBe(name);
    const res = await fetch(`${served}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: unknown[] }).choices).toHaveLength(1);
  }, 120_000);

  const train = (set: Record<string, string>): string[] =>
    withFlags(readme("npx agl train --model runs/calc-hf/model"), { "--batch": "4", "--group": "4", "--val-every": "0", ...set });

  it("agl train for a few steps, then agl serve --adapter serves what it learned", async () => {
    const r = await runToEnd(train({ "--steps": "2" }));
    noStack(r.output);
    expect(r.output).toMatch(/done: 2 steps on \w+.*adapter runs\/my-agent\/adapter/);
    expect(r.code).toBe(0);
    const adapter = start(withFlags(readme("npx agl serve --model runs/calc-hf/model --adapter"), { "--port": "0" }));
    await waitFor(adapter, /clients send "model"/);
    signal(adapter, "SIGTERM");
    expect([0, "SIGTERM"]).toContain(await adapter.done);
    expect(adapter.output()).toMatch(/SIGTERM received: stopping/);
    noStack(adapter.output());
  }, 180_000);

  it("Ctrl-C in the middle of a run, then the same command resumes it in a few lines", async () => {
    const longer = train({ "--steps": "6", "--checkpoint-every": "1" });
    const run = start(longer);
    await waitFor(run, /step 4\/6/);
    signal(run, "SIGINT");
    expect([130, "SIGINT"]).toContain(await run.done);
    noStack(run.output());
    expect(run.output()).toMatch(/SIGINT: stopping; run the same command again to resume/);
    const again = await runToEnd(longer);
    noStack(again.output);
    expect(again.output).toMatch(/resuming after step [3-6]/);
    expect(again.output).toMatch(/done: 6 steps/);
    expect(again.code).toBe(0);
    // resuming (+ cancelled rollouts), the run, at most 3 steps, the validation at the end, done
    expect(again.output.trim().split("\n").length).toBeLessThanOrEqual(9);
  }, 240_000);

  it("agl proxy in front of agl serve records the calls under a rollout's prefix in agl store, which the dashboard shows", async () => {
    expect(README).toContain("npx agl store");
    const store = start(["npx", "agl", "store", "--port", "0"]);
    const [, storeUrl] = await waitFor(store, /listening on (http:\/\/\S+)/);
    const config = /# proxy\.json: (\{.*\})/.exec(README)![1]!.replace("http://127.0.0.1:8000/v1", served);
    writeFileSync(join(clone, "proxy.json"), config);
    const proxy = start(withFlags(readme("npx agl proxy --config proxy.json --store"), { "--store": storeUrl!, "--port": "0" }));
    const [, proxyUrl] = await waitFor(proxy, /at (http:\/\/\S+)\/v1/);

    const client = new LightningStoreClient(storeUrl!);
    const rollout = await client.startRollout({ question: "Hi!" });
    const call = (base: string) =>
      fetch(`${base}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(curlBody()),
      });
    expect((await call(`${proxyUrl}/rollout/${rollout.rollout_id}/attempt/${rollout.attempt.attempt_id}/v1`)).status).toBe(200);
    expect((await call(`${proxyUrl}/v1`)).status).toBe(200); // forwarded, not recorded
    const spans = (await client.querySpans(rollout.rollout_id)).items;
    expect(spans.length).toBe(1);
    expect(JSON.stringify(spans[0]!.attributes)).toMatch(/prompt_token_ids|token_ids/);
    await client.close();

    const page = await fetch(`${storeUrl}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/text\/html/);
    const listed = (await (await fetch(`${storeUrl}/v1/agl/rollouts`)).json()) as { items: { rollout_id: string }[] };
    expect(listed.items.map((r) => r.rollout_id)).toContain(rollout.rollout_id);

    for (const p of [proxy, store, serve]) signal(p, "SIGTERM");
    for (const p of [proxy, store, serve]) {
      expect([0, "SIGTERM"]).toContain(await p.done);
      expect(p.output()).toMatch(/SIGTERM received/);
      noStack(p.output());
    }
  }, 120_000);
});

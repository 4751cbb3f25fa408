/**
 * `agl train` checks what it is given before anything runs, and says what is wrong in one line: row limits
 * against the model's context (defaulted from it when not given), a model path that is a file or missing,
 * a store file in a missing folder, an agent module that cannot be imported. A run folder is claimed
 * (run.json) only once every input is good, so a mistake never leaves a folder that refuses the corrected
 * command. The commands run as child processes (the npm binary, from the clone).
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fitRowLimits, TrainConfigSchema } from "../../src/cli/train-config.ts";
import { heldOutTasks, trainTasks } from "../../examples/calc/tasks.ts";
import { exportHf, loadCheckpoint, loadPretrained, ModelFolderError } from "../../src/model/index.ts";
import { openStore } from "../../src/store/index.ts";
import { ValidationError } from "../../src/types/index.ts";
import { ROOT } from "../runtimes.ts";

let dir = "";
const jsonl = (xs: readonly unknown[]): string => xs.map((x) => `${JSON.stringify(x)}\n`).join("");
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "agl-inputs-"));
  const ckpt = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
  // the model `npm run demo:hf` exports: a context of 64 tokens
  await exportHf(join(dir, "model"), { config: ckpt.config, params: ckpt.params });
  await writeFile(join(dir, "train.jsonl"), jsonl(trainTasks(16, 3)));
  await writeFile(join(dir, "val.jsonl"), jsonl(heldOutTasks(4)));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** `agl <args>` through the npm binary; never rejects. */
const agl = (args: string[]): Promise<{ code: number; output: string }> =>
  new Promise((resolve) => {
    execFile(
      process.execPath,
      ["bin/agl.mjs", ...args],
      { cwd: ROOT, timeout: 180_000, env: { ...process.env, NO_COLOR: "1" } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
    );
  });

/** The output is one line (no stack, no usage text) that matches every pattern. */
function oneLine(output: string, ...patterns: RegExp[]): void {
  expect(output.trim().split("\n"), output).toHaveLength(1);
  for (const p of patterns) expect(output).toMatch(p);
}

const train = (out: string, extra: string[] = [], over: Record<string, string> = {}): string[] => {
  const flags: Record<string, string> = {
    "--model": join(dir, "model"),
    "--agent": "examples/calc/agent.ts",
    "--data": join(dir, "train.jsonl"),
    "--out": out,
    "--steps": "1",
    "--batch": "2",
    "--group": "2",
    "--device": "cpu",
    ...over,
  };
  return ["train", ...Object.entries(flags).flat(), "--no-progress", ...extra];
};

describe("row limits and the model's context", () => {
  const config = (over: Record<string, unknown> = {}) => TrainConfigSchema.parse({ model: "m", agent: "a", data: "d", ...over });

  it("defaults them from the context, keeps what is given, and names both flags when they do not fit", () => {
    expect(fitRowLimits(config(), 4096)).toMatchObject({ maxPrompt: 512, maxResponse: 256 });
    expect(fitRowLimits(config(), 64)).toMatchObject({ maxPrompt: 43, maxResponse: 21 });
    expect(fitRowLimits(config({ maxResponse: 6 }), 64)).toMatchObject({ maxPrompt: 58, maxResponse: 6 });
    expect(fitRowLimits(config({ maxPrompt: 40 }), 64)).toMatchObject({ maxPrompt: 40, maxResponse: 24 });
    expect(fitRowLimits(config({ maxPrompt: 100 }), 4096)).toMatchObject({ maxPrompt: 100, maxResponse: 256 });
    expect(() => fitRowLimits(config({ maxPrompt: 512, maxResponse: 256 }), 64)).toThrow(
      "--max-prompt 512 + --max-response 256 = 768 tokens exceed m's context of 64 tokens: give --max-prompt and --max-response that add up to at most 64",
    );
    expect(() => fitRowLimits(config({ maxPrompt: 64 }), 64)).toThrow(
      /^--max-prompt 64 leaves no room for a response in m's context of 64/,
    );
  });

  it("agl train on a 64-token model without limits trains with rows that fit it", async () => {
    const r = await agl(train(join(dir, "small"), ["--val-data", join(dir, "val.jsonl")]));
    expect(r.output).toMatch(/rows of 43 \+ 21 tokens \(context 64\)/);
    expect(r.output).toMatch(/done: 1 steps on cpu/);
    expect(r.code).toBe(0);
  }, 200_000);

  it("limits over the context fail in one line before anything runs (no validation, no run folder)", async () => {
    const out = join(dir, "too-long");
    const r = await agl(train(out, ["--val-data", join(dir, "val.jsonl"), "--max-prompt", "60", "--max-response", "16"]));
    oneLine(r.output, /--max-prompt 60 \+ --max-response 16 = 76 tokens exceed .*model's context of 64 tokens/, /add up to at most 64/);
    expect(r.code).toBe(2);
    expect(existsSync(join(out, "run.json"))).toBe(false);
  }, 200_000);
});

describe("bad paths: one line naming the path and what was expected", () => {
  it("a model path that is a file, or missing (agl train, agl serve)", async () => {
    const file = join(dir, "model", "config.json");
    const [asFile, missing, serve] = await Promise.all([
      agl(train(join(dir, "m-file"), [], { "--model": file })),
      agl(train(join(dir, "m-missing"), [], { "--model": join(dir, "nowhere") })),
      agl(["serve", "--model", file, "--port", "0"]),
    ]);
    oneLine(
      asFile.output,
      new RegExp(`^agl train: ${file} is a file, not a folder: expected a Hugging Face model folder holding config.json`),
    );
    oneLine(missing.output, new RegExp(`^agl train: ${join(dir, "nowhere")} does not exist: expected a Hugging Face model folder`));
    oneLine(serve.output, new RegExp(`^agl serve: ${file} is a file, not a folder`));
    expect([asFile.code, missing.code, serve.code]).toEqual([1, 1, 1]);
    expect(existsSync(join(dir, "m-file", "run.json")) || existsSync(join(dir, "m-missing", "run.json"))).toBe(false);
    await expect(loadPretrained(join(dir, "nowhere"))).rejects.toBeInstanceOf(ModelFolderError);
  }, 200_000);

  it("a store file in a missing folder, for agl store --db and agl train --store", async () => {
    const db = `file:${join(dir, "no-such-folder", "store.db")}`;
    const [store, trainer] = await Promise.all([
      agl(["store", "--db", db, "--port", "0"]),
      agl(train(join(dir, "s-missing"), ["--store", db])),
    ]);
    const said = new RegExp(`cannot open the database ${db}: the folder ${join(dir, "no-such-folder")} does not exist`);
    oneLine(store.output, /^agl store: /, said);
    oneLine(trainer.output, /^agl train: /, said);
    expect([store.code, trainer.code]).toEqual([1, 1]);
    expect(existsSync(join(dir, "s-missing", "run.json"))).toBe(false);
    await expect(openStore(db)).rejects.toBeInstanceOf(ValidationError);
  }, 200_000);
});

describe("the run folder is claimed once a run starts", () => {
  it("a bad --agent path leaves no run.json, and the corrected command (other settings too) runs", async () => {
    const out = join(dir, "claimed");
    const bad = await agl(train(out, [], { "--agent": "examples/calc/no-such-agent.ts", "--batch": "4" }));
    oneLine(bad.output, /^agl train: cannot import the agent module examples\/calc\/no-such-agent\.ts/);
    expect(bad.code).toBe(2);
    expect(existsSync(join(out, "run.json"))).toBe(false);
    const good = await agl(train(out, [], { "--max-response": "6" }));
    expect(good.output).not.toMatch(/holds another run/);
    expect(good.output).toMatch(/done: 1 steps on cpu/);
    expect(good.code).toBe(0);
  }, 200_000);
});

/**
 * The examples' command lines (src/cli/script-options.ts): flags derived from an options object and its
 * defaults, parsed by the agl flag parser; and, run as a child process, a typo is one line naming the flag.
 */
import { spawnSync } from "node:child_process";
import { describe, expect, it, vi } from "vitest";
import { FlagError, formatHelp } from "../../src/cli/flags.ts";
import { parseScriptArgs, runScript, type ScriptCommand, scriptCommandSpec } from "../../src/cli/script-options.ts";

interface Opts {
  steps: number;
  decayShare: number;
  fullFinetune: boolean;
  level: "a" | "b";
  out: string | null;
  threads?: number;
}

const COMMAND: ScriptCommand<Opts> = {
  usage: "demo [options]",
  defaults: { steps: 10, decayShare: 0.5, fullFinetune: false, level: "a", out: "runs/x" },
  options: {
    steps: { help: "steps", integer: true, min: 1 },
    decayShare: { help: "share", value: "S", min: 0, max: 1 },
    fullFinetune: { help: "every weight" },
    level: { help: "level", choices: ["a", "b"] },
    out: { help: "folder, or none", value: "DIR", parse: (v) => (v === "none" ? null : v) },
    threads: { help: "threads", type: "number", integer: true, min: 1 },
  },
};

describe("script options", () => {
  it("names each flag after its option in kebab case, typed by its default, with the default in the help", () => {
    const help = formatHelp(scriptCommandSpec(COMMAND));
    expect(help).toMatch(/--steps N\s+steps \[10\]/);
    expect(help).toMatch(/--decay-share S\s+share \[0\.5\]/);
    expect(help).toMatch(/--full-finetune\s+every weight \[false\]/);
    expect(help).toMatch(/--out DIR\s+folder, or none \[runs\/x\]/);
    expect(help).toMatch(/--threads N\s+threads\n/);
  });

  it("returns only the options given, converted; bad values and unknown flags throw a FlagError naming the flag", () => {
    const parse = (argv: string[]) => parseScriptArgs(COMMAND, argv);
    expect(parse([])).toEqual({ help: false, options: {} });
    expect(
      parse(["--steps", "3", "--decay-share=0.25", "--full-finetune", "--level", "b", "--out", "none", "--threads", "2"]).options,
    ).toEqual({
      steps: 3,
      decayShare: 0.25,
      fullFinetune: true,
      level: "b",
      out: null,
      threads: 2,
    });
    expect(() => parse(["--steps", "2.5"])).toThrow(/--steps/);
    expect(() => parse(["--decay-share", "2"])).toThrow(/--decay-share/);
    expect(() => parse(["--level", "c"])).toThrow(FlagError);
    expect(() => parse(["--stesp", "1"])).toThrow(/unknown option "--stesp"/);
    expect(() => parse(["--steps"])).toThrow(/--steps needs a value/);
  });

  it("runScript: one line and exit code 2 for a bad command line, the help for --help, main's code otherwise", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const logs = vi.spyOn(console, "log").mockImplementation(() => {});
    try {
      const main = vi.fn(async (o: Partial<Opts>) => (o.steps === 7 ? 0 : 5));
      expect(await runScript("demo", COMMAND, ["--stpes", "3"], main)).toBe(2);
      expect(main).not.toHaveBeenCalled();
      expect(errors.mock.calls).toEqual([[expect.stringMatching(/^demo: unknown option "--stpes".*\(--help lists the options\)$/)]]);
      expect(await runScript("demo", COMMAND, ["--help"], main)).toBe(0);
      expect(main).not.toHaveBeenCalled();
      expect(String(logs.mock.calls[0]?.[0])).toMatch(/^Usage: demo \[options\]/);
      expect(await runScript("demo", COMMAND, ["--steps", "8"], main)).toBe(5);
      expect(await runScript("demo", COMMAND, ["--steps", "7"], main)).toBe(0);
    } finally {
      errors.mockRestore();
      logs.mockRestore();
    }
  });

  it.each([
    ["examples/calc-x/train.ts", "calc-x"],
    ["examples/calc-x/sft.ts", "calc-x sft"],
    ["examples/calc/train.ts", "calc"],
    ["examples/calc/sft.ts", "calc sft"],
    ["examples/calc/hf.ts", "calc hf"],
  ])(
    "%s: a misspelt flag is one line naming it, no stack trace",
    (script, name) => {
      const bad = spawnSync(process.execPath, ["--import", "tsx", script, "--stpes", "3"], { encoding: "utf8" });
      expect(bad.status).toBe(2);
      expect(bad.stdout).toBe("");
      expect(bad.stderr.trim().split("\n")).toEqual([expect.stringMatching(new RegExp(`^${name}: unknown option "--stpes"`))]);
    },
    120_000,
  );
});

import { describe, expect, it, vi } from "vitest";
import { runCli } from "../../src/cli/agl.ts";
import {
  type CommandSpec,
  FlagError,
  formatHelp,
  InvalidFlagValueError,
  MissingFlagError,
  MissingFlagValueError,
  parseFlags,
  parseNumber,
  UnknownFlagError,
  validFlags,
} from "../../src/cli/flags.ts";
import { PROXY_COMMAND } from "../../src/cli/proxy.ts";
import { SERVE_COMMAND } from "../../src/cli/serve.ts";
import { STORE_COMMAND } from "../../src/cli/store.ts";
import { TRAIN_COMMAND } from "../../src/cli/train-config.ts";
import { UsageError } from "../../src/server/config.ts";

const DEMO = {
  usage: "demo [options]",
  about: "A command for the parser's tests.",
  sections: [
    {
      title: "Options:",
      flags: [
        { name: "name", type: "string", value: "NAME", help: "a name" },
        { name: "port", type: "number", integer: true, min: 0, max: 65535, value: "PORT", help: "a port", env: "DEMO_PORT" },
        { name: "rate", type: "number", min: 0, exclusiveMin: true, max: 1, value: "R", help: "a rate" },
        { name: "wait", type: "number", unit: "seconds", value: "S", help: "a wait\nsecond line" },
        { name: "mode", type: "string", choices: ["fast", "slow"], value: "M", help: "fast | slow" },
        { name: "tag", type: "string", repeatable: true, value: "TAG", help: "a tag (repeatable)" },
        { name: "dry-run", type: "boolean", help: "do nothing" },
        { name: "a-rather-long-flag-name", type: "string", value: "VALUE", help: "on its own line" },
        { name: "secret", type: "boolean", hidden: true, help: "not listed" },
      ],
    },
  ],
  footer: "More in the docs.",
} as const satisfies CommandSpec;

const REQUIRED = {
  usage: "req --in FILE",
  sections: [{ title: "Options:", flags: [{ name: "in", type: "string", value: "FILE", required: true, help: "input" }] }],
} as const satisfies CommandSpec;

/** The error `f` throws (the test fails if it throws none). */
function thrown(f: () => unknown): Error {
  try {
    f();
  } catch (e) {
    return e as Error;
  }
  throw new Error("expected a throw");
}

describe("parseFlags", () => {
  it("reads --flag value and --flag=value alike, converting by type", () => {
    const { help, values } = parseFlags(DEMO, ["--name", "x", "--port=80", "--rate", "0.5", "--mode=slow", "--dry-run"]);
    expect(help).toBe(false);
    expect(values).toEqual({ name: "x", port: 80, rate: 0.5, mode: "slow", "dry-run": true });
    // Typed by the table: a number flag reads as a number, a repeatable one as a list.
    const port: number | undefined = values.port;
    expect(port).toBe(80);
  });

  it("leaves flags not given absent, keeps the last of a repeated flag and every one of a repeatable flag", () => {
    expect(parseFlags(DEMO, []).values).toEqual({});
    const { values } = parseFlags(DEMO, ["--name", "a", "--tag", "t1", "--name", "b", "--tag=t2"]);
    expect(values.name).toBe("b");
    expect(values.tag).toEqual(["t1", "t2"]);
  });

  it("takes the next argument as the value even when it starts with a dash, and keeps '=' inside a value", () => {
    expect(parseFlags(DEMO, ["--name", "--port"]).values).toEqual({ name: "--port" });
    expect(parseFlags(DEMO, ["--name=a=b"]).values).toEqual({ name: "a=b" });
    expect(parseFlags(DEMO, ["--name="]).values).toEqual({ name: "" });
    expect(thrown(() => parseFlags(DEMO, ["--port", "-1"])).message).toMatch(/^--port must be/);
  });

  it("answers -h and --help, and parses hidden flags", () => {
    expect(parseFlags(DEMO, ["-h"]).help).toBe(true);
    expect(parseFlags(DEMO, ["--name", "x", "--help"])).toEqual({ help: true, values: { name: "x" } });
    expect(parseFlags(DEMO, ["--secret"]).values).toEqual({ secret: true });
  });

  it("refuses an unknown flag with a typed error that names it and lists the valid ones (not the hidden)", () => {
    const e = thrown(() => parseFlags(DEMO, ["--name", "x", "--prot", "1"]));
    expect(e).toBeInstanceOf(UnknownFlagError);
    expect(e).toBeInstanceOf(FlagError);
    expect(e).toBeInstanceOf(UsageError);
    expect(e).toMatchObject({ name: "UnknownFlagError", flag: "--prot" });
    expect((e as UnknownFlagError).valid).toEqual([
      "--name",
      "--port",
      "--rate",
      "--wait",
      "--mode",
      "--tag",
      "--dry-run",
      "--a-rather-long-flag-name",
      "--help",
    ]);
    expect(e.message).toBe(
      'unknown option "--prot"; the options are --name, --port, --rate, --wait, --mode, --tag, --dry-run, --a-rather-long-flag-name, --help',
    );
    // A bare word and a short flag the command lacks are refused the same way.
    expect(thrown(() => parseFlags(DEMO, ["extra"]))).toMatchObject({ flag: "extra" });
    expect(thrown(() => parseFlags(DEMO, ["-x"]))).toBeInstanceOf(UnknownFlagError);
    // --name=… is looked up by its name, not the whole argument.
    expect(thrown(() => parseFlags(DEMO, ["--nam=x"]))).toMatchObject({ flag: "--nam" });
  });

  it("refuses a flag left without its value, naming it", () => {
    const e = thrown(() => parseFlags(DEMO, ["--dry-run", "--port"]));
    expect(e).toBeInstanceOf(MissingFlagValueError);
    expect(e).toMatchObject({ flag: "--port", message: "--port needs a value" });
  });

  it("refuses a value given to a boolean flag or to --help", () => {
    expect(thrown(() => parseFlags(DEMO, ["--dry-run=yes"]))).toMatchObject({
      flag: "--dry-run",
      value: "yes",
      message: '--dry-run takes no value (got "yes")',
    });
    expect(thrown(() => parseFlags(DEMO, ["--help=1"]))).toBeInstanceOf(InvalidFlagValueError);
  });

  it.each([
    [["--port", "http"], '--port must be an integer from 0 to 65535 (got "http")'],
    [["--port", "70000"], '--port must be an integer from 0 to 65535 (got "70000")'],
    [["--port", "1.5"], '--port must be an integer from 0 to 65535 (got "1.5")'],
    [["--port", ""], '--port must be an integer from 0 to 65535 (got "")'],
    [["--port", "0x10"], '--port must be an integer from 0 to 65535 (got "0x10")'],
    [["--rate", "0"], '--rate must be a number above 0 and at most 1 (got "0")'],
    [["--rate", "Infinity"], '--rate must be a number above 0 and at most 1 (got "Infinity")'],
    [["--wait=soon"], '--wait must be a number of seconds (got "soon")'],
    [["--mode", "medium"], '--mode must be fast or slow (got "medium")'],
  ])("refuses %j: %s", (argv, message) => {
    const e = thrown(() => parseFlags(DEMO, argv));
    expect(e).toBeInstanceOf(InvalidFlagValueError);
    expect(e.message).toBe(message);
    expect((e as InvalidFlagValueError).flag).toBe(argv[0]!.split("=")[0]);
  });

  it("takes decimal numbers with a sign, a fraction or an exponent", () => {
    expect(parseFlags(DEMO, ["--wait", "-2.5"]).values.wait).toBe(-2.5);
    expect(parseFlags(DEMO, ["--wait", "1e-4"]).values.wait).toBe(1e-4);
    expect(parseFlags(DEMO, ["--wait", ".5"]).values.wait).toBe(0.5);
    expect(parseFlags(DEMO, ["--port", " 8080 "]).values.port).toBe(8080);
    expect(parseFlags(DEMO, ["--port", "0"]).values.port).toBe(0);
    expect(parseFlags(DEMO, ["--rate", "1"]).values.rate).toBe(1);
  });

  it("refuses a required flag left out, unless --help is given", () => {
    const e = thrown(() => parseFlags(REQUIRED, []));
    expect(e).toBeInstanceOf(MissingFlagError);
    expect(e).toMatchObject({ flag: "--in", message: "--in FILE is required" });
    expect(parseFlags(REQUIRED, ["--help"])).toEqual({ help: true, values: {} });
    expect(parseFlags(REQUIRED, ["--in", "f"]).values).toEqual({ in: "f" });
  });
});

describe("parseNumber", () => {
  it("checks an environment variable as a flag's value is checked, naming the variable", () => {
    expect(parseNumber("DEMO_PORT", "4747", { integer: true, min: 0, max: 65535 })).toBe(4747);
    expect(thrown(() => parseNumber("DEMO_PORT", "x", { integer: true, min: 1 })).message).toBe(
      'DEMO_PORT must be an integer of at least 1 (got "x")',
    );
    expect(thrown(() => parseNumber("N", "5", { max: 4 })).message).toBe('N must be a number of at most 4 (got "5")');
  });
});

describe("formatHelp", () => {
  it("writes the usage, the flags in the table's order with their values, env and help, --help last, and the footer", () => {
    expect(formatHelp(DEMO)).toBe(
      [
        "Usage: demo [options]",
        "",
        "A command for the parser's tests.",
        "",
        "Options:",
        "  --name NAME             a name",
        "  --port PORT             a port  [DEMO_PORT]",
        "  --rate R                a rate",
        "  --wait S                a wait",
        "                          second line",
        "  --mode M                fast | slow",
        "  --tag TAG               a tag (repeatable)",
        "  --dry-run               do nothing",
        "  --a-rather-long-flag-name VALUE",
        "                          on its own line",
        "  -h, --help              this text",
        "",
        "More in the docs.",
        "",
      ].join("\n"),
    );
  });

  it("lists every flag of each agl command's table in its --help, and no hidden one", () => {
    for (const command of [STORE_COMMAND, SERVE_COMMAND, PROXY_COMMAND, TRAIN_COMMAND] as CommandSpec[]) {
      const help = formatHelp(command);
      for (const flag of validFlags(command)) expect(help, `${command.usage}: ${flag}`).toMatch(new RegExp(`^  (-h, )?${flag}\\b`, "m"));
    }
    expect(formatHelp(STORE_COMMAND)).not.toContain("--test-clock");
  });
});

describe("agl's answer to a bad command line", () => {
  /** Exit code and stderr of `agl ...argv` (none of these gets as far as starting anything). */
  async function agl(...argv: string[]): Promise<{ code: number; err: string }> {
    const err: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((m: unknown) => void err.push(String(m)));
    try {
      return { code: await runCli(argv), err: err.join("\n") };
    } finally {
      spy.mockRestore();
    }
  }

  it("exits 2 naming the flag, with the usage; train's long usage only for an unknown flag or a missing value", async () => {
    expect(await agl("store", "--prot", "1")).toEqual({
      code: 2,
      err: expect.stringMatching(/^agl store: unknown option "--prot"; the options are --host, --port, [^\n]*--help\n\nUsage: agl store/),
    });
    expect(await agl("proxy", "--config")).toEqual({
      code: 2,
      err: expect.stringMatching(/^agl proxy: --config needs a value\n\nUsage: agl proxy/),
    });
    expect(await agl("train", "--bogus")).toEqual({
      code: 2,
      err: expect.stringMatching(/^agl train: unknown option "--bogus";[^\n]*\n\nUsage: agl train/),
    });
    expect(await agl("train", "--steps")).toEqual({
      code: 2,
      err: expect.stringMatching(/^agl train: --steps needs a value\n\nUsage: agl train/),
    });
    expect(await agl("train", "--model", "m", "--agent", "a", "--data", "d", "--steps", "1.5")).toEqual({
      code: 2,
      err: 'agl train: --steps must be an integer (got "1.5")',
    });
  });
});

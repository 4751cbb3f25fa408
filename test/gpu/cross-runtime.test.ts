import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

/** Runs test/gpu/cross-runtime.ts under Node (tsx), Deno and Bun; all must train to the same weights. */
const run = promisify(execFile);
const SCRIPT = "test/gpu/cross-runtime.ts";
const RUNTIMES: Array<[string, string[]]> = [
  ["node", ["node_modules/.bin/tsx", SCRIPT]],
  ["deno", ["node_modules/.bin/deno", "run", "-A", SCRIPT]],
  ["bun", ["node_modules/.bin/bun", SCRIPT]],
];

interface Report {
  runtime: string;
  skip?: string;
  adapter?: string;
  losses?: number[];
  digest?: string;
}

const reports = new Map<string, Report>();

async function runScript(argv: string[]): Promise<Report> {
  try {
    const { stdout } = await run(argv[0], argv.slice(1), { timeout: 150_000, maxBuffer: 1 << 20 });
    return JSON.parse(stdout.trim().split("\n").pop()!) as Report;
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    // Exit code 3: the script found no adapter in that runtime and said why.
    if (err.code === 3 && err.stdout) return JSON.parse(err.stdout.trim().split("\n").pop()!) as Report;
    throw new Error(`${argv.join(" ")} failed (${err.code}): ${err.stderr ?? ""}`.slice(0, 4000));
  }
}

describe("the WebGPU trainer on every runtime", () => {
  it.for(RUNTIMES)("trains under %s", { timeout: 180_000 }, async ([name, argv], ctx) => {
    const report = await runScript(argv);
    if (report.skip !== undefined) {
      console.warn(`[cross-runtime] ${name} SKIPPED: ${report.skip}`);
      ctx.skip();
    }
    console.log(`[cross-runtime] ${name}: ${report.adapter}; losses ${report.losses?.join(", ")}; digest ${report.digest}`);
    expect(report.runtime).toBe(name);
    expect(report.losses).toHaveLength(3);
    expect(report.losses!.every(Number.isFinite)).toBe(true);
    reports.set(name, report);
  });

  it("every runtime that ran produced the same losses and bit-identical weights", (ctx) => {
    const ran = [...reports.values()];
    if (ran.length < 2) ctx.skip();
    for (const r of ran.slice(1)) {
      expect(r.losses).toEqual(ran[0].losses);
      expect(r.digest).toBe(ran[0].digest);
    }
  });
});

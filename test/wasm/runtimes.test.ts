import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const script = join(root, "test/wasm/cross-runtime.ts");
const bin = (name: string) => join(root, "node_modules/.bin", name);

const RUNTIMES: [string, string, string[]][] = [
  ["node", process.execPath, ["--import", "tsx", script]],
  ["deno", bin("deno"), ["run", "-A", script]],
  ["bun", bin("bun"), [script]],
];

interface Report {
  runtime: string;
  digest: string;
  referenceDigest: string;
  mismatches: string[];
}

describe("the same module gives identical results under Node, Deno and Bun", () => {
  const reports: Report[] = [];
  for (const [name, cmd, args] of RUNTIMES) {
    it(`${name}: loads the embedded module and matches the reference`, () => {
      const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as Report;
      expect(report.runtime).toBe(name);
      expect(report.mismatches).toEqual([]);
      reports.push(report);
    }, 90_000);
  }
  it("all three digests are equal", () => {
    expect(reports).toHaveLength(3);
    expect(new Set(reports.map((r) => r.digest)).size).toBe(1);
  });
});

import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const script = join(root, "test/model/cross-runtime.ts");
const bin = (name: string): string => join(root, "node_modules/.bin", name);

const RUNTIMES: Array<[string, string, string[]]> = [
  ["node", process.execPath, ["--import", "tsx", script]],
  ["deno", bin("deno"), ["run", "-A", script]],
  ["bun", bin("bun"), [script]],
];

type Report = Record<string, string | boolean>;

describe("the CPU model gives bit-identical results under Node, Deno and Bun", () => {
  const reports: Report[] = [];
  for (const [name, cmd, args] of RUNTIMES) {
    it(`${name}: init, training steps, checkpoint and sampling run`, () => {
      const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as Report;
      expect(report.runtime).toBe(name);
      expect(report.checkpointRoundTrip).toBe(true);
      reports.push(report);
    }, 90_000);
  }
  it("every digest is equal across the three", () => {
    expect(reports).toHaveLength(3);
    const strip = ({ runtime: _, ...rest }: Report): string => JSON.stringify(rest);
    expect(new Set(reports.map(strip)).size).toBe(1);
  });
});

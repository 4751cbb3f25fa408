/**
 * Context propagation (AsyncLocalStorage), span routing and traced `openai` calls (ESM import of the real
 * client, no loader hook) behave the same on Node, Deno and Bun.
 */
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { PROMPT_IDS, TEXT_IDS, TEXT_PIECES, TOOL_CALL } from "./openai-upstream.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const bin = (name: string) => join(root, "node_modules/.bin", name);

/** Each runtime's command line for a script of this folder. */
const runtimes = (file: string): [string, string, string[]][] => {
  const script = join(root, "test/tracer", file);
  return [
    ["node", process.execPath, ["--import", "tsx", script]],
    ["deno", bin("deno"), ["run", "-A", script]],
    ["bun", bin("bun"), [script]],
  ];
};

/** Runs the script and parses the JSON report it prints last. */
const runReport = <T>(cmd: string, args: string[]): T => {
  const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
  return JSON.parse(stdout.trim().split("\n").pop()!) as T;
};

describe("tracing across runtimes", () => {
  for (const [name, cmd, args] of runtimes("cross-runtime.ts")) {
    it(`${name}: concurrent runners' spans land in their own rollouts, in start order`, () => {
      const report = runReport<{
        runtime: string;
        rollouts: { names: string[]; consecutive: boolean; reward: unknown; status: string }[];
      }>(cmd, args);
      expect(report.runtime).toBe(name);
      expect(report.rollouts).toHaveLength(6);
      report.rollouts.forEach((r, i) => {
        const id = i + 1;
        expect(r.status).toBe("succeeded");
        expect(r.names).toEqual([
          `t${id}.2`,
          `t${id}.1`,
          `t${id}.0`,
          `t${id}.0`,
          `t${id}.1`,
          `t${id}.0`,
          `t${id}.0`,
          "agentlightning.annotation",
        ]);
        expect(r.consecutive).toBe(true);
        expect(r.reward).toBeCloseTo(id / 10);
      });
    }, 90_000);
  }
});

interface OpenAIReport {
  runtime: string;
  rollouts: {
    status: string;
    names: string[];
    triplets: { prompt: number[]; response: number[]; reward: number | null }[];
    messages: { role: string; content: unknown }[][];
  }[];
}

describe("traced openai calls across runtimes", () => {
  for (const [name, cmd, args] of runtimes("openai-cross-runtime.ts")) {
    it(`${name}: plain, streamed and tool-call answers become spans of their own attempt, with token ids, reward and messages`, () => {
      const report = runReport<OpenAIReport>(cmd, args);
      expect(report.runtime).toBe(name);
      expect(report.rollouts).toHaveLength(2);
      report.rollouts.forEach((r, i) => {
        const id = i + 1;
        expect(r.status).toBe("succeeded");
        expect(r.names).toEqual([
          "openai.chat.completion",
          "openai.chat.completion",
          "openai.chat.completion",
          "agentlightning.annotation",
        ]);
        expect(r.triplets).toEqual([
          { prompt: PROMPT_IDS, response: TEXT_IDS.flat(), reward: null },
          { prompt: PROMPT_IDS, response: TEXT_IDS.flat(), reward: null },
          { prompt: PROMPT_IDS, response: [31, 32], reward: TEXT_PIECES.join("").length / 100 + id },
        ]);
        const user = { role: "user", content: `task ${id}` };
        expect(r.messages.slice(0, 2)).toEqual([
          [user, { role: "assistant", content: TEXT_PIECES.join("") }],
          [user, { role: "assistant", content: TEXT_PIECES.join("") }],
        ]);
        expect(r.messages[2]).toEqual([
          user,
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: TOOL_CALL.id, type: "function", function: { name: TOOL_CALL.name, arguments: TOOL_CALL.arguments } }],
          },
        ]);
      });
    }, 90_000);
  }
});

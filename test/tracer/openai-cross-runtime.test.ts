/** traceOpenAI behaves the same on Node, Deno and Bun (ESM import of the real `openai` client, no loader hook). */
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { PROMPT_IDS, TEXT_IDS, TEXT_PIECES, TOOL_CALL } from "./openai-upstream.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const script = join(root, "test/tracer/openai-cross-runtime.ts");
const bin = (name: string) => join(root, "node_modules/.bin", name);

const RUNTIMES: [string, string, string[]][] = [
  ["node", process.execPath, ["--import", "tsx", script]],
  ["deno", bin("deno"), ["run", "-A", script]],
  ["bun", bin("bun"), [script]],
];

interface Report {
  runtime: string;
  rollouts: {
    status: string;
    names: string[];
    triplets: { prompt: number[]; response: number[]; reward: number | null }[];
    messages: { role: string; content: unknown }[][];
  }[];
}

describe("traced openai calls across runtimes", () => {
  for (const [name, cmd, args] of RUNTIMES) {
    it(`${name}: plain, streamed and tool-call answers become spans of their own attempt, with token ids, reward and messages`, () => {
      const stdout = execFileSync(cmd, args, { cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
      const report = JSON.parse(stdout.trim().split("\n").pop()!) as Report;
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

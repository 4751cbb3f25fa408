/**
 * Context propagation (AsyncLocalStorage), span routing and traced `openai` calls (ESM import of the real
 * client, no loader hook) behave the same on Node, Deno and Bun.
 */
import { describe, expect, it } from "vitest";
import { RUNTIMES, runReport } from "../runtimes.ts";
import { expectTracedRollouts, type TracedRollout } from "./traced-runners.ts";
import { PROMPT_IDS, TEXT_IDS, TEXT_PIECES, TOOL_CALL } from "./openai-upstream.ts";

describe("tracing across runtimes", () => {
  for (const runtime of RUNTIMES) {
    it(`${runtime}: concurrent runners' spans land in their own rollouts, in start order`, async () => {
      const report = await runReport<{ runtime: string; rollouts: TracedRollout[] }>(runtime, "test/tracer/cross-runtime.ts", {
        timeout: 60_000,
      });
      expect(report.runtime).toBe(runtime);
      expectTracedRollouts(expect, report.rollouts);
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
  for (const runtime of RUNTIMES) {
    it(`${runtime}: plain, streamed and tool-call answers become spans of their own attempt, with token ids, reward and messages`, async () => {
      const report = await runReport<OpenAIReport>(runtime, "test/tracer/openai-cross-runtime.ts", { timeout: 60_000 });
      expect(report.runtime).toBe(runtime);
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

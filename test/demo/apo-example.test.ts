/**
 * examples/apo: without an endpoint the script says what to set and exits 2; against a scripted
 * OpenAI-compatible server (agent model, critic and editor, all over HTTP through the real `openai`
 * client) APO finds the prompt that makes the replies match exactly.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { seedPrompt } from "../../examples/apo/agent.ts";
import { TICKETS } from "../../examples/apo/tickets.ts";
import { trainApo } from "../../examples/apo/train.ts";
import type { ChatCompletionBody } from "../../src/algorithm/index.ts";
import { serveScriptedChat, tagged } from "../algorithm/apo-fixtures.ts";
import { launchCommand } from "../runtimes.ts";

const run = promisify(execFile);
const RULE = "Answer with exactly one word: billing, technical, account or shipping.";

/** The agent model names the team in a sentence unless the prompt asks for one word; the critic and editor supply that rule. */
function scriptedModels(body: ChatCompletionBody): unknown {
  const text = body.messages.map((m) => m.content).join("\n");
  let content: string;
  if (body.model === "router") {
    const ticket = TICKETS.find((t) => text.includes(t.text))!;
    content = text.includes("exactly one word") ? `${ticket.team[0]!.toUpperCase()}${ticket.team.slice(1)}.` : `The ${ticket.team} team.`;
  } else if (body.model === "critic") {
    content = tagged("prompt_template", text)!.includes("exactly one word") ? "- Fine as it is." : "- Ask for exactly one word.";
  } else content = `${tagged("prompt_template", text)}\n${RULE}`;
  return {
    id: "x",
    object: "chat.completion",
    created: 0,
    model: body.model,
    choices: [{ index: 0, message: { role: "assistant", content } }],
  };
}

describe("examples/apo", () => {
  it("without an endpoint, says what to set and exits 2", async () => {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("OPENAI_")));
    const err = await run(...launchCommand("node", "examples/apo/train.ts"), { env }).catch((e: unknown) => e);
    expect((err as { code: number }).code).toBe(2);
    const stderr = (err as { stderr: string }).stderr;
    expect(stderr).toMatch(/needs an OpenAI-compatible endpoint/);
    for (const name of ["OPENAI_BASE_URL", "OPENAI_API_KEY", "APO_AGENT_MODEL", "APO_GRADIENT_MODEL", "APO_EDIT_MODEL"])
      expect(stderr).toContain(name);
  });

  it("tunes the prompt against an OpenAI-compatible server until the replies match", async () => {
    const server = await serveScriptedChat(scriptedModels);
    try {
      const r = await trainApo({
        baseURL: server.url,
        apiKey: "test",
        agentModel: "router",
        nRunners: 2,
        apo: { gradientModel: "critic", applyEditModel: "editor", beamRounds: 1, pollInterval: 0.02 },
      });
      expect(r.seedScore).toBe(0);
      expect(r.bestScore).toBe(1);
      expect(r.best.template).toBe(`${seedPrompt.template}\n${RULE}`);
      expect(r.resourcesId).not.toBeNull();
    } finally {
      await server.close();
    }
  });
});

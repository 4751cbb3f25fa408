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
  const ticket = TICKETS.find((t) => text.includes(t.text));
  if (text === "Reply with OK.")
    content = "OK"; // the script's check of each model before the run
  else if (body.model === "router" && ticket) {
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

  /** The script as a process against `respond`, with the three models named by their variables. */
  async function runScript(respond: (body: ChatCompletionBody) => unknown) {
    const server = await serveScriptedChat(respond);
    try {
      const env = { ...process.env, NO_COLOR: "1", OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "test" };
      Object.assign(env, { APO_AGENT_MODEL: "router", APO_GRADIENT_MODEL: "critic", APO_EDIT_MODEL: "editor" });
      const r = await run(...launchCommand("node", "examples/apo/train.ts"), { env }).catch(
        (e: { code: number; stdout: string; stderr: string }) => e,
      );
      return { code: (r as { code?: number }).code ?? 0, lines: `${r.stdout}${r.stderr}`.trim().split("\n") };
    } finally {
      await server.close();
    }
  }
  const refuse = (status: number, message: string, code: string) =>
    new Response(JSON.stringify({ error: { message, type: "invalid_request_error", param: null, code } }), {
      status,
      headers: { "content-type": "application/json" },
    });

  it("stops at a model the endpoint does not serve, in one line naming its variable", async () => {
    const r = await runScript((body) =>
      body.model === "critic" ? refuse(404, "The model 'critic' does not exist", "model_not_found") : scriptedModels(body),
    );
    expect(r.code).toBe(1);
    expect(r.lines).toHaveLength(1);
    expect(r.lines[0]).toMatch(
      /^examples\/apo: APO_GRADIENT_MODEL=critic at http:\/\/127\.0\.0\.1:\d+\/v1: 404 The model 'critic' does not exist/,
    );
  }, 60_000);

  it("stops at the first prompt beyond a model's context, without a stack", async () => {
    const r = await runScript((body) => {
      const long = body.messages.map((m) => m.content).join("").length > 1000;
      return body.model === "critic" && long
        ? refuse(400, "This model's maximum context length is 256 tokens", "context_length_exceeded")
        : scriptedModels(body);
    });
    expect(r.code).toBe(1);
    expect(r.lines.filter((l) => /^\s+at /.test(l))).toEqual([]);
    expect(r.lines.length).toBeLessThanOrEqual(2);
    expect(r.lines.at(-1)).toMatch(
      /^examples\/apo: APO: the critique call to model 'critic' failed: 400 This model's maximum context length is 256 tokens/,
    );
  }, 60_000);

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

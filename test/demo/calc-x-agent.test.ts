/**
 * The Calc-X agent loop (examples/calc-x/agent.ts) against a scripted OpenAI-compatible model: a tool
 * call, its result sent back as a tool message, the answer; a wrong answer; malformed calls answered
 * with tool errors while the rollout goes on; the turn limit; a model that never answers; a hung tool;
 * over stdio: the real calculator server, one killed mid-rollout, and the respawn after it; and through
 * the real policy server, whose chat template renders the tools, the calls and their results.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import calcXAgent, {
  calculatorServer,
  MAX_TOKENS_PER_TURN,
  MAX_TURNS,
  reward,
  runCalcX,
  SYSTEM_PROMPT,
} from "../../examples/calc-x/agent.ts";
import { createCalculatorServer } from "../../examples/calc-x/calculator.ts";
import { InProcessToolServer, McpServerError, StdioToolServer } from "../../examples/calc-x/mcp.ts";
import { TOOLS } from "../../examples/calc-x/conversations.ts";
import type { CalcXTask } from "../../examples/calc-x/types.ts";
import { createHfTokenizer } from "../../src/model/hf/index.ts";
import type { Generation, GenerationRequest } from "../../src/model/generation.ts";
import { type Policy, PolicyServer } from "../../src/proxy/index.ts";
import type { LLM } from "../../src/types/index.ts";
import { lenmlTokenizerFiles } from "../model/hf/qwen-files.ts";
import { chatAnswer, type ScriptedUpstream, startScriptedUpstream } from "../proxy/scripted-upstream.ts";

const TWO_CALLS: CalcXTask = {
  id: "t-two",
  question: "23 boxes of 148 pens, 517 sold. How many left?",
  answer: "2887",
  calls: 2,
  expressions: ["23*148", "3404-517"],
};
const ONE_CALL: CalcXTask = {
  id: "t-one",
  question: "Tom has 37 bags of 219 coins. Total?",
  answer: "8103",
  calls: 1,
  expressions: ["37*219"],
};

let callIds = 0;
/** A reply with these tool calls (arguments given as the raw string the model produced). */
const toolCallReply = (...calls: [name: string, args: string][]) =>
  chatAnswer("", {
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: null,
          tool_calls: calls.map(([name, args]) => ({ id: `call_${++callIds}`, type: "function", function: { name, arguments: args } })),
        },
        finish_reason: "tool_calls",
      },
    ],
  });
const calc = (expression: string) => toolCallReply(["calculator", JSON.stringify({ expression })]);
const json = (body: unknown) => ({ kind: "json" as const, body });

let upstream: ScriptedUpstream;
let llm: LLM;
const inProcess = new InProcessToolServer("calculator", createCalculatorServer);

beforeAll(async () => {
  upstream = await startScriptedUpstream();
  llm = { resource_type: "llm", endpoint: upstream.url, model: "scripted", api_key: null, sampling_parameters: { temperature: 0.7 } };
});
afterEach(() => {
  upstream.script.length = 0;
  upstream.received.length = 0;
  upstream.onRequest = undefined;
});
afterAll(async () => {
  await calculatorServer.close();
  await upstream.stop();
});

type Message = { role: string; content?: unknown; tool_call_id?: string; tool_calls?: { id: string }[] };
const messagesOf = (i: number) => upstream.received[i].body.messages as Message[];

describe("the Calc-X agent against a scripted model (in-process calculator)", () => {
  it("tool call -> result -> tool call -> result -> answer: reward 1, each result reached the model as a tool message", async () => {
    upstream.script.push(json(calc("23*148")), json(calc("3404-517")), json(chatAnswer("### ANSWER: 2887 ###")));
    const r = await runCalcX(TWO_CALLS, llm, { tools: inProcess });
    expect(r).toMatchObject({ reward: 1, turns: 3, toolCalls: 2, parsedToolCalls: 2 });
    expect(upstream.received).toHaveLength(3);

    const first = upstream.received[0].body;
    expect(first.messages).toEqual([
      { role: "system", content: SYSTEM_PROMPT },
      { role: "user", content: TWO_CALLS.question },
    ]);
    // the tools exactly as the policy was fine-tuned on them, key order included (the template renders them as JSON)
    expect(JSON.stringify(first.tools)).toBe(JSON.stringify(TOOLS));
    expect(first).toMatchObject({ model: "scripted", max_tokens: MAX_TOKENS_PER_TURN, temperature: 0.7 });

    // turn 2 sees turn 1's call and its result; turn 3 sees both
    const second = messagesOf(1);
    expect(second).toHaveLength(4);
    expect(second[2]).toMatchObject({
      role: "assistant",
      tool_calls: [{ function: { name: "calculator", arguments: '{"expression":"23*148"}' } }],
    });
    expect(second[3]).toEqual({ role: "tool", tool_call_id: second[2].tool_calls![0].id, content: "3404" });
    const third = messagesOf(2);
    expect(third.slice(0, 4)).toEqual(second);
    expect(third[5]).toEqual({ role: "tool", tool_call_id: third[4].tool_calls![0].id, content: "2887" });
    // the transcript ends with the answer
    expect(r.transcript.at(-1)).toEqual({ role: "assistant", content: "### ANSWER: 2887 ###" });
    expect(r.transcript).toHaveLength(7);
  });

  it("a wrong number, no answer marker, or an answer without any tool call: reward as the answer says", async () => {
    upstream.script.push(json(calc("37*219")), json(chatAnswer("### ANSWER: 8104 ###")));
    expect(await runCalcX(ONE_CALL, llm, { tools: inProcess })).toMatchObject({ reward: 0, turns: 2, toolCalls: 1 });
    upstream.script.push(json(chatAnswer("The answer is 8103.")));
    expect(await runCalcX(ONE_CALL, llm, { tools: inProcess })).toMatchObject({ reward: 0, turns: 1, toolCalls: 0 });
    upstream.script.push(json(chatAnswer("### ANSWER: 8103 ###")));
    expect(await runCalcX(ONE_CALL, llm, { tools: inProcess })).toMatchObject({ reward: 1, turns: 1, toolCalls: 0 });
  });

  it("the reward compares exact numbers, not strings", () => {
    expect(reward(ONE_CALL, "### ANSWER: 8103.0 ###")).toBe(1);
    expect(reward(ONE_CALL, "so ### ANSWER: 8103 ### done")).toBe(1);
    expect(reward(ONE_CALL, "### ANSWER: 8103.5 ###")).toBe(0);
    expect(reward(ONE_CALL, "### ANSWER: 8.1.03 ###")).toBe(0);
    expect(reward(ONE_CALL, "### ANSWER: -8103 ###")).toBe(0);
    expect(reward({ ...ONE_CALL, answer: "-12" }, "### ANSWER: -12 ###")).toBe(1);
  });

  it("malformed calls (bad JSON, not an object, missing or mistyped expression, unknown tool) reach the model as tool errors; the rollout goes on", async () => {
    upstream.script.push(
      json(
        toolCallReply(
          ["calculator", '{"expression": "37*219"'],
          ["calculator", '["37*219"]'],
          ["calculator", '{"expr": "37*219"}'],
          ["calculator", '{"expression": 37}'],
          ["python", '{"code": "37*219"}'],
          ["calculator", '{"expression": "37*"}'],
        ),
      ),
      json(calc("37*219")),
      json(chatAnswer("### ANSWER: 8103 ###")),
    );
    const r = await runCalcX(ONE_CALL, llm, { tools: inProcess });
    expect(r).toMatchObject({ reward: 1, turns: 3, toolCalls: 7, parsedToolCalls: 2 });
    const tool = messagesOf(1).filter((m) => m.role === "tool");
    const ids = (messagesOf(1)[2].tool_calls ?? []).map((c) => c.id);
    expect(tool.map((m) => m.tool_call_id)).toEqual(ids);
    expect(tool.map((m) => m.content)).toEqual([
      "error: arguments are not JSON",
      "error: Invalid input: expected object, received array",
      "error: expression: Invalid input: expected string, received undefined",
      "error: expression: Invalid input: expected string, received number",
      "error: unknown tool 'python'",
      "error: unexpected end of expression", // well formed, so the server answered: its own tool error
    ]);
    expect(messagesOf(2).at(-1)).toMatchObject({ role: "tool", content: "8103" });
  });

  it(`stops at the turn limit: exactly MAX_TURNS (${MAX_TURNS}) model calls, reward 0, the last turn's calls not run`, async () => {
    const always = startScriptedUpstream({ kind: "json", body: calc("1+1") });
    const up = await always;
    try {
      const r = await runCalcX(ONE_CALL, { ...llm, endpoint: up.url }, { tools: inProcess });
      expect(r).toMatchObject({ reward: 0, turns: MAX_TURNS, toolCalls: MAX_TURNS - 1, parsedToolCalls: MAX_TURNS - 1 });
      expect(up.received).toHaveLength(MAX_TURNS);
      expect(r.transcript.at(-1)).toMatchObject({ role: "assistant", tool_calls: [{ function: { name: "calculator" } }] });
      const r2 = await runCalcX(ONE_CALL, { ...llm, endpoint: up.url }, { tools: inProcess, maxTurns: 2 });
      expect(r2.turns).toBe(2);
      expect(up.received).toHaveLength(MAX_TURNS + 2);
    } finally {
      await up.stop();
    }
  });

  it("a conversation that outgrows the model's context ends there unanswered (reward 0), without failing the rollout", async () => {
    upstream.script.push(json(calc("37*219")), {
      kind: "json",
      status: 400,
      body: {
        error: {
          message: "maximum context length is 256 tokens",
          type: "invalid_request_error",
          param: null,
          code: "context_length_exceeded",
        },
      },
    });
    const r = await runCalcX(ONE_CALL, llm, { tools: inProcess });
    expect(r).toMatchObject({ reward: 0, turns: 1, toolCalls: 1, parsedToolCalls: 1, contextFull: true });
    expect(upstream.received).toHaveLength(2);
    expect(r.transcript.at(-1)).toMatchObject({ role: "tool", content: "8103" });
    // any other refusal still fails the rollout
    upstream.script.push({
      kind: "json",
      status: 400,
      body: { error: { message: "bad", type: "invalid_request_error", param: null, code: null } },
    });
    await expect(runCalcX(ONE_CALL, llm, { tools: inProcess })).rejects.toThrow(/400 bad/);
  });

  it("a model that never answers: the model-call timeout fails the rollout", async () => {
    upstream.script.push({ kind: "stall" });
    const started = performance.now();
    await expect(runCalcX(ONE_CALL, llm, { tools: inProcess, modelTimeoutMs: 300 })).rejects.toThrow(/timed out/i);
    expect(performance.now() - started).toBeLessThan(5000);
    expect(upstream.received).toHaveLength(1);
  });

  it("a tool that never answers: the tool-call timeout fails the rollout with an error naming the server", async () => {
    const hung = new InProcessToolServer("slow-calculator", () => {
      const server = new McpServer({ name: "slow", version: "1.0.0" });
      server.registerTool("calculator", { inputSchema: { expression: z.string() } }, () => new Promise(() => undefined));
      return server;
    });
    upstream.script.push(json(calc("1+1")));
    const err = await runCalcX(ONE_CALL, llm, { tools: hung, toolTimeoutMs: 200 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpServerError);
    expect((err as McpServerError).server).toBe("slow-calculator");
    expect((err as Error).message).toMatch(/^MCP server "slow-calculator" failed: tool 'calculator': .*timed out/i);
  });
});

describe("the Calc-X agent over stdio (the real calculator server process)", () => {
  it("the default agent spawns the calculator over stdio and solves a two-call task", async () => {
    upstream.script.push(json(calc("23*148")), json(calc("3404-517")), json(chatAnswer("### ANSWER: 2887 ###")));
    expect(await calcXAgent(TWO_CALLS, llm)).toBe(1);
    expect(
      messagesOf(2)
        .filter((m) => m.role === "tool")
        .map((m) => m.content),
    ).toEqual(["3404", "2887"]);
    // one child serves the next rollout too
    const [pid] = calculatorServer.pids.values();
    upstream.script.push(json(calc("37*219")), json(chatAnswer("### ANSWER: 8103 ###")));
    expect((await runCalcX(ONE_CALL, llm)).reward).toBe(1);
    expect([...calculatorServer.pids.values()]).toEqual([pid]);
  });

  it("the server killed mid-rollout: the rollout fails naming the server, and the next rollout gets a fresh server", async () => {
    const server = new StdioToolServer("calculator", calculatorServer.params);
    try {
      // The first model call kills the server; the model then asks for the calculator.
      upstream.onRequest = async () => {
        upstream.onRequest = undefined;
        const [pid] = server.pids.values();
        process.kill(pid, "SIGKILL");
        while (server.pids.size > 0) await new Promise((r) => setTimeout(r, 10)); // the transport saw it close
      };
      upstream.script.push(json(calc("37*219")));
      const started = performance.now();
      const err = await runCalcX(ONE_CALL, llm, { tools: server }).catch((e: unknown) => e);
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(err).toBeInstanceOf(McpServerError);
      expect((err as Error).message).toMatch(/^MCP server "calculator" failed: tool 'calculator': /);

      upstream.script.push(json(calc("37*219")), json(chatAnswer("### ANSWER: 8103 ###")));
      expect((await runCalcX(ONE_CALL, llm, { tools: server })).reward).toBe(1);
      expect(server.pids.size).toBe(1);
    } finally {
      await server.close();
    }
    expect(server.pids.size).toBe(0);
  });

  it("a server that cannot start fails the rollout with an error naming it and its command", async () => {
    const missing = new StdioToolServer("calculator", {
      command: process.execPath,
      args: ["/nonexistent/calculator-server.js"],
      stderr: "ignore",
    });
    await expect(runCalcX(ONE_CALL, llm, { tools: missing })).rejects.toThrow(
      /^MCP server "calculator" failed: could not start .*nonexistent\/calculator-server\.js/,
    );
    expect(upstream.received).toHaveLength(0);
  });
});

describe("the Calc-X agent through the policy server (a scripted policy with Qwen2.5's hermes chat template)", () => {
  it("the server parses the model's <tool_call> into tool_calls and renders the tool result into the next prompt", async () => {
    const tokenizer = createHfTokenizer(lenmlTokenizerFiles("qwen2_5"));
    const replies = [
      '<tool_call>\n{"name": "calculator", "arguments": {"expression": "23*148"}}\n</tool_call>',
      '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3404-517"}}\n</tool_call>',
      "### ANSWER: 2887 ###",
    ];
    const prompts: string[] = [];
    const policy: Policy = {
      model: "scripted-qwen",
      version: 0,
      maxSeqLen: 4096,
      tokenizer,
      nextSeed: () => 0,
      async generate(requests: readonly GenerationRequest[]): Promise<Generation[]> {
        return requests.map((r) => {
          prompts.push(tokenizer.decode(r.prompt, { skipSpecialTokens: false }));
          const text = replies.shift() ?? "no script left";
          const tokenIds = [...tokenizer.encode(text), ...tokenizer.eosTokenIds];
          return { text, tokenIds, logprobs: tokenIds.map(() => 0), finishReason: "stop" };
        });
      },
    };
    const server = new PolicyServer({ policy });
    await server.start();
    try {
      const r = await runCalcX(TWO_CALLS, server.asResource() as LLM, { tools: inProcess });
      expect(r).toMatchObject({ reward: 1, turns: 3, toolCalls: 2, parsedToolCalls: 2 });
      expect(prompts).toHaveLength(3);
      expect(prompts[0]).toContain('"name": "calculator"');
      expect(prompts[0]).toContain(SYSTEM_PROMPT);
      expect(prompts[1]).toContain(
        '<|im_start|>assistant\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "23*148"}}\n</tool_call><|im_end|>',
      );
      expect(prompts[1]).toContain("<|im_start|>user\n<tool_response>\n3404\n</tool_response><|im_end|>");
      expect(prompts[2]).toContain("<tool_response>\n2887\n</tool_response>");
      // each turn's prompt extends the one before
      expect(prompts[1].startsWith(prompts[0])).toBe(true);
      expect(prompts[2].startsWith(prompts[1])).toBe(true);
    } finally {
      await server.stop();
    }
  });
});

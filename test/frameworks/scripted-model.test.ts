/**
 * The Calc-X agent written in each framework (examples/frameworks/) against a scripted OpenAI-compatible
 * model, streamed and not: the requests it sends (the system prompt and question, the tools exactly as
 * the policy was fine-tuned on them, the sampling settings, each tool result sent back under its call's
 * id), the reward, the turn limit, a context that fills up, a malformed call, a hung tool server; that
 * every request goes to the endpoint and nowhere else; and what the frameworks' own tracing leaves in a
 * rollout (the AI SDK's OpenTelemetry spans, which no adapter counts as model calls).
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { getGlobalTraceProvider, setTracingDisabled } from "@openai/agents";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { MAX_TOKENS_PER_TURN, MAX_TURNS, SYSTEM_PROMPT } from "../../examples/frameworks/calc-x-task.ts";
import { createCalculatorServer } from "../../examples/calc-x/calculator.ts";
import { InProcessToolServer, McpServerError } from "../../examples/calc-x/mcp.ts";
import type { CalcXTask } from "../../examples/calc-x/types.ts";
import { LlmProxyTraceToTriplet, TraceTripletAdapter } from "../../src/adapter/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { OtelTracer } from "../../src/tracer/index.ts";
import type { LLM } from "../../src/types/index.ts";
import { type ScriptedUpstream, startScriptedUpstream } from "../proxy/scripted-upstream.ts";
import { answer, CONTEXT_FULL_STEP, calc, FRAMEWORKS, step, toolCallReply } from "./frameworks.ts";

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

let upstream: ScriptedUpstream;
let llm: LLM;
const tools = new InProcessToolServer("calculator", createCalculatorServer);

beforeAll(async () => {
  upstream = await startScriptedUpstream();
  llm = { resource_type: "llm", endpoint: upstream.url, model: "scripted", api_key: null, sampling_parameters: { temperature: 0.7 } };
});
afterEach(() => {
  upstream.script.length = 0;
  upstream.received.length = 0;
});
afterAll(() => upstream.stop());

type Message = {
  role: string;
  content?: unknown;
  tool_call_id?: string;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
};
const messagesOf = (i: number) => upstream.received[i]!.body.messages as Message[];

describe.each(FRAMEWORKS)("$name", (fw) => {
  describe.each([false, true])("stream: %s", (stream) => {
    it("tool call -> result -> tool call -> result -> answer: reward 1, the requests as the policy was fine-tuned on them", async () => {
      upstream.script.push(...[calc("23*148"), calc("3404-517"), answer("### ANSWER: 2887 ###")].map((r) => step(r, stream)));
      const r = await fw.run(TWO_CALLS, llm, { tools, stream });
      expect(r).toEqual({ reward: 1, reply: "### ANSWER: 2887 ###", contextFull: false });
      expect(upstream.received).toHaveLength(3);
      for (const { body } of upstream.received) {
        expect(body).toMatchObject({ model: "scripted", max_tokens: MAX_TOKENS_PER_TURN, temperature: 0.7 });
        expect(body.stream ?? false).toBe(stream);
        // key order included: the chat template renders the tools as JSON text
        expect(JSON.stringify(body.tools)).toBe(fw.tools);
      }
      expect(messagesOf(0)).toEqual([
        { role: "system", content: SYSTEM_PROMPT },
        { role: "user", content: TWO_CALLS.question },
      ]);
      // each call's result goes back under the call's id; each request extends the one before
      const second = messagesOf(1);
      expect(second).toHaveLength(4);
      expect(second[2]).toMatchObject({ role: "assistant", tool_calls: [{ type: "function", function: { name: "calculator" } }] });
      expect(JSON.parse(second[2]!.tool_calls![0]!.function.arguments)).toEqual({ expression: "23*148" });
      expect(second[3]).toMatchObject({ role: "tool", tool_call_id: second[2]!.tool_calls![0]!.id, content: "3404" });
      const third = messagesOf(2);
      expect(third.slice(0, 4)).toEqual(second);
      expect(third[5]).toMatchObject({ role: "tool", tool_call_id: third[4]!.tool_calls![0]!.id, content: "2887" });
    });

    it("the reward reads the last reply: a wrong number 0, an answer without a tool call 1", async () => {
      upstream.script.push(step(calc("37*219"), stream), step(answer("### ANSWER: 8104 ###"), stream));
      expect(await fw.run(ONE_CALL, llm, { tools, stream })).toMatchObject({ reward: 0, reply: "### ANSWER: 8104 ###" });
      upstream.script.push(step(answer("### ANSWER: 8103 ###"), stream));
      expect(await fw.run(ONE_CALL, llm, { tools, stream })).toMatchObject({ reward: 1 });
      expect(upstream.received).toHaveLength(3);
    });
  });

  it(`stops after MAX_TURNS (${MAX_TURNS}) model calls with reward 0, the last turn's tool calls not run`, async () => {
    const always = await startScriptedUpstream();
    // a fresh reply each time: ids repeat in no real server's answers, and LangGraph merges messages by id
    always.onRequest = () => void always.script.push(step(calc("1+1"), false));
    try {
      const r = await fw.run(ONE_CALL, { ...llm, endpoint: always.url }, { tools });
      expect(r).toMatchObject({ reward: 0, contextFull: false });
      expect(always.received).toHaveLength(MAX_TURNS);
      // the last request carries the results of all calls but the last one's
      const sent = always.received.at(-1)!.body.messages as Message[];
      expect(sent.filter((m) => m.role === "tool")).toHaveLength(MAX_TURNS - 1);
      await fw.run(ONE_CALL, { ...llm, endpoint: always.url }, { tools, maxTurns: 2 });
      expect(always.received).toHaveLength(MAX_TURNS + 2);
    } finally {
      await always.stop();
    }
  });

  it("a conversation that outgrows the model's context ends there with reward 0; another refusal fails the rollout", async () => {
    upstream.script.push(step(calc("37*219"), false), CONTEXT_FULL_STEP);
    expect(await fw.run(ONE_CALL, llm, { tools })).toEqual({ reward: 0, reply: "", contextFull: true });
    expect(upstream.received).toHaveLength(2);
    upstream.script.push(step(calc("37*219"), true), CONTEXT_FULL_STEP);
    expect(await fw.run(ONE_CALL, llm, { tools, stream: true })).toMatchObject({ contextFull: true });
    upstream.script.push({
      kind: "json",
      status: 400,
      body: { error: { message: "bad", type: "invalid_request_error", param: null, code: null } },
    });
    await expect(fw.run(ONE_CALL, llm, { tools })).rejects.toThrow(/bad/);
  });

  it(`a call whose arguments are not JSON: ${fw.malformedCall === "ends" ? "the rollout ends unanswered" : "an error goes back to the model, which goes on"}`, async () => {
    upstream.script.push(
      step(toolCallReply('{"expression": "37*219"'), false),
      step(calc("37*219"), false),
      step(answer("### ANSWER: 8103 ###"), false),
    );
    const r = await fw.run(ONE_CALL, llm, { tools });
    if (fw.malformedCall === "ends") {
      expect(r).toMatchObject({ reward: 0, reply: "" });
      expect(upstream.received).toHaveLength(1);
      return;
    }
    expect(r).toMatchObject({ reward: 1 });
    expect(upstream.received).toHaveLength(3);
    const result = messagesOf(1)[3]!;
    expect(result.role).toBe("tool");
    expect(String(result.content)).toMatch(/JSON/);
  });

  it("a tool server that hangs fails the rollout with an error naming it, though the framework sent the error to the model", async () => {
    const hung = new InProcessToolServer("slow-calculator", () => {
      const server = new McpServer({ name: "slow", version: "1.0.0" });
      server.registerTool(
        "calculator",
        { description: "Evaluate an arithmetic expression exactly.", inputSchema: { expression: z.string() } },
        () => new Promise(() => undefined),
      );
      return server;
    });
    upstream.script.push(step(calc("1+1"), false), step(answer("### ANSWER: 2 ###"), false));
    const err = await fw.run(ONE_CALL, llm, { tools: hung, toolTimeoutMs: 200 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpServerError);
    expect((err as Error).message).toMatch(/^MCP server "slow-calculator" failed: tool 'calculator': .*timed out/i);
  });

  it("sends every request to the endpoint and nowhere else (no tracing exporter, no tokenizer download)", async () => {
    const fetch = globalThis.fetch;
    const urls: string[] = [];
    globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
      urls.push(input instanceof Request ? input.url : String(input));
      return fetch(input, init);
    }) as typeof fetch;
    // as outside a test run (the Agents SDK traces nothing when NODE_ENV is "test"), with a key its default
    // exporter would send traces to the OpenAI platform with
    const env = { NODE_ENV: process.env.NODE_ENV, OPENAI_API_KEY: process.env.OPENAI_API_KEY };
    process.env.NODE_ENV = "production";
    process.env.OPENAI_API_KEY = "sk-test-not-a-key";
    setTracingDisabled(false);
    try {
      for (const stream of [false, true]) {
        upstream.script.push(step(calc("37*219"), stream), step(answer("### ANSWER: 8103 ###"), stream));
        expect((await fw.run(ONE_CALL, llm, { tools, stream })).reward).toBe(1);
      }
      await getGlobalTraceProvider().forceFlush();
    } finally {
      globalThis.fetch = fetch;
      setTracingDisabled(true);
      for (const [k, v] of Object.entries(env)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    expect(upstream.received).toHaveLength(4);
    expect(urls.length).toBeGreaterThanOrEqual(4);
    for (const url of urls) expect(url.startsWith(upstream.url), url).toBe(true);
  });
});

describe("the AI SDK's own OpenTelemetry spans in a rollout", () => {
  it("reach the attempt (a generateText span, one doGenerate per model call, one toolCall per tool call), and no adapter counts them as model calls", async () => {
    const aiSdk = FRAMEWORKS[0]!;
    const store = new InMemoryLightningStore();
    const tracer = new OtelTracer();
    tracer.initWorker(0, store);
    const rollout = await store.startRollout(null);
    upstream.script.push(step(calc("23*148"), false), step(calc("3404-517"), false), step(answer("### ANSWER: 2887 ###"), false));
    await tracer.traceContext({ rolloutId: rollout.rollout_id, attemptId: rollout.attempt.attempt_id }, async () => {
      expect((await aiSdk.run(TWO_CALLS, llm, { tools })).reward).toBe(1);
    });
    const spans = (await store.querySpans(rollout.rollout_id)).items;
    const count = (name: string) => spans.filter((s) => s.name === name).length;
    expect(count("ai.generateText")).toBe(1);
    expect(count("ai.generateText.doGenerate")).toBe(3);
    expect(count("ai.toolCall")).toBe(2);
    // each carries its call's response id, as the policy server's span of the same call does
    const ids = spans.filter((s) => s.name === "ai.generateText.doGenerate").map((s) => s.attributes["gen_ai.response.id"]);
    expect(new Set(ids).size).toBe(3);
    // the model calls' records come from the policy server (with token ids); these spans are the agent's steps
    expect(new LlmProxyTraceToTriplet().adapt(spans)).toEqual([]);
    expect(new TraceTripletAdapter().adapt(spans)).toEqual([]);
  });
});

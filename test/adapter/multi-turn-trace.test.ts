/**
 * A real multi-turn, tool-calling trace turned into training rows: the policy server (Qwen2.5's real
 * tokenizer and hermes chat template, a tiny random Qwen2 model) answers an agent written with the
 * `openai` client that calls a calculator tool and sends the results back; the calls land in the store;
 * LlmProxyTraceToTriplet makes one triplet per model call and the batch builder one row per call
 * (transition) or one row per rollout (trajectory), whose loss mask is checked token by token against
 * the chat template's own rendering of the conversation. The trajectory row then goes through the CPU
 * trainer's PPO step (full and LoRA): tokens outside the mask change nothing.
 *
 * A random model never writes a tool call by itself, so the tool-calling replies come from a scripted
 * engine (token ids of the call as the tokenizer encodes it, then <|im_end|>, as a trained model would
 * emit them); the final answer is the real model's own free generation.
 */
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildTrainingBatch, LlmProxyTraceToTriplet, type FinishedRollout, type TrainingBatch } from "../../src/adapter/index.ts";
import { selectRows } from "../../src/algorithm/grpo.ts";
import { grpoUpdate } from "../../src/algorithm/grpo-step.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { CpuTrainer } from "../../src/cpu/index.ts";
import { parseModelConfig } from "../../src/model/config.ts";
import { finishGeneration, type GenerationEngine } from "../../src/model/generation.ts";
import { createHfTokenizer } from "../../src/model/hf/index.ts";
import { initParams } from "../../src/model/init.ts";
import { PAD_ID } from "../../src/model/tokenizer.ts";
import type { TemplateMessage, ToolDefinition } from "../../src/model/tokenizer-api.ts";
import type { PolicyTrainer, TokenBatch } from "../../src/model/train-types.ts";
import { ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { spanFromAttributes } from "../../src/types/span.ts";
import { lenmlTokenizerFiles } from "../model/hf/qwen-files.ts";

const IM_END = 151645;
const tok = createHfTokenizer({ ...lenmlTokenizerFiles("qwen2_5"), eosTokenIds: [IM_END, 151643] });
const config = parseModelConfig({
  vocab_size: 151936,
  d_model: 16,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 32,
  max_seq_len: 1024,
  rope_theta: 1000000,
  norm_eps: 1e-6,
  tie_embeddings: true,
  qkv_bias: true,
});
const params = initParams(config, 7);
const TOOLS: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "calculator",
      description: "Evaluate an arithmetic expression exactly.",
      parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
    },
  },
];
const SYSTEM = "Use the calculator. End with ### ANSWER: <number> ###";
const callText = (expression: string): string =>
  `<tool_call>\n{"name": "calculator", "arguments": {"expression": "${expression}"}}\n</tool_call>`;
// What the calculator answers to the scripted calls (the MCP server's part, not under test here).
const RESULTS: Record<string, string> = { "23*148": "3404", "3404-517": "2887", "23*148-517": "2887" };
const calculate = (expression: string): string => RESULTS[expression] ?? "error: unknown expression";

/** Tool-calling replies from a script, in order; once it runs out, the real model generates. */
function scriptedThenModel(replies: string[]): GenerationEngine {
  return {
    backend: "cpu",
    async generate(cfg, weights, requests, tokenizer, adapter) {
      const text = replies.shift();
      if (text === undefined) return cpuGenerationEngine.generate(cfg, weights, requests, tokenizer, adapter);
      return requests.map((r) => {
        const ids = [...tokenizer!.encode(text), IM_END];
        return finishGeneration(
          ids,
          ids.map(() => -0.5),
          "stop",
          r.stop,
          tokenizer,
        );
      });
    },
  };
}

interface Call {
  /** the messages the call was made with, and the reply's token ids as the server returned them */
  messages: TemplateMessage[];
  promptIds: number[];
  responseIds: number[];
}

/** The agent: ask with tools; run each tool call and send its result back; stop at a reply without calls. */
async function runAgent(client: OpenAI, question: string): Promise<{ calls: Call[]; messages: ChatCompletionMessageParam[] }> {
  const messages: ChatCompletionMessageParam[] = [
    { role: "system", content: SYSTEM },
    { role: "user", content: question },
  ];
  const calls: Call[] = [];
  for (let turn = 0; turn < 4; turn++) {
    const sent = structuredClone(messages) as TemplateMessage[];
    const res = await client.chat.completions.create({
      model: "tiny-qwen",
      messages,
      tools: TOOLS as never,
      max_tokens: 6,
      temperature: 0,
    });
    const raw = res as unknown as { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };
    calls.push({ messages: sent, promptIds: raw.prompt_token_ids, responseIds: raw.choices[0].token_ids });
    const reply = res.choices[0].message;
    messages.push(reply);
    if (!reply.tool_calls?.length) break;
    for (const c of reply.tool_calls) {
      const fn = (c as { function: { arguments: string } }).function;
      messages.push({ role: "tool", tool_call_id: c.id, content: calculate(JSON.parse(fn.arguments).expression) });
    }
  }
  return { calls, messages };
}

const store = new InMemoryLightningStore();
let server: PolicyServer;
const script: string[] = [];
const rollouts: { id: string; calls: Call[]; messages: ChatCompletionMessageParam[] }[] = [];
let finished: FinishedRollout[] = [];

beforeAll(async () => {
  const policy = new ModelPolicy({ model: "tiny-qwen", config, params, tokenizer: tok, engine: scriptedThenModel(script) });
  server = new PolicyServer({ policy, store });
  await server.start();
  // two rollouts of one task: two tool calls then an answer, and one tool call then an answer
  for (const expressions of [["23*148", "3404-517"], ["23*148-517"]]) {
    script.push(...expressions.map(callText));
    const r = await store.startRollout({ question: "23 boxes of 148 pens, 517 sold. How many left?" });
    const llm = server.asResource({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id });
    const client = new OpenAI({ baseURL: llm.endpoint, apiKey: "none", maxRetries: 0 });
    const run = await runAgent(client, "23 boxes of 148 pens, 517 sold. How many left?");
    const seq = await store.getNextSpanSequenceId(r.rollout_id, r.attempt.attempt_id);
    await store.addSpan(
      spanFromAttributes({
        rollout_id: r.rollout_id,
        attempt_id: r.attempt.attempt_id,
        sequence_id: seq,
        name: "agentlightning.annotation",
        attributes: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": rollouts.length === 0 ? 1 : 0 },
      }),
    );
    rollouts.push({ id: r.rollout_id, ...run });
  }
  const adapter = new LlmProxyTraceToTriplet();
  finished = await Promise.all(
    rollouts.map(async (r) => ({ rollout_id: r.id, data_id: "task-0", triplets: adapter.adapt((await store.querySpans(r.id)).items) })),
  );
}, 120_000);

afterAll(() => server?.stop());

/** The row of a batch as it was laid out: its prompt, response and loss mask without padding. */
function unpadded(b: TrainingBatch, i: number): { prompt: number[]; response: number[]; mask: number[] } {
  const { P, R } = b.tensors;
  const W = P + R;
  const ids = Array.from(b.tensors.inputIds.subarray(i * W, (i + 1) * W));
  const attn = Array.from(b.tensors.attentionMask.subarray(i * W, (i + 1) * W));
  const prompt = ids.slice(0, P).filter((_, j) => attn[j] === 1);
  const n = attn.slice(P).reduce((a, x) => a + x, 0);
  return { prompt, response: ids.slice(P, P + n), mask: Array.from(b.tensors.responseMask.subarray(i * R, i * R + n)) };
}

describe("a multi-turn tool-calling trace from the policy server", () => {
  it("the agent's calls: the model's <tool_call>s parsed into tool_calls, the results sent back, a final answer", () => {
    expect(rollouts.map((r) => r.calls.length)).toEqual([3, 2]);
    const [first] = rollouts;
    const calls = first.messages
      .filter((m) => m.role === "assistant")
      .map((m) => (m as { tool_calls?: unknown[] }).tool_calls?.length ?? 0);
    expect(calls).toEqual([1, 1, 0]);
    expect(first.messages.filter((m) => m.role === "tool").map((m) => m.content)).toEqual(["3404", "2887"]);
    // each call's prompt is the template's rendering of the messages it was sent, tools included
    for (const r of rollouts)
      for (const c of r.calls) expect(c.promptIds).toEqual(tok.applyChatTemplate(c.messages, { tools: TOOLS, addGenerationPrompt: true }));
  });

  it("LlmProxyTraceToTriplet: one triplet per model call with its prompt and response token ids, the reward on the last", () => {
    finished.forEach((f, k) => {
      const calls = rollouts[k].calls;
      expect(f.triplets.map((t) => t.prompt.token_ids)).toEqual(calls.map((c) => c.promptIds));
      expect(f.triplets.map((t) => t.response.token_ids)).toEqual(calls.map((c) => c.responseIds));
      expect(f.triplets.map((t) => t.reward)).toEqual([...calls.slice(1).map(() => null), k === 0 ? 1 : 0]);
    });
  });

  it("transition level: a row per model call, the whole response in the loss", () => {
    const b = buildTrainingBatch(finished, { level: "transition", maxPromptLength: 512, maxResponseLength: 64 });
    const calls = rollouts.flatMap((r) => r.calls);
    expect(b.tensors.n).toBe(5);
    expect(b.turnIndex).toEqual([0, 1, 2, 0, 1]);
    expect(b.groupKeys).toEqual(["task-0#0", "task-0#1", "task-0#2"]);
    calls.forEach((c, i) => {
      const row = unpadded(b, i);
      expect(row.prompt).toEqual(c.promptIds);
      expect(row.response).toEqual(c.responseIds);
      expect(row.mask.every((m) => m === 1)).toBe(true);
    });
    const tokens = calls.reduce((a, c) => a + c.promptIds.length + c.responseIds.length, 0);
    const generated = calls.reduce((a, c) => a + c.responseIds.length, 0);
    expect(b.metrics).toMatchObject({
      "training/n_triplets": 5,
      "training/n_tokens": tokens,
      "training/n_response_tokens": generated,
      "training/n_loss_tokens": generated,
    });
  });

  it("trajectory level: one row per rollout; the mask is 1 exactly on the model's tokens of the template's rendering", () => {
    const b = buildTrainingBatch(finished, { level: "trajectory", maxPromptLength: 512, maxResponseLength: 512 });
    expect(b.tensors.n).toBe(2);
    expect(b.rolloutIds).toEqual(rollouts.map((r) => r.id));
    expect(b.metrics["training/n_unmerged_rollouts"]).toBe(0);
    let tokens = 0,
      loss = 0;
    rollouts.forEach((r, i) => {
      const row = unpadded(b, i);
      // the template's own rendering: each assistant turn's tokens run from the end of the generation
      // prompt before it to its <|im_end|> (the "\n" after it is scaffolding); the last turn is the
      // model's free reply, taken as generated
      const last = r.calls[r.calls.length - 1];
      const expected: number[] = [];
      const mask: number[] = [];
      const assistantAt = r.messages.flatMap((m, k) => (m.role === "assistant" ? [k] : []));
      let at = 0;
      const push = (ids: number[], m: number) => {
        for (const id of ids.slice(at)) {
          expected.push(id);
          mask.push(m);
        }
        at = Math.max(at, ids.length);
      };
      assistantAt.forEach((k, turn) => {
        const before = tok.applyChatTemplate(r.messages.slice(0, k) as TemplateMessage[], { tools: TOOLS, addGenerationPrompt: true });
        push(before, 0);
        if (turn === assistantAt.length - 1) {
          push([...before, ...last.responseIds], 1);
          return;
        }
        const through = tok.applyChatTemplate(r.messages.slice(0, k + 1) as TemplateMessage[], { tools: TOOLS });
        expect(tok.decode(through.slice(-2), { skipSpecialTokens: false })).toBe("<|im_end|>\n");
        push(through.slice(0, -1), 1);
      });
      const P0 = r.calls[0].promptIds.length;
      expect(row.prompt).toEqual(expected.slice(0, P0));
      expect(row.response).toEqual(expected.slice(P0));
      expect(row.mask).toEqual(mask.slice(P0));
      // what the mask keeps is the model's text; what it drops holds the tool results and the scaffolding
      const text = (m: number) =>
        tok.decode(
          row.response.filter((_, j) => row.mask[j] === m),
          { skipSpecialTokens: false },
        );
      expect(text(1)).toContain(callText(i === 0 ? "3404-517" : "23*148-517"));
      expect(text(1)).not.toContain("<tool_response>");
      expect(text(0)).toContain(`<tool_response>\n${i === 0 ? "3404" : "2887"}\n</tool_response>`);
      expect(text(0)).toContain("<|im_start|>assistant\n");
      expect(text(0)).not.toContain("<tool_call>");
      tokens += row.prompt.length + row.response.length;
      loss += row.mask.reduce((a, x) => a + x, 0);
    });
    expect(loss).toBe(rollouts.flatMap((r) => r.calls).reduce((a, c) => a + c.responseIds.length, 0));
    expect(b.metrics).toMatchObject({ "training/n_triplets": 2, "training/n_tokens": tokens, "training/n_loss_tokens": loss });
    // a row per rollout costs fewer tokens than a row per call, which re-reads each turn's context
    const transition = buildTrainingBatch(finished, { level: "transition", maxPromptLength: 512, maxResponseLength: 64 });
    expect(tokens).toBeLessThan(transition.metrics["training/n_tokens"]);
  });
});

describe("the trajectory row's loss mask in the trainer's PPO step", () => {
  // The row's token ids renumbered densely into a small vocabulary: the layout and the mask are the
  // trace's, and a step costs milliseconds instead of a 152k-wide LM head per token.
  const small = { ...config, vocab_size: PAD_ID + 6, n_layers: 1 }; // grpoUpdate pads with PAD_ID
  const renumbered = (b: TokenBatch): TokenBatch => {
    const dense = new Map<number, number>();
    const inputIds = Int32Array.from(b.inputIds, (id) => {
      if (!dense.has(id)) dense.set(id, dense.size);
      return dense.get(id)!;
    });
    expect(dense.size).toBeLessThanOrEqual(small.vocab_size);
    return { ...b, inputIds };
  };

  /** Params after one policy step on `batch` with these advantages and old log-probs. */
  async function stepped(lora: boolean, batch: TokenBatch, advantages: Float32Array, old: Float32Array): Promise<Float32Array> {
    const base = initParams(small, 3);
    const trainer = lora
      ? new CpuTrainer({
          config: small,
          lr: 1e-2,
          lora: { config: { r: 2, alpha: 4, targetModules: ["q_proj", "v_proj"] }, base, seed: 1 },
        })
      : new CpuTrainer({ config: small, params: base, lr: 1e-2 });
    const m = await trainer.policyStep(batch, advantages, old);
    expect(m.tokens).toBe(Array.from(batch.responseMask!).reduce((a, x) => a + x, 0));
    return (await trainer.getState()).params;
  }

  it("grpoUpdate takes the level and grouping: the trainer gets the trajectory rows with their loss mask", async () => {
    // the rollouts with their token ids renumbered alike (runs that extend one another still do)
    const dense = new Map<number, number>();
    const id = (x: number) => {
      if (!dense.has(x)) dense.set(x, dense.size);
      return dense.get(x)!;
    };
    const renumbered_: FinishedRollout[] = finished.map((f) => ({
      ...f,
      triplets: f.triplets.map((t) => ({
        ...t,
        prompt: { token_ids: (t.prompt.token_ids as number[]).map(id) },
        response: { token_ids: (t.response.token_ids as number[]).map(id) },
      })),
    }));
    const seen: TokenBatch[] = [];
    const trainer = new CpuTrainer({ config: small, params: initParams(small, 3), lr: 1e-2 });
    const recording: PolicyTrainer = {
      config: trainer.config,
      backend: trainer.backend,
      logProbs: (b, o) => trainer.logProbs(b, o),
      policyStep: (b, a, old, o) => (seen.push(b), trainer.policyStep(b, a, old, o)),
      sftStep: (b, o) => trainer.sftStep(b, o),
      getState: () => trainer.getState(),
      setState: (st) => trainer.setState(st),
    };
    const options = { maxPromptLength: 512, maxResponseLength: 512 };
    const want = buildTrainingBatch(renumbered_, { ...options, level: "trajectory", padTokenId: PAD_ID });
    const u = await grpoUpdate(recording, renumbered_, { ...options, traceAggregator: { level: "trajectory" } });
    expect([u.rows, u.trainedRows]).toEqual([2, 2]);
    expect(u.tokens).toBe(want.metrics["training/n_tokens"]);
    expect(u.trainedTokens).toBe(want.metrics["training/n_tokens"]);
    expect(u.lossTokens).toBe(want.metrics["training/n_loss_tokens"]);
    expect(u.metrics?.tokens).toBe(u.lossTokens);
    expect(seen).toHaveLength(1);
    expect(Array.from(seen[0].responseMask!)).toEqual(Array.from(want.tensors.responseMask));
    expect(Array.from(seen[0].inputIds)).toEqual(Array.from(want.tensors.inputIds));
    // transition level (the default): a row per call, grouped by sample and turn
    const t = await grpoUpdate(recording, renumbered_, options);
    expect(t.rows).toBe(5);
    expect(t.batchMetrics["training/n_groups"]).toBe(3);
    expect((await grpoUpdate(recording, renumbered_, { ...options, grouping: "sample" })).batchMetrics["training/n_groups"]).toBe(1);
  });

  it.each([false, true])(
    "lora=%s: advantages and old log-probs outside the mask change nothing; inside they do",
    async (lora) => {
      const b = buildTrainingBatch(finished.slice(1), { level: "trajectory", maxPromptLength: 512, maxResponseLength: 512 });
      const batch = renumbered(selectRows(b.tensors, [0]));
      const R = batch.R;
      const mask = batch.responseMask!;
      const adv = new Float32Array(R).map((_, j) => (mask[j] ? 1 : 0));
      const old = new Float32Array(R).fill(-2);
      const junk = (where: 0 | 1) => {
        const a = adv.slice();
        const o = old.slice();
        for (let j = 0; j < R; j++)
          if (mask[j] === where) {
            a[j] = where ? -1 : 5;
            o[j] = -9;
          }
        return [a, o] as const;
      };
      expect(mask.some((m) => m === 0) && mask.some((m) => m === 1)).toBe(true);
      const clean = await stepped(lora, batch, adv, old);
      expect(Array.from(await stepped(lora, batch, ...junk(0)))).toEqual(Array.from(clean));
      expect(Array.from(await stepped(lora, batch, ...junk(1)))).not.toEqual(Array.from(clean));
    },
    120_000,
  );
});

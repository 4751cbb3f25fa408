/**
 * The policy server against the official `openai` npm client (non-streaming and streaming), on port 0,
 * with a tiny random model: answers carry the token ids, routed calls land in the store as spans, and
 * the proxy triplet adapter and the batch builder turn them into training rows.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LlmProxyTraceToTriplet, TraceToMessages, TracerTraceToTriplet, buildTrainingBatch } from "../../src/adapter/index.ts";
import { applyChatTemplate, byteTokenizer, EOS_ID, generate, initParams, presetConfig } from "../../src/model/index.ts";
import { LLM_CALL_SPAN_NAME, llmCallSpans, ModelPolicy, PolicyServer, textDeltas } from "../../src/proxy/index.ts";
import { referenceGenerationEngine } from "../../src/cpu/generation.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { spanFromAttributes } from "../../src/types/span.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 64 };
const params = initParams(config, 3);
const store = new InMemoryLightningStore();
const policy = new ModelPolicy({ model: "tiny-policy", config, params, seed: 11 });
const server = new PolicyServer({ policy, store });

beforeAll(() => server.start());
afterAll(() => server.stop());

async function attempt() {
  const r = await store.startRollout({ q: 1 });
  return { rid: r.rollout_id, aid: r.attempt.attempt_id };
}

function clientFor(rid?: string, aid?: string): OpenAI {
  const llm = rid && aid ? server.asResource({ rolloutId: rid, attemptId: aid }) : server.asResource();
  return new OpenAI({ baseURL: llm.endpoint, apiKey: "unused", maxRetries: 0 });
}

type WithIds = { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };

describe("policy server with the openai client", () => {
  it("answers a non-streaming chat call with token ids and records it as a span the adapter turns into a triplet", async () => {
    const { rid, aid } = await attempt();
    const messages = [
      { role: "system" as const, content: "Be brief." },
      { role: "user" as const, content: "2+3=" },
    ];
    const res = await clientFor(rid, aid).chat.completions.create({ model: "tiny-policy", messages, max_tokens: 6, temperature: 0 });
    const raw = res as unknown as WithIds;
    const promptIds = applyChatTemplate(messages, { addGenerationPrompt: true });
    expect(raw.prompt_token_ids).toEqual(promptIds);
    // greedy through the server equals greedy through the model's own generation
    const direct = generate(config, params, promptIds, { maxTokens: 6, temperature: 0, vocabLimit: byteTokenizer.vocabSize });
    expect(raw.choices[0].token_ids).toEqual(direct.tokens);
    expect(res.choices[0].finish_reason).toBe(direct.finishReason);
    expect(res.usage).toEqual({
      prompt_tokens: promptIds.length,
      completion_tokens: direct.tokens.length,
      total_tokens: promptIds.length + direct.tokens.length,
    });

    const spans = (await store.querySpans(rid)).items;
    expect(spans.map((s) => s.name)).toEqual([LLM_CALL_SPAN_NAME]);
    expect(spans[0].attributes["gen_ai.response.id"]).toBe(res.id);
    expect(spans[0].attributes["gen_ai.prompt.1.content"]).toBe("2+3=");
    expect(spans[0].attributes["gen_ai.usage.completion_tokens"]).toBe(direct.tokens.length);
    expect(spans[0].attributes.response_logprobs).toHaveLength(direct.tokens.length);

    const triplets = new LlmProxyTraceToTriplet().adapt(spans);
    expect(triplets).toHaveLength(1);
    expect(triplets[0].prompt.token_ids).toEqual(promptIds);
    expect(triplets[0].response.token_ids).toEqual(direct.tokens);
    expect(triplets[0].metadata).toEqual({ response_id: res.id });
    // the tracer-side adapter reads the same keys when told the span name
    const viaTracer = new TracerTraceToTriplet({ llmCallMatch: LLM_CALL_SPAN_NAME }).adapt(spans);
    expect(viaTracer[0].response.token_ids).toEqual(direct.tokens);
  });

  it("streams chat chunks whose text and token ids add up to the non-streamed answer", async () => {
    const { rid, aid } = await attempt();
    const client = clientFor(rid, aid);
    const body = {
      model: "tiny-policy",
      messages: [{ role: "user" as const, content: "hello" }],
      max_tokens: 10,
      temperature: 0.8,
      seed: 5,
    };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let text = "";
    const ids: number[] = [];
    let promptIds: number[] | undefined;
    let finish: string | null = null;
    let usage: unknown = null;
    let role: string | undefined;
    for await (const chunk of stream) {
      const c = chunk as unknown as {
        prompt_token_ids?: number[];
        choices: { delta: { content?: string; role?: string }; token_ids: number[]; finish_reason: string | null }[];
      };
      promptIds ??= c.prompt_token_ids;
      if (chunk.usage) usage = chunk.usage;
      for (const ch of c.choices) {
        role ??= ch.delta.role;
        text += ch.delta.content ?? "";
        ids.push(...ch.token_ids);
        finish = ch.finish_reason ?? finish;
      }
    }
    expect(role).toBe("assistant");
    expect(text).toBe(whole.choices[0].message.content);
    expect(ids).toEqual((whole as unknown as WithIds).choices[0].token_ids);
    expect(promptIds).toEqual((whole as unknown as WithIds).prompt_token_ids);
    expect(finish).toBe(whole.choices[0].finish_reason);
    expect(usage).toEqual(whole.usage);

    // both calls are spans; with a reward after them, the adapter gives two rows and the reward goes to the last
    await store.addSpan(await rewardSpan(rid, aid, 1)); // what an agent's emitReward stores
    const spans = (await store.querySpans(rid)).items;
    const triplets = new LlmProxyTraceToTriplet().adapt(spans);
    expect(triplets).toHaveLength(2);
    expect(triplets.map((t) => t.reward)).toEqual([null, 1]);
    const batch = buildTrainingBatch([{ rollout_id: rid, data_id: "d0", triplets }], { maxPromptLength: 16, maxResponseLength: 12 });
    expect(batch.tensors.n).toBe(2);
    const R = 12;
    const P = 16;
    const row = Array.from(batch.tensors.inputIds.subarray(P + R + P, P + R + P + ids.length));
    expect(row).toEqual(ids);
  });

  it("serves /v1/completions with a string prompt, stop strings, several choices and a bare (unrouted) base URL", async () => {
    const client = clientFor();
    const res = await client.completions.create({ model: "tiny-policy", prompt: "abc", max_tokens: 12, temperature: 1, n: 3, seed: 9 });
    const raw = res as unknown as WithIds;
    // the text is encoded as vLLM does, with the tokenizer's BOS (add_special_tokens: false leaves it out)
    expect(raw.prompt_token_ids).toEqual([BOS_PROMPT, 97, 98, 99]);
    const bare = await client.completions.create({
      model: "tiny-policy",
      prompt: "abc",
      max_tokens: 1,
      add_special_tokens: false,
    } as never);
    expect((bare as unknown as WithIds).prompt_token_ids).toEqual([97, 98, 99]);
    expect(res.choices).toHaveLength(3);
    for (const [i, ch] of res.choices.entries()) {
      const direct = generate(config, params, [BOS_PROMPT, 97, 98, 99], {
        maxTokens: 12,
        temperature: 1,
        seed: 9 + i,
        vocabLimit: byteTokenizer.vocabSize,
      });
      expect(raw.choices[i].token_ids).toEqual(direct.tokens);
      expect(ch.index).toBe(i);
    }
    // a stop string taken from a real answer cuts the text before it and ends the token ids where it completed
    const first = res.choices[0].text;
    expect(first.length).toBeGreaterThanOrEqual(3);
    const needle = first.slice(1, 3);
    const cut = await client.completions.create({
      model: "tiny-policy",
      prompt: "abc",
      max_tokens: 12,
      temperature: 1,
      seed: 9,
      stop: [needle],
    });
    expect(cut.choices[0].text).toBe(first.slice(0, first.indexOf(needle)));
    expect(cut.choices[0].finish_reason).toBe("stop");
    expect((cut as unknown as WithIds).choices[0].token_ids.length).toBeLessThan(raw.choices[0].token_ids.length);
  });

  it("streams completions chunks", async () => {
    const client = clientFor();
    const body = { model: "tiny-policy", prompt: [BOS_PROMPT, 104, 105], max_tokens: 8, temperature: 0 };
    const whole = await client.completions.create(body);
    let text = "";
    for await (const chunk of await client.completions.create({ ...body, stream: true })) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe(whole.choices[0].text);
  });

  it("refuses an unknown model (404), a bad body (400) and an over-long prompt (400) with OpenAI error bodies, recording nothing", async () => {
    const { rid, aid } = await attempt();
    const client = clientFor(rid, aid);
    await expect(client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] })).rejects.toMatchObject({
      status: 404,
      code: "model_not_found",
    });
    await expect(client.chat.completions.create({ model: "tiny-policy", messages: [], temperature: 0 })).rejects.toMatchObject({
      status: 400,
    });
    await expect(
      client.chat.completions.create({ model: "tiny-policy", messages: [{ role: "user", content: "x".repeat(80) }] }),
    ).rejects.toMatchObject({ status: 400, code: "context_length_exceeded" });
    // an image part is refused, naming where it is, rather than dropped from the prompt
    const image = { type: "image_url" as const, image_url: { url: "data:image/png;base64,AAAA" } };
    const parts = [{ type: "text" as const, text: "What is this?" }, image];
    await expect(
      client.chat.completions.create({ model: "tiny-policy", messages: [{ role: "user", content: parts }] }),
    ).rejects.toMatchObject({
      status: 400,
      param: "messages.0.content.1",
      message: expect.stringMatching(/only text content parts/),
    });
    // an empty generation (max_tokens 0) is an empty answer, not an error
    const none = await clientFor().completions.create({ model: "tiny-policy", prompt: "abc", max_tokens: 0 });
    expect(none.choices[0]).toMatchObject({ text: "", finish_reason: "length" });
    expect((await store.querySpans(rid)).items).toHaveLength(0);
  });

  it("lists the model with its policy version, which moves on update", async () => {
    const client = clientFor();
    const before = (await client.models.list()).data[0] as unknown as { id: string; policy_version: number };
    expect(before.id).toBe("tiny-policy");
    policy.update(params, before.policy_version + 1);
    const after = (await client.models.list()).data[0] as unknown as { policy_version: number };
    expect(after.policy_version).toBe(before.policy_version + 1);
  });
});

describe("llmCallSpans", () => {
  it("records a tool round trip's calls, results and tools (gen-ai.ts, as the LLM proxy), one span per choice", () => {
    const call = { id: "call_1", type: "function", function: { name: "add", arguments: '{"a":2,"b":3}' } };
    const request = {
      model: "tiny-policy",
      messages: [
        { role: "user", content: "2+3?" },
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: "call_1", content: "5" },
      ],
      tools: [{ type: "function", function: { name: "add", description: "Adds", parameters: { type: "object" } } }],
      n: 2,
    };
    const gen = (text: string) => ({ tokenIds: [1, 2], logprobs: [-0.5, -0.25], text, finishReason: "stop" as const });
    const response = {
      id: "chatcmpl-1",
      model: "tiny-policy",
      prompt_token_ids: [7, 8, 9],
      choices: ["It is 5.", "5"].map((content, index) => ({
        index,
        message: { role: "assistant", content },
        finish_reason: "stop",
        token_ids: [1, 2],
      })),
    };
    const spans = llmCallSpans({
      rolloutId: "r",
      attemptId: "a",
      sequenceId: 4,
      request,
      response,
      policyVersion: 3,
      choices: [gen("It is 5."), gen("5")],
      startTime: 1,
      endTime: 2,
    });
    expect(spans.map((x) => x.attributes["gen_ai.response.id"])).toEqual(["chatcmpl-1", "chatcmpl-1-1"]);
    const attrs = spans[1].attributes;
    expect(attrs["gen_ai.prompt.1.tool_calls.0.name"]).toBe("add");
    expect(attrs["gen_ai.prompt.2.tool_call_id"]).toBe("call_1");
    expect(attrs["gen_ai.request.functions.0.name"]).toBe("add");
    expect(attrs["gen_ai.completion.0.content"]).toBe("5");
    expect(attrs["gen_ai.usage.completion_tokens"]).toBe(2);
    expect(attrs.prompt_token_ids).toEqual([7, 8, 9]);
    expect(attrs.response_logprobs).toEqual([-0.5, -0.25]);
    expect(attrs["lightning.policy.version"]).toBe(3);
    expect(new TraceToMessages().adapt([spans[0]])[0].messages).toEqual([
      { role: "user", content: "2+3?" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", content: "5", tool_call_id: "call_1" },
      { role: "assistant", content: "It is 5." },
    ]);
  });
});

describe("the policy server's store", () => {
  it("is set before start; once running, the same store again is a no-op and another is refused", () => {
    // (`server` above was started with `store`)
    expect(() => server.setStore(store)).not.toThrow();
    expect(() => server.setStore(new InMemoryLightningStore())).toThrow(/setStore must come before start\(\)/);
  });
});

describe("textDeltas", () => {
  it("never splits a multi-byte character and adds up to the text", () => {
    const bytes = Array.from(new TextEncoder().encode("añ€b"));
    const deltas = textDeltas({ tokenIds: [...bytes, EOS_ID], logprobs: [], text: "añ€b", finishReason: "stop" });
    expect(deltas.map((d) => d.text).join("")).toBe("añ€b");
    expect(deltas.flatMap((d) => d.tokenIds)).toEqual([...bytes, EOS_ID]);
    expect(deltas.map((d) => d.text)).toEqual(["a", "ñ", "€", "b", ""]);
  });
});

describe("a fresh random model on the preset's padded vocab", () => {
  // 264 embedding rows, 263 byte-tokenizer ids: id 263 has no text. The plain-TS engine, so `generate`
  // below does the server's arithmetic.
  const fresh = new ModelPolicy({ model: "fresh", config, params, engine: referenceGenerationEngine });
  const freshServer = new PolicyServer({ policy: fresh, store: new InMemoryLightningStore() });
  beforeAll(() => freshServer.start());
  afterAll(() => freshServer.stop());

  it("is answered (never a 400 on its own output) and samples only ids the tokenizer has", async () => {
    const messages = [{ role: "user" as const, content: "hi" }];
    const prompt = applyChatTemplate(messages, { addGenerationPrompt: true });
    // unrestricted, this seed draws the padding id 263 within the first few tokens
    const unrestricted = generate(config, params, prompt, { maxTokens: 8, temperature: 1, seed: 9 });
    expect(unrestricted.tokens).toContain(263);
    const res = await fetch(`${freshServer.asResource().endpoint}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "fresh", messages, max_tokens: 8, temperature: 1, seed: 9, n: 4, logprobs: true }),
    });
    const body = (await res.json()) as { choices: { token_ids: number[]; logprobs: { content: { logprob: number }[] } }[] };
    expect(res.status).toBe(200);
    expect(body.choices).toHaveLength(4);
    for (const c of body.choices) {
      expect(c.token_ids.length).toBeGreaterThan(0);
      expect(c.token_ids.every((t) => t < 263)).toBe(true);
      expect(c.logprobs.content.every((l) => l.logprob <= 0)).toBe(true);
    }
  });
});

const BOS_PROMPT = 256;

async function rewardSpan(rid: string, aid: string, value: number) {
  const seq = await store.getNextSpanSequenceId(rid, aid);
  return spanFromAttributes({
    rollout_id: rid,
    attempt_id: aid,
    sequence_id: seq,
    name: "agentlightning.annotation",
    attributes: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value },
  });
}

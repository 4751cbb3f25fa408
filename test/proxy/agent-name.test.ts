/**
 * Agent names on LLM calls (selective optimisation): `withAgentName` + `agentNameFetch` put the name on
 * the request; the policy server and the LLM proxy record it as `gen_ai.agent.name` (a bad name is a
 * 400 naming the header); with `agentMatch` and a LoRA policy the matched agent's calls get the adapter
 * and every other call the frozen base; `LlmProxyTraceToTriplet({ agentMatch })` keeps exactly the
 * matched agent's calls, with the rollout's reward on them.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentName, LlmProxyTraceToTriplet } from "../../src/adapter/index.ts";
import { initLora, initParams, loraLayout, type LoraConfig, presetConfig } from "../../src/model/index.ts";
import { Rng } from "../../src/model/init.ts";
import { createPolicyApp, LLM_CALL_SPAN_NAME, LLMProxy, ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { agentNameFetch, currentAgentName, withAgentName } from "../../src/tracer/index.ts";
import { spanFromAttributes } from "../../src/types/span.ts";
import { chatAnswer, type ScriptedUpstream, startScriptedUpstream } from "./scripted-upstream.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 96 };
const base = initParams(config, 5);
const lora: LoraConfig = { r: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "down_proj"] };

/** An adapter with B non-zero, so it changes the model's outputs. */
function randomAdapter(seed: number): Float32Array {
  const a = initLora(config, lora, seed);
  const rng = new Rng(seed + 100);
  for (const s of loraLayout(config, lora))
    if (s.name.endsWith("lora_b")) for (let i = s.offset; i < s.offset + s.size; i++) a[i] = (rng.uniform() - 0.5) * 0.6;
  return a;
}

const withLora = () => new ModelPolicy({ model: "m", config, params: base, lora: { config: lora, params: randomAdapter(1) } });
const baseOnly = () => new ModelPolicy({ model: "m", config, params: base });

let upstream: ScriptedUpstream;
beforeAll(async () => {
  upstream = await startScriptedUpstream({ kind: "json", body: chatAnswer("ok") });
});
afterAll(() => upstream.stop());

describe("withAgentName and agentNameFetch", () => {
  it("name the calls made inside the scope, across awaits and timers, and only those", async () => {
    const client = new OpenAI({ baseURL: upstream.url, apiKey: "unused", maxRetries: 0, fetch: agentNameFetch() });
    const ask = () => client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    upstream.received.length = 0;
    await ask();
    await withAgentName("write", async () => {
      await new Promise((r) => setTimeout(r, 5));
      await ask();
      await withAgentName("check", ask);
      expect(currentAgentName()).toBe("write");
      const stream = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "s" }], stream: false });
      expect(stream.choices[0]!.message.content).toBe("ok");
    });
    expect(currentAgentName()).toBeNull();
    expect(upstream.received.map((r) => r.headers["x-agent-name"])).toEqual([undefined, "write", "check", "write"]);
  });

  it("refuses names that cannot travel as a header value", () => {
    expect(() => withAgentName("", () => 1)).toThrow(/non-empty/);
    expect(() => withAgentName("a\r\nx-evil: 1", () => 1)).toThrow(/control characters/);
    expect(() => withAgentName("x".repeat(257), () => 1)).toThrow(/at most 256/);
  });
});

describe("the policy server and agent names", () => {
  async function routed(store: InMemoryLightningStore) {
    const r = await store.startRollout({ q: 1 });
    return { rid: r.rollout_id, aid: r.attempt.attempt_id, prefix: `/rollout/${r.rollout_id}/attempt/${r.attempt.attempt_id}` };
  }
  const chat = (content: string, seed: number) => ({
    model: "m",
    messages: [{ role: "user", content }],
    max_tokens: 8,
    temperature: 1,
    seed,
  });
  const post = (app: ReturnType<typeof createPolicyApp>, path: string, body: unknown, agent?: string) =>
    app.request(`${path}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(agent !== undefined ? { "x-agent-name": agent } : {}) },
      body: JSON.stringify(body),
    });

  it("records the name as gen_ai.agent.name, and answers a bad one with a 400 naming the header", async () => {
    const store = new InMemoryLightningStore();
    const app = createPolicyApp({ policy: baseOnly(), store });
    const { rid, prefix } = await routed(store);
    expect((await post(app, prefix, chat("a", 1), "write")).status).toBe(200);
    expect((await post(app, prefix, chat("b", 2))).status).toBe(200);
    const bad = await post(app, prefix, chat("c", 3), "x".repeat(300));
    expect(bad.status).toBe(400);
    const body = (await bad.json()) as { error: { param: string; message: string } };
    expect(body.error.param).toBe("x-agent-name");
    expect(body.error.message).toMatch(/at most 256/);
    const spans = (await store.querySpans(rid)).items.sort((a, b) => a.sequence_id - b.sequence_id);
    expect(spans.map((s) => s.attributes["gen_ai.agent.name"])).toEqual(["write", undefined]);
    expect(spans.map(agentName)).toEqual(["write", null]);
    // no per-agent choice without agentMatch: nothing recorded about the adapter
    expect(spans.every((s) => !("lightning.policy.adapter" in s.attributes))).toBe(true);
  });

  it("with agentMatch and LoRA, serves the matched agent with the adapter and every other call with the frozen base", async () => {
    const store = new InMemoryLightningStore();
    const app = createPolicyApp({ policy: withLora(), store, agentMatch: "^write$" });
    const adapterApp = createPolicyApp({ policy: withLora() });
    const baseApp = createPolicyApp({ policy: baseOnly() });
    const { rid, prefix } = await routed(store);
    const ids = async (res: Response) => ((await res.json()) as { choices: { token_ids: number[] }[] }).choices[0]!.token_ids;
    const calls: [string, string | undefined][] = [
      ["w1", "write"],
      ["c1", "check"],
      ["r1", "rewrite"],
      ["n1", undefined],
    ];
    for (const [i, [content, agent]] of calls.entries()) {
      const got = await ids(await post(app, prefix, chat(content, 40 + i), agent));
      const viaAdapter = await ids(await post(adapterApp, "", chat(content, 40 + i)));
      const viaBase = await ids(await post(baseApp, "", chat(content, 40 + i)));
      expect(viaAdapter, "the adapter changes this sample").not.toEqual(viaBase);
      expect(got, `${agent}'s call`).toEqual(agent === "write" ? viaAdapter : viaBase);
    }
    const spans = (await store.querySpans(rid)).items.sort((a, b) => a.sequence_id - b.sequence_id);
    expect(spans.map((s) => s.attributes["lightning.policy.adapter"])).toEqual([true, false, false, false]);
  });

  it("keeps exactly the matched agent's calls in the triplets, with the rollout's reward", async () => {
    const store = new InMemoryLightningStore();
    const server = new PolicyServer({ policy: withLora(), store, agentMatch: "^write$" });
    await server.start();
    try {
      const { rid, aid } = await routed(store);
      const llm = server.asResource({ rolloutId: rid, attemptId: aid });
      const client = new OpenAI({ baseURL: llm.endpoint, apiKey: "unused", maxRetries: 0, fetch: agentNameFetch() });
      const ask = (content: string) => client.chat.completions.create({ model: "m", messages: [{ role: "user", content }], max_tokens: 6 });
      // write, check, rewrite, check: the SQL agent's shape
      const answers = [];
      for (const [agent, q] of [
        ["write", "q"],
        ["check", "c1"],
        ["rewrite", "r"],
        ["check", "c2"],
      ] as const)
        answers.push(await withAgentName(agent, () => ask(q)));
      await store.addSpan(
        spanFromAttributes({
          rollout_id: rid,
          attempt_id: aid,
          sequence_id: await store.getNextSpanSequenceId(rid, aid),
          name: "agentlightning.annotation",
          attributes: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1 },
        }),
      );
      const spans = (await store.querySpans(rid)).items;
      expect(spans.filter((s) => s.name === LLM_CALL_SPAN_NAME)).toHaveLength(4);

      const all = new LlmProxyTraceToTriplet().adapt(spans);
      expect(all.map((t) => t.metadata.agent_name)).toEqual(["write", "check", "rewrite", "check"]);
      expect(all.map((t) => t.reward)).toEqual([null, null, null, 1]);

      const writeOnly = new LlmProxyTraceToTriplet({ agentMatch: "^write$" }).adapt(spans);
      expect(writeOnly).toHaveLength(1);
      expect(writeOnly[0]!.metadata).toEqual({ response_id: answers[0]!.id, agent_name: "write" });
      expect(writeOnly[0]!.reward).toBe(1);

      // upstream's re.search: an unanchored "write" matches "rewrite" too
      expect(new LlmProxyTraceToTriplet({ agentMatch: "write" }).adapt(spans).map((t) => t.metadata.agent_name)).toEqual([
        "write",
        "rewrite",
      ]);
      expect(new LlmProxyTraceToTriplet({ agentMatch: /^CHECK$/i }).adapt(spans).map((t) => t.metadata.response_id)).toEqual([
        answers[1]!.id,
        answers[3]!.id,
      ]);
      expect(new LlmProxyTraceToTriplet({ agentMatch: "^plan$" }).adapt(spans)).toEqual([]);
    } finally {
      await server.stop();
    }
  });
});

describe("the LLM proxy and agent names", () => {
  it("records the name and passes it on to the upstream", async () => {
    const store = new InMemoryLightningStore();
    const proxy = new LLMProxy({ models: [{ name: "scripted", upstreams: [upstream.url] }], store });
    await proxy.start();
    try {
      const r = await store.startRollout({ q: 1 });
      const llm = proxy.asResource({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id, model: "scripted" });
      const client = new OpenAI({ baseURL: llm.endpoint, apiKey: "unused", maxRetries: 0, fetch: agentNameFetch() });
      upstream.received.length = 0;
      await withAgentName("check", () => client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "x" }] }));
      expect(upstream.received[0]!.headers["x-agent-name"]).toBe("check");
      const spans = (await store.querySpans(r.rollout_id)).items;
      expect(spans.map((s) => s.attributes["gen_ai.agent.name"])).toEqual(["check"]);
    } finally {
      await proxy.stop();
    }
  });
});

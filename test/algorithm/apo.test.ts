/**
 * APO end to end: real runners (Trainer, shared memory) run a keyword agent through an in-memory
 * store, and a scripted critic/editor stands in for the models. The agent's reward depends only on
 * what its rendered prompt says, so the search has a known best prompt to find.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { APO, ApoModelError, CRITIQUE_PROMPTS, createOpenAiClient, EDIT_PROMPTS, type ApoOptions } from "../../src/algorithm/index.ts";
import { TraceToMessages, TracerTraceToTriplet } from "../../src/adapter/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { Trainer } from "../../src/trainer/index.ts";
import {
  spanFromAttributes,
  UnsupportedTemplateEngineError,
  ValidationError,
  type NamedResourcesInput,
  type Span,
} from "../../src/types/index.ts";
import type { LitAgent } from "../../src/runner/index.ts";
import {
  failingAgent,
  keywordAgent,
  rewardOf,
  scriptedChat,
  seedTemplate,
  serveScriptedChat,
  tasks,
  type QuestionTask,
} from "./apo-fixtures.ts";

const fastRunner = { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: 0 };
const llm = { resource_type: "llm", endpoint: "http://127.0.0.1:9/v1", model: "agent-model" } as const;
const small: ApoOptions = {
  gradientModel: "critic",
  applyEditModel: "editor",
  gradientBatchSize: 2,
  valBatchSize: 3,
  beamWidth: 2,
  branchFactor: 2,
  beamRounds: 2,
  pollInterval: 0.01,
  seed: 1,
};

async function fit(
  apo: APO<QuestionTask>,
  options: { agent?: LitAgent<QuestionTask>; resources?: NamedResourcesInput; train?: QuestionTask[]; val?: QuestionTask[] } = {},
) {
  const store = new InMemoryLightningStore();
  const trainer = new Trainer({
    algorithm: apo,
    nRunners: 2,
    store,
    runner: fastRunner,
    adapter: new TraceToMessages(),
    initialResources: options.resources ?? { main_llm: llm, prompt: seedTemplate },
  });
  await trainer.fit(options.agent ?? keywordAgent, options.train ?? tasks(6, "t"), { valDataset: options.val ?? tasks(4, "v") });
  return store;
}

/** The spans of the `apo` bookkeeping rollout, and the rollouts the search enqueued. */
async function history(store: InMemoryLightningStore) {
  const all = (await store.queryRollouts()).items;
  const book = all.filter((r) => r.metadata?.kind === "apo-history");
  expect(book).toHaveLength(1);
  const spans = (await store.querySpans(book[0]!.rollout_id)).items;
  return { book: book[0]!, spans, work: all.filter((r) => r.metadata?.kind !== "apo-history") };
}
const named = (spans: Span[], name: string) => spans.filter((s) => s.name === name).map((s) => s.attributes);

describe("APO beam search", () => {
  it("finds the prompt with both keywords, writes it back, and records every candidate", async () => {
    const chat = scriptedChat();
    const apo = new APO<QuestionTask>(chat.client, small);
    const store = await fit(apo);

    // Round 1 finds one keyword, round 2 the other: the best prompt earns the full reward.
    const best = apo.getBestPrompt();
    expect(rewardOf(best.template)).toBe(1);
    expect(best.template).toContain("{question}");
    expect(apo.getBestScore()).toBe(1);

    // Written back as a new resources version: the initial resources with the best template in place of the seed.
    const latest = await store.getLatestResources();
    expect(latest!.resources_id).toBe(apo.bestResourcesId);
    expect(latest!.resources).toEqual({ main_llm: { ...llm, api_key: null, sampling_parameters: {} }, prompt: best });

    // Cost: |val| for the seed, then per round beamWidth*branchFactor train batches, (beam + children) val batches and |val| for the leader.
    const { book, spans, work } = await history(store);
    const expected = 4 + (2 * 2 * 2 + (1 + 4) * 3 + 4) + (2 * 2 * 2 + (2 + 4) * 3 + 4);
    expect(apo.rolloutCount).toBe(expected);
    expect(work).toHaveLength(expected);
    expect(work.filter((r) => r.mode === "train")).toHaveLength(16);
    expect(work.every((r) => r.status === "succeeded")).toBe(true);
    expect(book.status).toBe("succeeded");
    // Round 1's selection (after the seed's 4 and the 8 train rollouts): every candidate scored on the same 3 val tasks.
    const selection = work.slice(12, 27);
    expect(selection.every((r) => r.mode === "val")).toBe(true);
    const inputsOf = (version: string) =>
      selection
        .filter((r) => r.resources_id === version)
        .map((r) => (r.input as QuestionTask).question)
        .sort();
    expect(inputsOf("v0")).toHaveLength(3);
    for (const v of ["v1", "v2", "v3", "v4"]) expect(inputsOf(v)).toEqual(inputsOf("v0"));

    // Every candidate, with its score, round and parent; the seed first.
    const candidates = named(spans, "apo.candidate");
    expect(candidates.map((c) => c["apo.version"])).toEqual(["v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"]);
    expect(candidates[0]).toMatchObject({ "apo.round": 0, "apo.origin": "seed", "apo.score": 0, "apo.prompt": seedTemplate.template });
    expect(candidates[0]!["apo.parent_version"]).toBeUndefined();
    for (const c of candidates.slice(1)) {
      expect(c["apo.origin"]).toBe("edited");
      expect(typeof c["apo.score"]).toBe("number");
      expect(typeof c["apo.critique"]).toBe("string");
      expect(JSON.parse(c["apo.batch"] as string)).toHaveLength(2);
      // A child's recorded score is its reward on the round's validation batch: the prompt decides it.
      expect(c["apo.score"]).toBe(rewardOf(c["apo.prompt"] as string));
    }
    expect(candidates.slice(1, 5).map((c) => c["apo.round"])).toEqual([1, 1, 1, 1]);
    expect(candidates.slice(1, 5).every((c) => c["apo.parent_version"] === "v0")).toBe(true);
    // A new train batch per branch: the first three of round 1 make one shuffled pass over the 6 train tasks.
    const batches = candidates.slice(1, 4).flatMap((c) => (JSON.parse(c["apo.batch"] as string) as QuestionTask[]).map((t) => t.question));
    expect(batches.sort()).toEqual(["t0", "t1", "t2", "t3", "t4", "t5"]);
    expect(candidates.slice(5).every((c) => ["v1", "v3"].includes(c["apo.parent_version"] as string))).toBe(true);
    // The in-memory record matches the spans.
    expect(apo.candidates.map((c) => [c.version, c.parentVersion, c.round, c.score])).toEqual(
      candidates.map((c) => [c["apo.version"], c["apo.parent_version"] ?? null, c["apo.round"], c["apo.score"] ?? null]),
    );

    // Rounds: the stable sort keeps v1 ahead of v3 (equal scores, v1 first); the best improves each round.
    const rounds = named(spans, "apo.round");
    expect(rounds).toHaveLength(2);
    expect(rounds[0]).toMatchObject({ "apo.beam": ["v1", "v3"], "apo.leader_score": 0.5, "apo.best_version": "v1", "apo.improved": true });
    expect(rounds[1]).toMatchObject({ "apo.leader_score": 1, "apo.best_score": 1, "apo.improved": true, "apo.rollouts": expected });
    expect(named(spans, "apo.best")).toEqual([
      expect.objectContaining({ "apo.prompt": best.template, "apo.resources_id": apo.bestResourcesId, "apo.score": 1 }),
    ]);

    // The critic read the agent's conversations (TraceToMessages output) and the models got the configured temperature.
    const critiques = chat.calls.filter((c) => c.model === "critic");
    expect(critiques).toHaveLength(8);
    expect(critiques.every((c) => c.temperature === 1)).toBe(true);
    expect(critiques.some((c) => c.messages.some((m) => /answer to t\d/.test(m.content)))).toBe(true);
  });

  it("is reproducible: the same seed gives the same candidates", async () => {
    const runs: string[][] = [];
    for (let k = 0; k < 2; k++) {
      const apo = new APO<QuestionTask>(scriptedChat().client, { ...small, beamRounds: 1 });
      await fit(apo);
      runs.push(apo.candidates.map((c) => `${c.version}|${c.template}|${JSON.stringify(c.batch)}`));
    }
    expect(runs[1]).toEqual(runs[0]);
  });

  it("optimises a jinja seed (children keep its engine); without the initial validation the first leader is the best", async () => {
    const jinjaSeed = { resource_type: "prompt_template", template: "Answer: {{ question }}", engine: "jinja" } as const;
    const apo = new APO<QuestionTask>(scriptedChat().client, { ...small, beamRounds: 1, runInitialValidation: false });
    const store = await fit(apo, { resources: { prompt: jinjaSeed } });
    const best = apo.getBestPrompt();
    expect(best).toEqual({ ...jinjaSeed, template: "Answer: {{ question }} CONCISE." });
    expect(apo.getBestScore()).toBe(0.5);
    const { spans, work } = await history(store);
    expect(work).toHaveLength(2 * 2 * 2 + (1 + 4) * 3 + 4);
    const seed = named(spans, "apo.candidate")[0]!;
    expect(seed["apo.engine"]).toBe("jinja");
    expect(seed["apo.score"]).toBeUndefined();
    // The leader scored 0.5 on the whole validation set, above the unscored seed's -Infinity.
    expect(named(spans, "apo.round")[0]).toMatchObject({ "apo.leader_score": 0.5, "apo.improved": true, "apo.best_version": "v1" });
  });

  it("keeps the seed when every rollout fails (rewards count as 0, no strict improvement)", async () => {
    const apo = new APO<QuestionTask>(scriptedChat().client, { ...small, beamRounds: 1 });
    const store = await fit(apo, { agent: failingAgent });
    const { work, spans } = await history(store);
    expect(work.every((r) => r.status === "failed")).toBe(true);
    expect(apo.getBestPrompt()).toEqual(seedTemplate);
    expect(apo.getBestScore()).toBe(0);
    expect(named(spans, "apo.round")[0]).toMatchObject({ "apo.best_version": "v0", "apo.improved": false, "apo.leader_score": 0 });
    expect((await store.getLatestResources())!.resources.prompt).toEqual(seedTemplate);
  });

  it("keeps the parent's text when the critic answers garbage or nothing, and records it", async () => {
    const answers = [{}, { choices: [] }, { choices: [{ message: { content: null } }] }, { choices: [{ message: { content: "  " } }] }];
    let i = 0;
    const chat = scriptedChat({ critic: () => answers[i++ % answers.length] });
    const apo = new APO<QuestionTask>(chat.client, { ...small, beamRounds: 1 });
    const store = await fit(apo);
    const children = named((await history(store)).spans, "apo.candidate").slice(1);
    expect(children).toHaveLength(4);
    for (const c of children) {
      expect(c["apo.origin"]).toBe("critique_empty");
      expect(c["apo.prompt"]).toBe(seedTemplate.template);
      expect(c["apo.critique"]).toBeUndefined();
    }
    expect(chat.calls.filter((c) => c.model === "editor")).toHaveLength(0);
  });

  it("skips a branch whose edit comes back empty", async () => {
    const chat = scriptedChat({ badEvery: 0 });
    const respond = chat.respond;
    const client = {
      chat: {
        completions: { create: async (body: Parameters<typeof respond>[0]) => (body.model === "editor" ? { choices: [] } : respond(body)) },
      },
    };
    const apo = new APO<QuestionTask>(client, { ...small, beamRounds: 1 });
    const store = await fit(apo);
    const { spans } = await history(store);
    expect(named(spans, "apo.candidate")).toHaveLength(1);
    expect(named(spans, "apo.skipped")).toHaveLength(4);
    expect(named(spans, "apo.round")[0]).toMatchObject({ "apo.skipped": 4, "apo.beam": ["v0"] });
  });

  it("works through the real openai client against an OpenAI-compatible server", async () => {
    const chat = scriptedChat();
    const server = await serveScriptedChat(chat.respond);
    try {
      const client = await createOpenAiClient({ baseURL: server.url, apiKey: "test" });
      const apo = new APO<QuestionTask>(client, { ...small, beamRounds: 1 });
      await fit(apo);
      expect(rewardOf(apo.getBestPrompt().template)).toBe(0.5);
      expect(chat.calls.length).toBeGreaterThan(0);
    } finally {
      await server.close();
    }
  });

  it("fails with a clear error when the model endpoint is down, and marks the history failed", async () => {
    const client = await createOpenAiClient({ baseURL: "http://127.0.0.1:9/v1", apiKey: "x", maxRetries: 0 });
    const apo = new APO<QuestionTask>(client, { ...small, beamRounds: 1 });
    const store = new InMemoryLightningStore();
    const trainer = new Trainer({
      algorithm: apo,
      store,
      runner: fastRunner,
      adapter: new TraceToMessages(),
      initialResources: { prompt: seedTemplate },
    });
    const err = await trainer.fit(keywordAgent, tasks(4, "t"), { valDataset: tasks(2, "v") }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApoModelError);
    expect((err as Error).message).toMatch(/the critique call to model 'critic' failed/);
    expect((await history(store)).book.status).toBe("failed");
  });
});

describe("APO inputs", () => {
  const ready = (resources: NamedResourcesInput | null = { prompt: seedTemplate }) => {
    const apo = new APO<QuestionTask>(scriptedChat().client, small);
    apo.setStore(new InMemoryLightningStore());
    apo.setAdapter(new TraceToMessages());
    apo.setInitialResources(resources);
    return apo;
  };
  const fieldOf = (e: unknown) => (e as ValidationError).issues[0]?.path;

  it("needs both datasets", async () => {
    const missingTrain = await ready()
      .run(null, tasks(2, "v"))
      .catch((e: unknown) => e);
    expect(missingTrain).toBeInstanceOf(ValidationError);
    expect(fieldOf(missingTrain)).toEqual(["train_dataset"]);
    const emptyVal = await ready()
      .run(tasks(2, "t"), [])
      .catch((e: unknown) => e);
    expect(fieldOf(emptyVal)).toEqual(["val_dataset"]);
  });

  it("needs a PromptTemplate among the initial resources", async () => {
    await expect(ready(null).run(tasks(2, "t"), tasks(2, "v"))).rejects.toThrow(/initial resources holding a PromptTemplate/);
    await expect(ready({ main_llm: llm }).run(tasks(2, "t"), tasks(2, "v"))).rejects.toThrow(/hold no PromptTemplate/);
    expect(ready({ main_llm: llm, a: seedTemplate, b: { ...seedTemplate, template: "x" } }).getSeedPromptTemplate()).toEqual([
      "a",
      seedTemplate,
    ]);
  });

  it("refuses a poml seed and an adapter other than TraceToMessages", async () => {
    const poml = await ready({ prompt: { ...seedTemplate, engine: "poml" } })
      .run(tasks(2, "t"), tasks(2, "v"))
      .catch((e: unknown) => e);
    expect(poml).toBeInstanceOf(UnsupportedTemplateEngineError);
    expect((poml as UnsupportedTemplateEngineError).engine).toBe("poml");
    const apo = ready();
    apo.setAdapter(new TracerTraceToTriplet());
    expect(() => apo.getAdapter()).toThrow(/needs a TraceToMessages adapter, got TraceTripletAdapter/);
  });

  it("has no best prompt before it runs; validates its options and client", () => {
    expect(() => ready().getBestPrompt()).toThrow("No best prompt found");
    expect(() => new APO(scriptedChat().client, { beamWidth: 0 })).toThrow(/beamWidth must be a positive integer/);
    expect(() => new APO({} as never)).toThrow(/chat.completions.create/);
    const defaults = new APO(scriptedChat().client).options;
    expect(defaults).toMatchObject({
      gradientModel: "gpt-5-mini",
      applyEditModel: "gpt-4.1-mini",
      diversityTemperature: 1,
      gradientBatchSize: 4,
      valBatchSize: 16,
      beamWidth: 4,
      branchFactor: 4,
      beamRounds: 3,
      rolloutBatchTimeout: 3600,
      runInitialValidation: true,
    });
  });

  it("scores a partial batch after the timeout: finished rollouts count, unfinished ones are left out", async () => {
    const store = new InMemoryLightningStore();
    let clock = 0;
    const apo = new APO<QuestionTask>(scriptedChat().client, {
      ...small,
      rolloutBatchTimeout: 10,
      now: () => clock,
      // Stands in for a runner: the first sleep finishes two of the three rollouts (rewards 1 and 0.5), later sleeps only move the clock.
      sleep: async () => {
        if (clock === 0) {
          for (const reward of [1, 0.5]) {
            const claimed = (await store.dequeueRollout())!;
            await store.addSpan({
              ...spanFromAttributes({
                rollout_id: claimed.rollout_id,
                attempt_id: claimed.attempt.attempt_id,
                sequence_id: 1,
                name: "agentlightning.annotation",
                attributes: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": reward },
              }),
            });
            await store.updateAttempt(claimed.rollout_id, claimed.attempt.attempt_id, { status: "succeeded" });
          }
        }
        clock += 6;
      },
    });
    apo.setStore(store);
    apo.setAdapter(new TraceToMessages());
    apo.setInitialResources({ prompt: seedTemplate });
    const seed = { version: "v0", promptTemplate: seedTemplate, score: null };
    const { results, score } = await apo.evaluate(seed, "prompt", tasks(3, "v"), "val");
    expect(results.map((r) => r.final_reward)).toEqual([1, 0.5]);
    expect(score).toBe(0.75);
    expect(clock).toBe(12);
  });
});

describe("createOpenAiClient", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.doUnmock("openai");
  });

  it("needs a base URL or an API key, from options or the environment", async () => {
    vi.stubEnv("OPENAI_BASE_URL", "");
    vi.stubEnv("OPENAI_API_KEY", "");
    const err = await createOpenAiClient().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as Error).message).toMatch(/set OPENAI_BASE_URL/);
    vi.stubEnv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1");
    const client = await createOpenAiClient();
    expect((client as unknown as { baseURL: string }).baseURL).toBe("http://127.0.0.1:9/v1");
  });

  it("says how to install openai when it is missing", async () => {
    vi.doMock("openai", () => {
      throw new Error("Cannot find package 'openai'");
    });
    await expect(createOpenAiClient({ baseURL: "http://127.0.0.1:9/v1" })).rejects.toThrow(/npm install openai/);
  });
});

describe("APO prompts", () => {
  const experiment = {
    status: "succeeded",
    final_reward: 0,
    spans: [{ name: "s" }],
    messages: [{ messages: [{ role: "user", content: "hi" }] }],
  };

  it("critique variant 1 is one user message that starts as upstream's; every variant shows the template and the runs", () => {
    const first = CRITIQUE_PROMPTS[0]!("Answer: {q}", [experiment]);
    expect(first).toHaveLength(1);
    expect(first[0]!.role).toBe("user");
    expect(first[0]!.content.startsWith("You optimize a prompt template.")).toBe(true);
    for (const variant of CRITIQUE_PROMPTS) {
      const text = variant("Answer: {q}", [experiment])
        .map((m) => m.content)
        .join("\n");
      expect(text).toContain("<prompt_template>\nAnswer: {q}\n</prompt_template>");
      expect(text).toContain("Final reward: 0");
      expect(text).toContain('"content": "hi"');
    }
    // Only variant 2 shows the spans.
    expect(CRITIQUE_PROMPTS.map((v) => v("t", [experiment]).some((m) => m.content.includes('"name": "s"')))).toEqual([false, true, false]);
    for (const variant of EDIT_PROMPTS) {
      const text = variant("Answer: {q}", "- be brief")
        .map((m) => m.content)
        .join("\n");
      expect(text).toContain("<critique>\n- be brief\n</critique>");
      expect(text).toMatch(/Keep every placeholder/);
    }
  });
});

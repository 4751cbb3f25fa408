/**
 * The side of the browser-trainer demo that is not in the tab: the store server (with CORS for the tab's
 * origin and a token), the policy server the agents call, and the runners. The policy server serves the
 * weights the tab last published: before each generation it reads the store's latest resources and, when
 * they hold newer `model_weights`, loads them (`StoreFollowingPolicy`). The first resources, published
 * here, carry the initial weights and the policy server as `main_llm`.
 *
 *   npx tsx examples/browser-trainer/runners.ts      # then open the printed URL (serve.ts)
 */
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { LightningStoreClient } from "../../src/client/index.ts";
import { initParams } from "../../src/model/init.ts";
import { TOKENIZER_VOCAB_SIZE } from "../../src/model/tokenizer.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { initLora, type LoraConfig } from "../../src/model/lora.ts";
import { fromLoraWeights, fromPolicyWeights, policyWeightsResource } from "../../src/model/weights-resource.ts";
import { ModelPolicy, type Policy, PolicyServer, type ServeFn } from "../../src/proxy/index.ts";
import type { Generation, GenerationRequest } from "../../src/model/generation.ts";
import { LitAgentRunner, llmRollout } from "../../src/runner/index.ts";
import { createStoreApp } from "../../src/server/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import type { LightningStore } from "../../src/store/base.ts";
import type { LLM } from "../../src/types/index.ts";

/** A byte-level model small enough to train in a software WebGPU tab in seconds. */
export const DEMO_CONFIG: ModelConfig = {
  vocab_size: TOKENIZER_VOCAB_SIZE,
  d_model: 32,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 64,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
};

export interface LetterTask {
  letter: string;
}

/** The demo's tasks: say a given letter. */
export const LETTER_TASKS: LetterTask[] = ["a", "e", "k", "s"].map((letter) => ({ letter }));

export const REPLY_TOKENS = 3;

/** Closeness of the reply's first byte to the letter: a smooth reward, so even an untrained policy's
 * samples differ and every group carries a gradient. */
export function letterReward(task: LetterTask, reply: string): number {
  const got = reply.length > 0 ? reply.charCodeAt(0) : 0;
  return 1 - Math.min(1, Math.abs(got - task.letter.charCodeAt(0)) / 128);
}

/** The agent: one chat call to the policy server (which records it with its token ids), reward returned. */
export const letterAgent = llmRollout(async function sayLetter(task: LetterTask, llm: LLM) {
  const res = await fetch(`${llm.endpoint}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: llm.model,
      messages: [{ role: "user", content: `Say ${task.letter}` }],
      max_tokens: REPLY_TOKENS,
      temperature: (llm.sampling_parameters.temperature as number | undefined) ?? 1,
    }),
  });
  if (!res.ok) throw new Error(`policy server answered ${res.status}: ${await res.text()}`);
  const body = (await res.json()) as { choices: { message: { content: string } }[] };
  return letterReward(task, body.choices[0]?.message.content ?? "");
});

/**
 * A ModelPolicy that follows the weights published in the store. `sync()` reads the latest resources and
 * loads newer `model_weights` (the checkpoint's step orders them, and becomes the policy version); the
 * policy server calls it before every request (`syncedServe`), so the version it records on a call's span
 * is the one that generated it.
 */
export class StoreFollowingPolicy implements Policy {
  /** The checkpoint step of the weights being served (0: the initial ones). */
  servedStep = 0;
  private syncing: Promise<void> = Promise.resolve();
  constructor(
    readonly inner: ModelPolicy,
    private readonly store: LightningStore,
    private readonly resourceName = "policy",
    private readonly adapterName = "policy_adapter",
  ) {}
  get model() {
    return this.inner.model;
  }
  get version() {
    return this.inner.version;
  }
  get maxSeqLen() {
    return this.inner.maxSeqLen;
  }
  get tokenizer() {
    return this.inner.tokenizer;
  }
  nextSeed(): number {
    return this.inner.nextSeed();
  }
  generate(requests: readonly GenerationRequest[]): Promise<Generation[]> {
    return this.inner.generate(requests);
  }
  /** One sync at a time: concurrent requests wait for the same load. */
  sync(): Promise<void> {
    this.syncing = this.syncing.then(async () => {
      const resources = (await this.store.getLatestResources())?.resources ?? {};
      const adapter = resources[this.adapterName];
      const weights = resources[this.resourceName];
      if (this.inner.adapter && adapter?.resource_type === "model_weights" && adapter.step > this.servedStep) {
        this.inner.update((await fromLoraWeights(adapter, this.inner.config)).params, adapter.step);
        this.servedStep = adapter.step;
      } else if (!this.inner.adapter && weights?.resource_type === "model_weights" && weights.step > this.servedStep) {
        this.inner.update(fromPolicyWeights(weights).params, weights.step);
        this.servedStep = weights.step;
      }
    });
    return this.syncing;
  }
}

/** Serves the policy app with `before` awaited ahead of every request. */
function syncedServe(before: () => Promise<void>): ServeFn {
  return (fetch, { hostname, port }) =>
    new Promise((resolve) => {
      const server = serve(
        {
          fetch: async (req: Request) => {
            await before();
            return fetch(req);
          },
          hostname,
          port,
        },
        (info) => resolve({ port: info.port, stop: () => new Promise<void>((done) => server.close(() => done())) }),
      );
    });
}

export interface RunnersSide {
  storeUrl: string;
  token: string;
  store: InMemoryLightningStore;
  policy: StoreFollowingPolicy;
  stop(): Promise<void>;
}

/** Starts the store server, the policy server and `nRunners` runners; publishes the initial resources. */
export async function startRunnersSide(o: {
  token: string;
  corsOrigins: string[];
  nRunners?: number;
  seed?: number;
  port?: number;
  /** Serve the base with this LoRA adapter on top, following the tab's `policy_adapter` versions. */
  lora?: LoraConfig;
}): Promise<RunnersSide> {
  const store = new InMemoryLightningStore();
  const app = createStoreApp(store, { token: o.token, corsOrigins: o.corsOrigins });
  const server = await new Promise<ReturnType<typeof serve>>((ok) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: o.port ?? 0 }, () => ok(s));
  });
  const storeUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const params = initParams(DEMO_CONFIG, o.seed ?? 1);
  // An untrained adapter (B = 0) leaves the model as it is, whatever its A.
  const lora = o.lora ? { config: o.lora, params: initLora(DEMO_CONFIG, o.lora, 0) } : undefined;
  const policy = new StoreFollowingPolicy(
    new ModelPolicy({ model: "letters", config: DEMO_CONFIG, params, lora, seed: o.seed ?? 1 }),
    store,
  );
  const policyServer = new PolicyServer({ policy, store, serve: syncedServe(() => policy.sync()) });
  await policyServer.start();
  await store.addResources({ main_llm: policyServer.asResource(), policy: policyWeightsResource(DEMO_CONFIG, params, 0) });

  const abort = new AbortController();
  const runs: Promise<void>[] = [];
  for (let i = 0; i < (o.nRunners ?? 2); i++) {
    const runner = new LitAgentRunner<LetterTask>({ pollInterval: 0.05, heartbeatInterval: 0 });
    await runner.init(letterAgent);
    await runner.initWorker(i, new LightningStoreClient(storeUrl, { token: o.token }));
    runs.push(runner.iter({ signal: abort.signal }).finally(() => runner.teardown()));
  }
  return {
    storeUrl,
    token: o.token,
    store,
    policy,
    async stop() {
      abort.abort();
      await Promise.allSettled(runs);
      await policyServer.stop();
      await new Promise<void>((ok) => server.close(() => ok()));
      await store.close();
    },
  };
}

/**
 * Routed calls seeded from their rollout's `sampling_seed`: the samples a rollout gets do not depend on
 * the order calls reach the server; an explicit `seed` still wins, a rollout without one draws from the
 * policy's stream, and a bad one is refused naming the field.
 */
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { initParams, MIN_VOCAB_SIZE, presetConfig } from "../../src/model/index.ts";
import { ModelPolicy, PolicyServer, rolloutSamplingSeed, SAMPLING_SEED_KEY } from "../../src/proxy/index.ts";
import { mixSeeds } from "../../src/proxy/sampling-seed.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { spanFromAttributes } from "../../src/types/span.ts";

// every id the model can sample is one the byte tokenizer decodes
const config = {
  ...presetConfig("tiny"),
  vocab_size: MIN_VOCAB_SIZE,
  d_model: 32,
  n_layers: 1,
  n_heads: 2,
  n_kv_heads: 1,
  d_ff: 64,
  max_seq_len: 48,
};
const params = initParams(config, 5);

/** A fresh server and store (the policy's own seed stream starts over), and `count` started rollouts. */
async function setup(count: number, metadata: (i: number) => Record<string, unknown> | null) {
  const store = new InMemoryLightningStore();
  const policy = new ModelPolicy({ model: "m", config, params, seed: 3 });
  const server = new PolicyServer({ policy, store });
  await server.start();
  const rollouts = [];
  for (let i = 0; i < count; i++) {
    const r = await store.startRollout({ i }, { mode: "train", metadata: metadata(i) });
    rollouts.push({ rid: r.rollout_id, aid: r.attempt.attempt_id });
  }
  return { store, server, rollouts };
}

type WithIds = { choices: { token_ids: number[] }[] };

async function ask(server: PolicyServer, rid: string, aid: string, extra: Record<string, unknown> = {}): Promise<number[]> {
  const llm = server.asResource({ rolloutId: rid, attemptId: aid });
  const client = new OpenAI({ baseURL: llm.endpoint, apiKey: "unused", maxRetries: 0 });
  const res = await client.chat.completions.create({
    model: "m",
    messages: [{ role: "user", content: "2+3=" }],
    max_tokens: 8,
    temperature: 1,
    ...extra,
  });
  return (res as unknown as WithIds).choices[0].token_ids;
}

/** Two calls per rollout, the rollouts taken in `order`; the token ids by rollout index. */
async function sampleInOrder(order: number[], metadata: (i: number) => Record<string, unknown> | null): Promise<number[][][]> {
  const { server, rollouts } = await setup(order.length, metadata);
  try {
    const out: number[][][] = rollouts.map(() => []);
    for (const i of order) out[i].push(await ask(server, rollouts[i].rid, rollouts[i].aid));
    for (const i of order) out[i].push(await ask(server, rollouts[i].rid, rollouts[i].aid));
    return out;
  } finally {
    await server.stop();
  }
}

describe("sampler seeds of routed calls", () => {
  const seeded = (i: number) => ({ [SAMPLING_SEED_KEY]: rolloutSamplingSeed(0, "s1", i) });

  it("give each rollout the same samples whatever order the calls arrive in", async () => {
    const forward = await sampleInOrder([0, 1, 2, 3, 4, 5], seeded);
    const backward = await sampleInOrder([5, 4, 3, 2, 1, 0], seeded);
    expect(backward).toEqual(forward);
    // the samples do differ between rollouts and between a rollout's calls
    expect(new Set(forward.flat().map((t) => t.join(","))).size).toBeGreaterThan(6);
  });

  it("count only model calls: spans the agent writes between its calls (tools, annotations) change no seed", async () => {
    const twoCalls = async (spansBetween: number): Promise<number[][]> => {
      const { store, server, rollouts } = await setup(1, seeded);
      try {
        const { rid, aid } = rollouts[0];
        const first = await ask(server, rid, aid);
        for (let k = 0; k < spansBetween; k++) {
          const seq = await store.getNextSpanSequenceId(rid, aid);
          await store.addSpan(spanFromAttributes({ rollout_id: rid, attempt_id: aid, sequence_id: seq, name: "tool.call" }));
        }
        return [first, await ask(server, rid, aid)];
      } finally {
        await server.stop();
      }
    };
    const quiet = await twoCalls(0);
    const busy = await twoCalls(3);
    expect(busy).toEqual(quiet);
    expect(quiet[1]).not.toEqual(quiet[0]);
  });

  it("give concurrent calls of one attempt distinct samples", async () => {
    const { server, rollouts } = await setup(1, seeded);
    try {
      const { rid, aid } = rollouts[0];
      const answers = await Promise.all([0, 1, 2, 3].map(() => ask(server, rid, aid)));
      expect(new Set(answers.map((t) => t.join(","))).size).toBe(4);
    } finally {
      await server.stop();
    }
  });

  it("draw from the policy's stream, in arrival order, for a rollout without a sampling_seed", async () => {
    const forward = await sampleInOrder([0, 1, 2, 3], () => null);
    const backward = await sampleInOrder([3, 2, 1, 0], () => null);
    expect(backward[0][0]).toEqual(forward[3][0]);
    expect(backward[3][0]).toEqual(forward[0][0]);
  });

  it("leave an explicit seed in charge, and refuse a sampling_seed that is not a 32-bit unsigned integer", async () => {
    const { server, rollouts } = await setup(2, (i) => (i === 0 ? seeded(0) : { [SAMPLING_SEED_KEY]: -1 }));
    try {
      const [a, b] = rollouts;
      const explicit = await ask(server, a.rid, a.aid, { seed: 42 });
      const unrouted = new OpenAI({ baseURL: server.asResource().endpoint, apiKey: "unused", maxRetries: 0 });
      const res = await unrouted.chat.completions.create({
        model: "m",
        messages: [{ role: "user", content: "2+3=" }],
        max_tokens: 8,
        temperature: 1,
        seed: 42,
      });
      expect((res as unknown as WithIds).choices[0].token_ids).toEqual(explicit);
      await expect(ask(server, b.rid, b.aid)).rejects.toMatchObject({ status: 400, message: expect.stringMatching(/sampling_seed/) });
    } finally {
      await server.stop();
    }
  });
});

describe("mixSeeds", () => {
  it("depends on every word and on their order", () => {
    const base = mixSeeds(1, 2, 3);
    expect(mixSeeds(1, 2, 3)).toBe(base);
    expect(new Set([base, mixSeeds(1, 2, 4), mixSeeds(0, 2, 3), mixSeeds(3, 2, 1), mixSeeds(1, 2)]).size).toBe(5);
    expect(Number.isInteger(base) && base >= 0 && base < 2 ** 32).toBe(true);
  });
});

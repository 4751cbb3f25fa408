import { describe, expect, it } from "vitest";
import { parseModelConfig } from "../../src/model/config.ts";
import { generate, logProbOf, sampleToken, topLogProbs } from "../../src/model/generate.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { forward, sequenceInput } from "../../src/model/reference/model.ts";
import { byteTokenizer, TOKENIZER_VOCAB_SIZE } from "../../src/model/tokenizer.ts";
import { CpuGenerationEngine, referenceGenerationEngine } from "../../src/cpu/generation.ts";
import { favouredModel } from "./favoured-token.ts";

const config = parseModelConfig({
  vocab_size: 13,
  d_model: 16,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 20,
  max_seq_len: 24,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: false,
});
// Weights larger than the init so the distributions are far from uniform.
const params = initParams(config, 3).map((x) => x * 20);

/** Greedy decoding the slow way: the full forward over the whole sequence for every new token. */
function naiveGreedy(prompt: number[], n: number): { tokens: number[]; logprobs: number[] } {
  const seq = [...prompt];
  const logprobs: number[] = [];
  for (let i = 0; i < n; i++) {
    const L = seq.length;
    const out = forward(config, params, {
      n: 1,
      inputIds: Int32Array.from(seq),
      attentionMask: new Int32Array(L).fill(1),
      positionIds: Int32Array.from({ length: L }, (_, j) => j),
    });
    const row = out.logits.subarray((L - 1) * 13, L * 13);
    let best = 0;
    for (let j = 1; j < 13; j++) if (row[j] > row[best]) best = j;
    seq.push(best);
    const lse = Math.log(row.reduce((a, z) => a + Math.exp(z), 0));
    logprobs.push(row[best] - lse);
  }
  return { tokens: seq.slice(prompt.length), logprobs };
}

describe("CPU generation with a KV cache", () => {
  it("greedy decoding equals recomputing the full forward for every token", () => {
    const prompt = [1, 5, 7, 2];
    const r = generate(config, params, prompt, { maxTokens: 12, temperature: 0, stop: [] });
    const naive = naiveGreedy(prompt, 12);
    expect(r.tokens).toEqual(naive.tokens);
    expect(new Set(r.tokens).size).toBeGreaterThan(1);
    r.logprobs.forEach((lp, i) => expect(lp).toBeCloseTo(naive.logprobs[i], 4));
    expect(r.finishReason).toBe("length");
  });

  it("stops at a stop token (kept in the output) and never exceeds max_seq_len", () => {
    const prompt = [3, 4];
    const free = generate(config, params, prompt, { maxTokens: 100, temperature: 0, stop: [] });
    expect(prompt.length + free.tokens.length).toBe(config.max_seq_len);
    const stopAt = free.tokens[2];
    const first = free.tokens.indexOf(stopAt);
    const r = generate(config, params, prompt, { maxTokens: 100, temperature: 0, stop: [stopAt] });
    expect(r.finishReason).toBe("stop");
    expect(r.tokens).toEqual(free.tokens.slice(0, first + 1));
  });

  it("sampling is reproducible per seed; top_p near 0 is greedy", () => {
    const prompt = [2, 9];
    const a = generate(config, params, prompt, { maxTokens: 10, temperature: 1.5, seed: 7, stop: [] });
    const b = generate(config, params, prompt, { maxTokens: 10, temperature: 1.5, seed: 7, stop: [] });
    const c = generate(config, params, prompt, { maxTokens: 10, temperature: 1.5, seed: 8, stop: [] });
    expect(a.tokens).toEqual(b.tokens);
    expect(c.tokens).not.toEqual(a.tokens);
    const nucleus = generate(config, params, prompt, { maxTokens: 10, temperature: 1, topP: 1e-9, seed: 7, stop: [] });
    expect(nucleus.tokens).toEqual(generate(config, params, prompt, { maxTokens: 10, temperature: 0, stop: [] }).tokens);
  });

  it("sampleToken draws from softmax(logits / T) restricted to the top-p nucleus", () => {
    const logits = [2, 1, 0, -1];
    const rng = new Rng(1);
    const counts = [0, 0, 0, 0];
    const n = 40_000;
    for (let i = 0; i < n; i++) counts[sampleToken(logits, { temperature: 2 }, rng)]++;
    const e = logits.map((z) => Math.exp(z / 2));
    const s = e.reduce((a, b) => a + b);
    counts.forEach((c, j) => expect(c / n).toBeCloseTo(e[j] / s, 1.5));
    // probabilities at T=1: .644 .237 .087 .032 -> top_p 0.8 keeps the first two
    const kept = new Set<number>();
    for (let i = 0; i < 2000; i++) kept.add(sampleToken(logits, { temperature: 1, topP: 0.8 }, rng));
    expect([...kept].sort()).toEqual([0, 1]);
    expect(() => sampleToken(logits, { topP: 0 }, rng)).toThrow(/top_p/);
  });

  it("sampleToken and logProbOf leave out the ids at or above vocabLimit", () => {
    const logits = [0, 1, 0.5, 9];
    const rng = new Rng(2);
    expect(sampleToken(logits, { temperature: 0 }, rng)).toBe(3);
    expect(sampleToken(logits, { temperature: 0, vocabLimit: 3 }, rng)).toBe(1);
    const drawn = new Set<number>();
    for (let i = 0; i < 2000; i++) drawn.add(sampleToken(logits, { temperature: 3, vocabLimit: 3 }, rng));
    expect([...drawn].sort()).toEqual([0, 1, 2]);
    // normalised over the allowed ids: they sum to 1 on their own
    const mass = [0, 1, 2].reduce((a, j) => a + Math.exp(logProbOf(logits, j, 3)), 0);
    expect(mass).toBeCloseTo(1, 12);
    expect(logProbOf(logits, 1, 3)).toBeCloseTo(1 - Math.log(1 + Math.E + Math.exp(0.5)), 12);
    // a limit past the logits is no limit
    expect(sampleToken(logits, { temperature: 0, vocabLimit: 100 }, rng)).toBe(3);
    expect(() => sampleToken(logits, { vocabLimit: 0 }, rng)).toThrow(/vocabLimit/);
    expect(() => logProbOf(logits, 0, 2.5)).toThrow(/vocabLimit/);
  });
});

describe("a model padded past its tokenizer's ids", () => {
  const padded = TOKENIZER_VOCAB_SIZE - 1; // the presets' one row the byte tokenizer has no id for
  const { config: tiny, params: favoured } = favouredModel(padded);
  const prompt = [257, 72, 105, 10];

  it("is the case for the presets", () => {
    expect(tiny.vocab_size).toBe(byteTokenizer.vocabSize + 1);
  });

  it("makes that id by far the most likely, and generate never yields it under vocabLimit (greedy and sampled)", () => {
    const unlimited = generate(tiny, favoured, prompt, { maxTokens: 6, temperature: 1, seed: 1, stop: [] });
    expect(unlimited.tokens).toEqual(Array(6).fill(padded));
    for (const temperature of [0, 1, 2]) {
      for (const seed of [0, 1, 2]) {
        const out = generate(tiny, favoured, prompt, { maxTokens: 12, temperature, seed, stop: [], vocabLimit: padded });
        expect(out.tokens).toHaveLength(12);
        expect(out.tokens.every((t) => t < padded)).toBe(true);
        expect(out.logprobs.every((lp) => Number.isFinite(lp) && lp <= 0)).toBe(true);
      }
    }
  });

  it("the CPU engines sample below the tokenizer's vocabSize, on the Wasm and the plain-TS ops", async () => {
    const wasm = new CpuGenerationEngine({ threads: 1 });
    try {
      for (const engine of [wasm, referenceGenerationEngine]) {
        const requests = [0, 1, 2].map((seed) => ({ prompt, maxTokens: 10, temperature: seed === 0 ? 0 : 1.5, seed, stopTokenIds: [] }));
        const out = await engine.generate(tiny, favoured, requests, byteTokenizer);
        for (const g of out) {
          expect(g.tokenIds).toHaveLength(10);
          expect(g.tokenIds.every((t) => t < byteTokenizer.vocabSize)).toBe(true);
        }
      }
    } finally {
      wasm.close();
    }
  });
});

describe("the likeliest alternatives of each token (top_logprobs)", () => {
  /** The oracle: every id below the limit sorted by logit (lower id first on ties), log-softmax in float64. */
  function bruteTop(row: ArrayLike<number>, k: number, limit = row.length) {
    const ids = Array.from({ length: limit }, (_, j) => j).sort((a, b) => row[b] - row[a] || a - b);
    const lse = Math.log(ids.reduce((a, j) => a + Math.exp(row[j]), 0));
    return ids.slice(0, k).map((id) => ({ id, logprob: row[id] - lse }));
  }

  it("topLogProbs equals sorting the whole row, ties and vocabLimit included, on random rows", () => {
    const rng = new Rng(11);
    for (let trial = 0; trial < 200; trial++) {
      const V = 1 + Math.floor(rng.uniform() * 60);
      // coarse values so that ties are common
      const row = Float32Array.from({ length: V }, () => Math.round((rng.uniform() - 0.5) * 8) / 2);
      const k = Math.floor(rng.uniform() * 24);
      const limit = trial % 3 === 0 ? Math.max(1, Math.floor(rng.uniform() * V)) : undefined;
      const got = topLogProbs(row, k, limit);
      const want = bruteTop(row, k, limit ?? V);
      expect(got.map((a) => a.id)).toEqual(want.map((a) => a.id));
      got.forEach((a, i) => expect(a.logprob).toBeCloseTo(want[i].logprob, 5));
      // the same distribution as the sampled token's log-prob
      for (const a of got) expect(a.logprob).toBe(logProbOf(row, a.id, limit));
    }
    expect(() => topLogProbs([1, 2], -1)).toThrow(/k must be a non-negative integer/);
  });

  it("generate reports, with each greedy token, the top k of the full forward's logits at its position", () => {
    const prompt = [1, 5, 2];
    const out = generate(config, params, prompt, { maxTokens: 6, temperature: 0, stop: [], topLogprobs: 4 });
    expect(out.alternatives).toHaveLength(out.tokens.length);
    const seq = [...prompt];
    out.tokens.forEach((token, i) => {
      const L = seq.length;
      const full = forward(config, params, sequenceInput(seq));
      const want = bruteTop(full.logits.subarray((L - 1) * 13, L * 13), 4);
      expect(out.alternatives![i].map((a) => a.id)).toEqual(want.map((a) => a.id));
      out.alternatives![i].forEach((a, j) => expect(a.logprob).toBeCloseTo(want[j].logprob, 4));
      // greedy: the token is the likeliest, with its own log-prob
      expect(out.alternatives![i][0]).toEqual({ id: token, logprob: out.logprobs[i] });
      seq.push(token);
    });
    expect(generate(config, params, prompt, { maxTokens: 3, temperature: 0 }).alternatives).toBeUndefined();
  });

  it("the CPU engines return them per request, cut with the tokens at a stop string, and refuse more than 20", async () => {
    const wasm = new CpuGenerationEngine({ threads: 1 });
    try {
      for (const engine of [wasm, referenceGenerationEngine]) {
        const [sampled, plain] = await engine.generate(config, params, [
          { prompt: [1, 5, 2], maxTokens: 8, temperature: 1, seed: 4, stopTokenIds: [], topLogprobs: 3 },
          { prompt: [1, 5, 2], maxTokens: 8, temperature: 1, seed: 4, stopTokenIds: [] },
        ]);
        expect(plain.topLogprobs).toBeUndefined();
        expect(sampled.tokenIds).toEqual(plain.tokenIds);
        expect(sampled.topLogprobs).toHaveLength(sampled.tokenIds.length);
        sampled.topLogprobs!.forEach((alts, i) => {
          expect(alts).toHaveLength(3);
          expect(alts.map((a) => a.logprob)).toEqual([...alts.map((a) => a.logprob)].sort((a, b) => b - a));
          // a sampled token either is among them with the same log-prob, or is less likely than all three
          const own = alts.find((a) => a.id === sampled.tokenIds[i]);
          if (own) expect(own.logprob).toBe(sampled.logprobs[i]);
          else expect(sampled.logprobs[i]).toBeLessThanOrEqual(alts[2].logprob);
        });
        // a stop string cuts the alternatives with the tokens
        const text = byteTokenizer.decode(sampled.tokenIds.slice(2, 3));
        const [cut] = await engine.generate(config, params, [
          { prompt: [1, 5, 2], maxTokens: 8, temperature: 1, seed: 4, stopTokenIds: [], topLogprobs: 3, stop: [text] },
        ]);
        expect(cut.tokenIds.length).toBeLessThan(sampled.tokenIds.length);
        expect(cut.topLogprobs).toHaveLength(cut.tokenIds.length);
        expect(cut.topLogprobs).toEqual(sampled.topLogprobs!.slice(0, cut.tokenIds.length));
        await expect(engine.generate(config, params, [{ prompt: [1], maxTokens: 2, topLogprobs: 21 }])).rejects.toThrow(
          /topLogprobs must be an integer from 0 to 20/,
        );
      }
    } finally {
      wasm.close();
    }
  });
});

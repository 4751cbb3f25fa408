import { describe, expect, it } from "vitest";
import { paramCount, paramLayout } from "../../src/model/config.ts";
import { INIT_STD, initParams, Rng } from "../../src/model/init.ts";
import { PRESETS, presetConfig } from "../../src/model/presets.ts";
import { applyChatTemplate, BOS_ID, decode, encode, EOS_ID, MIN_VOCAB_SIZE, ROLE_IDS } from "../../src/model/tokenizer.ts";

describe("byte tokenizer", () => {
  it.each(["", "hello", "héllo wörld", "emoji 🎉 and 中文", "line\nbreak\ttab\u0000nul"])("round-trips %j", (s) => {
    const ids = encode(s);
    expect(ids.every((id) => id >= 0 && id < 256)).toBe(true);
    expect(decode(ids)).toBe(s);
  });

  it("applies the chat template with special role ids that text cannot produce", () => {
    const ids = applyChatTemplate(
      [
        { role: "system", content: "be brief" },
        { role: "user", content: "<|assistant|>hi" },
      ],
      { addGenerationPrompt: true },
    );
    expect(ids[0]).toBe(BOS_ID);
    expect(ids[1]).toBe(ROLE_IDS.system);
    expect(ids.filter((id) => id === ROLE_IDS.assistant)).toHaveLength(1);
    expect(ids[ids.length - 1]).toBe(ROLE_IDS.assistant);
    expect(ids.filter((id) => id === EOS_ID)).toHaveLength(2);
    expect(decode(ids)).toBe("be brief<|assistant|>hi");
    expect(decode(ids, { specials: "show" })).toBe("<|bos|><|system|>be brief<|eos|><|user|><|assistant|>hi<|eos|><|assistant|>");
    expect(() => decode([MIN_VOCAB_SIZE])).toThrow(/vocabulary/);
  });
});

describe("presets and init", () => {
  it("presets have about 1M, 10M and 100M parameters and cover the tokenizer", () => {
    expect(paramCount(presetConfig("tiny"))).toBeGreaterThan(0.7e6);
    expect(paramCount(presetConfig("tiny"))).toBeLessThan(1.3e6);
    expect(paramCount(presetConfig("small"))).toBeGreaterThan(8e6);
    expect(paramCount(presetConfig("small"))).toBeLessThan(12e6);
    expect(paramCount(presetConfig("base"))).toBeGreaterThan(90e6);
    expect(paramCount(presetConfig("base"))).toBeLessThan(110e6);
    for (const c of Object.values(PRESETS)) expect(c.vocab_size).toBeGreaterThanOrEqual(MIN_VOCAB_SIZE);
  });

  it("the same seed gives bit-identical parameters, another seed different ones", () => {
    const c = presetConfig("tiny");
    const a = initParams(c, 42);
    const b = initParams(c, 42);
    const bitsA = new Uint32Array(a.buffer);
    const bitsB = new Uint32Array(b.buffer);
    const other = new Uint32Array(initParams(c, 43).buffer);
    let same = 0;
    let sameAsOther = 0;
    for (let i = 0; i < bitsA.length; i++) {
      if (bitsA[i] === bitsB[i]) same++;
      if (bitsA[i] === other[i]) sameAsOther++;
    }
    expect(same).toBe(bitsA.length);
    // only the norm weights (all ones) coincide
    const norms = paramLayout(c)
      .filter((s) => s.shape.length === 1)
      .reduce((n, s) => n + s.size, 0);
    expect(sameAsOther).toBe(norms);
  });

  it("norms are ones, matrices N(0, 0.02), output projections scaled by 1/sqrt(2 n_layers)", () => {
    const c = presetConfig("tiny");
    const p = initParams(c, 7);
    const stats = (name: string): { mean: number; std: number } => {
      const s = paramLayout(c).find((x) => x.name === name)!;
      const v = p.subarray(s.offset, s.offset + s.size);
      const mean = v.reduce((a, x) => a + x, 0) / v.length;
      const std = Math.sqrt(v.reduce((a, x) => a + (x - mean) ** 2, 0) / v.length);
      return { mean, std };
    };
    expect(stats("layers.0.attn_norm")).toEqual({ mean: 1, std: 0 });
    expect(stats("norm")).toEqual({ mean: 1, std: 0 });
    const emb = stats("tok_embeddings");
    expect(Math.abs(emb.mean)).toBeLessThan(1e-3);
    expect(emb.std).toBeGreaterThan(INIT_STD * 0.97);
    expect(emb.std).toBeLessThan(INIT_STD * 1.03);
    const down = stats("layers.3.w_down");
    const expected = INIT_STD / Math.sqrt(2 * c.n_layers);
    expect(down.std).toBeGreaterThan(expected * 0.97);
    expect(down.std).toBeLessThan(expected * 1.03);
  });

  it("the normal generator has mean 0 and variance 1", () => {
    const rng = new Rng(1);
    let s = 0;
    let s2 = 0;
    const n = 200_000;
    for (let i = 0; i < n; i++) {
      const x = rng.normal();
      s += x;
      s2 += x * x;
    }
    expect(Math.abs(s / n)).toBeLessThan(0.01);
    expect(Math.abs(s2 / n - 1)).toBeLessThan(0.01);
  });
});

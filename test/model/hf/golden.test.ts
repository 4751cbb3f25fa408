// Tiny random checkpoints in Hugging Face format for each architecture, written by an independent
// numpy implementation of HF's forward (test/fixtures/hf/make_fixtures.py, run by hand): our loader
// and reference engine must reproduce its logits and greedy tokens.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { generate } from "../../../src/model/generate.ts";
import { loadPretrained } from "../../../src/model/hf/index.ts";
import { forward, sequenceInput } from "../../../src/model/reference/model.ts";

const FIXTURES = "test/fixtures/hf";
const CASES = ["llama-tied-llama3", "llama-untied-gqa-sharded", "qwen2-bias-tied", "qwen3-qknorm-headdim"];

interface Golden {
  ids: number[];
  logits: number[][];
  prompt: number[];
  greedy: number[];
}

describe("Hugging Face checkpoints against an independent implementation", () => {
  it.each(CASES)("%s: logits at every position within 1e-4, greedy tokens equal", async (name) => {
    const dir = `${FIXTURES}/${name}`;
    const golden = JSON.parse(readFileSync(`${dir}/golden.json`, "utf8")) as Golden;
    const model = await loadPretrained(dir);
    const out = forward(model.config, model.weights, sequenceInput(golden.ids));
    const V = model.config.vocab_size;
    let worst = 0;
    golden.logits.forEach((row, t) => row.forEach((v, j) => (worst = Math.max(worst, Math.abs(out.logits[t * V + j] - v)))));
    expect(worst).toBeLessThan(1e-4);
    const g = generate(model.config, model.weights, golden.prompt, { maxTokens: golden.greedy.length, temperature: 0, stop: [] });
    expect(g.tokens).toEqual(golden.greedy);
  });

  it("reads the architecture features and generation defaults from the files", async () => {
    const qwen3 = await loadPretrained(`${FIXTURES}/qwen3-qknorm-headdim`);
    expect(qwen3.architecture).toBe("Qwen3ForCausalLM");
    expect(qwen3.config).toMatchObject({ head_dim: 12, qk_norm: true, d_model: 32, n_heads: 4, n_kv_heads: 2, tie_embeddings: false });
    expect(qwen3.generation).toEqual({ eosTokenIds: [119, 117], bosTokenId: 118, padTokenId: null, temperature: 0.7, topP: 0.8, topK: 20 });
    expect(qwen3.tokenizer).toBeNull();
    const qwen2 = await loadPretrained(`${FIXTURES}/qwen2-bias-tied`, { maxSeqLen: 32, name: "q2" });
    expect(qwen2.config).toMatchObject({ qkv_bias: true, tie_embeddings: true, max_seq_len: 32 });
    expect(qwen2.name).toBe("q2");
    expect(qwen2.weights.lm_head).toBeUndefined();
    const llama = await loadPretrained(`${FIXTURES}/llama-tied-llama3`);
    expect(llama.config.rope_scaling).toEqual({
      rope_type: "llama3",
      factor: 8,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 16,
    });
    expect(llama.name).toBe("llama-tied-llama3");
  });
});

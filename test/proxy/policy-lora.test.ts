/**
 * A ModelPolicy serving a LoRA adapter on top of its base: generations equal the merged model's, and
 * `update` swaps only the adapter (a zero adapter gives the base back), without touching the base.
 */
import { describe, expect, it } from "vitest";
import { initLora, initParams, loraLayout, mergeLora, presetConfig, type LoraConfig } from "../../src/model/index.ts";
import { Rng } from "../../src/model/init.ts";
import { ModelPolicy } from "../../src/proxy/index.ts";

const config = { ...presetConfig("tiny"), max_seq_len: 64 };
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

const request = { prompt: [1, 40, 41, 42, 43], maxTokens: 12, temperature: 0 };

describe("ModelPolicy with a LoRA adapter", () => {
  it("generates what the merged model generates, and update swaps the adapter only", async () => {
    const adapter = randomAdapter(1);
    const policy = new ModelPolicy({ model: "m", config, params: base, lora: { config: lora, params: adapter } });
    const merged = new ModelPolicy({ model: "m", config, params: mergeLora(config, base, { config: lora, params: adapter }) });
    const plain = new ModelPolicy({ model: "m", config, params: base });
    const [withAdapter] = await policy.generate([request]);
    const [fromMerged] = await merged.generate([request]);
    const [fromBase] = await plain.generate([request]);
    expect(withAdapter.tokenIds).toEqual(fromMerged.tokenIds);
    for (let i = 0; i < withAdapter.logprobs.length; i++) expect(withAdapter.logprobs[i]).toBeCloseTo(fromMerged.logprobs[i], 4);
    expect(withAdapter.tokenIds).not.toEqual(fromBase.tokenIds);

    adapter.fill(0); // the policy holds its own copy: the caller changing its array changes nothing
    expect((await policy.generate([request]))[0].tokenIds).toEqual(withAdapter.tokenIds);

    policy.update(initLora(config, lora, 2)); // B = 0: the base again
    expect(policy.version).toBe(1);
    expect((await policy.generate([request]))[0].tokenIds).toEqual(fromBase.tokenIds);
    expect(() => policy.update(new Float32Array(3))).toThrow(/adapter/);
    expect(policy.version).toBe(1);
  });
});

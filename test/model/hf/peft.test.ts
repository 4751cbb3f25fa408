// LoRA adapters in PEFT's layout: an adapter written by an independent numpy implementation of PEFT's
// LoRA (test/fixtures/hf/make_fixtures.py) loads onto its Qwen3 base and reproduces its logits; our
// save → load round trip is exact; merging gives the adapted logits; bad adapters get typed errors.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { hfModelFiles, HfFormatError, loadPeftAdapter, loadPretrained, mergeLora, peftAdapterFiles } from "../../../src/model/hf/index.ts";
import { initLora, parseLoraConfig } from "../../../src/model/lora.ts";
import { forward, sequenceInput } from "../../../src/model/reference/model.ts";

const BASE = "test/fixtures/hf/qwen3-qknorm-headdim";
const ADAPTER = `${BASE}-lora`;

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

describe("PEFT adapters", () => {
  it("an adapter in PEFT's layout, from an independent implementation, gives its golden logits within 1e-4", async () => {
    const model = await loadPretrained(BASE);
    const adapter = await loadPeftAdapter(ADAPTER, model.config);
    expect(adapter.config).toEqual({ r: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "o_proj", "down_proj"] });
    const golden = JSON.parse(readFileSync(`${ADAPTER}/golden.json`, "utf8")) as { ids: number[]; logits: number[][] };
    const out = forward(model.config, model.weights, sequenceInput(golden.ids), { lora: adapter });
    expect(maxDiff(out.logits, golden.logits.flat())).toBeLessThan(1e-4);
    const plain = forward(model.config, model.weights, sequenceInput(golden.ids));
    expect(maxDiff(plain.logits, golden.logits.flat())).toBeGreaterThan(1e-2);
    // merged into the base: the same logits with no adapter
    const merged = mergeLora(model.config, model.weights, adapter);
    expect(maxDiff(forward(model.config, merged, sequenceInput(golden.ids)).logits, out.logits)).toBeLessThan(1e-5);
    // and the merged model written as an HF folder loads back to those logits
    const folder = hfModelFiles({ config: model.config, params: merged, dtype: "F32" });
    const reloaded = await loadPretrained(folder);
    expect(maxDiff(forward(reloaded.config, reloaded.weights, sequenceInput(golden.ids)).logits, out.logits)).toBeLessThan(1e-5);
  });

  it("save → load is exact, in PEFT's tensor names and config fields", async () => {
    const model = await loadPretrained(BASE);
    const config = parseLoraConfig({ r: 2, alpha: 5, targetModules: ["k_proj", "gate_proj", "up_proj"] });
    const params = initLora(model.config, config, 3);
    for (let i = 0; i < params.length; i++) params[i] += 0.01 * Math.sin(i);
    const files = peftAdapterFiles(model.config, { config, params }, { baseModel: "tiny-qwen3" });
    const cfg = JSON.parse(new TextDecoder().decode(files["adapter_config.json"]));
    expect(cfg).toMatchObject({
      peft_type: "LORA",
      r: 2,
      lora_alpha: 5,
      target_modules: ["k_proj", "gate_proj", "up_proj"],
      base_model_name_or_path: "tiny-qwen3",
    });
    const header = new TextDecoder().decode(files["adapter_model.safetensors"].subarray(8, 8 + 2000));
    expect(header).toContain('"base_model.model.model.layers.1.mlp.gate_proj.lora_A.weight":{"dtype":"F32","shape":[2,32]');
    expect(header).toContain('"base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight":{"dtype":"F32","shape":[24,2]');
    const back = await loadPeftAdapter(files, model.config);
    expect(back.config).toEqual(config);
    expect(Array.from(back.params)).toEqual(Array.from(params));
  });

  it("refuses adapters that do not fit the base or use features it cannot reproduce, naming file and field", async () => {
    const model = await loadPretrained(BASE);
    const good = peftAdapterFiles(model.config, {
      config: parseLoraConfig({ r: 2, alpha: 2, targetModules: ["q_proj"] }),
      params: initLora(model.config, parseLoraConfig({ r: 2, alpha: 2, targetModules: ["q_proj"] }), 1),
    });
    const withConfig = (patch: Record<string, unknown>): Record<string, Uint8Array> => {
      const cfg = { ...JSON.parse(new TextDecoder().decode(good["adapter_config.json"])), ...patch };
      return { ...good, "adapter_config.json": new TextEncoder().encode(JSON.stringify(cfg)) };
    };
    const fail = async (files: Record<string, Uint8Array>): Promise<HfFormatError> => {
      const e = await loadPeftAdapter(files, model.config).catch((err: unknown) => err);
      expect(e).toBeInstanceOf(HfFormatError);
      return e as HfFormatError;
    };
    expect((await fail(withConfig({ r: 3 }))).field).toBe("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    expect((await fail(withConfig({ target_modules: ["q_proj", "k_proj"] }))).message).toMatch(/k_proj\.lora_A\.weight\): missing tensor/);
    expect((await fail(withConfig({ target_modules: ["embed_tokens"] }))).field).toBe("target_modules");
    expect((await fail(withConfig({ target_modules: [] }))).file).toBe("adapter_config.json");
    expect((await fail(withConfig({ use_dora: true }))).field).toBe("use_dora");
    expect((await fail(withConfig({ peft_type: "IA3" }))).field).toBe("peft_type");
    expect((await fail(withConfig({ rank_pattern: { q_proj: 4 } }))).field).toBe("rank_pattern");
    // an adapter made for a different base: the shapes do not fit
    const other = await loadPretrained("test/fixtures/hf/llama-tied-llama3");
    const e = await loadPeftAdapter(good, other.config).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(HfFormatError);
    expect((e as Error).message).toMatch(/q_proj\.lora_B\.weight\): has shape \[48,2\], this base and r = 2 need \[32,2\]/);
  });
});

/**
 * The CPU columns of docs/parity.md's test matrix: every Hugging Face fixture (test/fixtures/hf, written by
 * an independent numpy implementation of HF's forward and of PEFT's LoRA) on every CPU engine: the plain-TS
 * reference, the Wasm ops op by op, and the Wasm fused decoder. Each gives the golden logits at every
 * position within 1e-4 (the whole-sequence forward, and a decoder's prefill then one step per token) and the
 * golden greedy tokens. The WebGPU column is test/gpu/hf-architectures.test.ts.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { instantiateCpuCore } from "../../src/cpu/kernels/index.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { CpuDecoder, generate } from "../../src/model/generate.ts";
import { loadPeftAdapter, loadPretrained, type PretrainedModel } from "../../src/model/hf/index.ts";
import type { LoraWeights } from "../../src/model/lora.ts";
import { opsWithout, referenceOps, type ModelOps } from "../../src/model/model-ops.ts";
import { forward, sequenceInput } from "../../src/model/reference/model.ts";

const HF = "test/fixtures/hf";

interface Golden {
  ids: number[];
  logits: number[][];
  prompt?: number[];
  greedy?: number[];
}

/** A fixture: its model, the adapter on top (the LoRA fixture), its golden outputs. */
const FIXTURES: [string, string, string | null][] = [
  ["llama-tied-llama3", "llama-tied-llama3", null],
  ["llama-untied-gqa-sharded", "llama-untied-gqa-sharded", null],
  ["qwen2-bias-tied", "qwen2-bias-tied", null],
  ["qwen3-qknorm-headdim", "qwen3-qknorm-headdim", null],
  ["qwen3-qknorm-headdim-lora", "qwen3-qknorm-headdim", "qwen3-qknorm-headdim-lora"],
];

/** An engine: its ops, and whether its decoder runs fused (one Wasm call per step). */
const ENGINES: [string, ModelOps, boolean][] = [
  ["reference", referenceOps, false],
  ["Wasm ops", opsWithout(new WasmOps(instantiateCpuCore()), "decodeStepper"), false],
  ["Wasm fused decoder", new WasmOps(instantiateCpuCore()), true],
];

function maxDiff(got: ArrayLike<number>, want: readonly number[]): number {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
  return worst;
}

async function load(base: string, adapterDir: string | null, fixture: string) {
  const model: PretrainedModel = await loadPretrained(`${HF}/${base}`);
  const lora: LoraWeights | undefined = adapterDir ? await loadPeftAdapter(`${HF}/${adapterDir}`, model.config) : undefined;
  const golden = JSON.parse(readFileSync(`${HF}/${fixture}/golden.json`, "utf8")) as Golden;
  return { model, lora, golden };
}

describe.each(FIXTURES)("%s", (fixture, base, adapterDir) => {
  describe.each(ENGINES)("on the %s", (_, ops, fused) => {
    it("the forward gives the golden logits at every position", async () => {
      const { model, lora, golden } = await load(base, adapterDir, fixture);
      const out = forward(model.config, model.weights, sequenceInput(golden.ids), { lora, ops });
      expect(maxDiff(out.logits, golden.logits.flat())).toBeLessThan(1e-4);
    });

    it("the KV-cached decoder gives them too: a prefill, then one step per token", async () => {
      const { model, lora, golden } = await load(base, adapterDir, fixture);
      const decoder = new CpuDecoder(model.config, model.weights, golden.ids.length, lora, ops);
      try {
        expect(decoder.fused).toBe(fused);
        const split = 5;
        expect(maxDiff(decoder.prefill(golden.ids.slice(0, split)), golden.logits[split - 1])).toBeLessThan(1e-4);
        for (let t = split; t < golden.ids.length; t++)
          expect(maxDiff(decoder.step(golden.ids[t]), golden.logits[t]), `position ${t}`).toBeLessThan(1e-4);
      } finally {
        decoder.dispose();
      }
    });

    // The LoRA fixture's golden file holds logits only (no greedy tokens): the case exists for the plain fixtures.
    if (adapterDir === null)
      it("greedy generation gives the golden tokens", async () => {
        const { model, golden } = await load(base, adapterDir, fixture);
        const out = generate(model.config, model.weights, golden.prompt!, {
          maxTokens: golden.greedy!.length,
          temperature: 0,
          stop: [],
          ops,
        });
        expect(out.tokens).toEqual(golden.greedy);
      });
  });
});

/** LoRA training checkpoints: PEFT adapter + AdamW state, written and read back exactly, refused when they do not fit. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  decodeLoraOptimizer,
  encodeLoraOptimizer,
  HfFormatError,
  initLora,
  loadLoraCheckpoint,
  loadPeftAdapter,
  loraParamCount,
  presetConfig,
  saveLoraCheckpoint,
  savePeftAdapter,
  type LoraConfig,
} from "../../../src/model/index.ts";
import { Rng } from "../../../src/model/init.ts";

const model = { ...presetConfig("tiny"), n_layers: 2 };
const lora: LoraConfig = { r: 4, alpha: 8, targetModules: ["q_proj", "up_proj"] };
const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

function randomArray(n: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: n }, () => rng.normal());
}

describe("LoRA checkpoints", () => {
  it("round-trips the adapter and the optimizer state exactly", async () => {
    const dir = await mkdtemp(join(tmpdir(), "lora-ckpt-"));
    dirs.push(dir);
    const n = loraParamCount(model, lora);
    const params = randomArray(n, 1);
    const optimizer = { step: 17, m: randomArray(n, 2), v: randomArray(n, 3).map(Math.abs) };
    await saveLoraCheckpoint(dir, model, { config: lora, params }, optimizer);
    const back = await loadLoraCheckpoint(dir, model);
    expect(back.adapter.config).toEqual(lora);
    expect(Array.from(back.adapter.params)).toEqual(Array.from(params));
    expect(back.optimizer?.step).toBe(17);
    expect(Array.from(back.optimizer?.m ?? [])).toEqual(Array.from(optimizer.m));
    expect(Array.from(back.optimizer?.v ?? [])).toEqual(Array.from(optimizer.v));
    // the folder is a plain PEFT adapter too
    expect(Array.from((await loadPeftAdapter(dir, model)).params)).toEqual(Array.from(params));
  });

  it("loads a PEFT folder without optimizer state", async () => {
    const dir = await mkdtemp(join(tmpdir(), "lora-peft-"));
    dirs.push(dir);
    await savePeftAdapter(dir, model, { config: lora, params: initLora(model, lora, 3) });
    const back = await loadLoraCheckpoint(dir, model);
    expect(back.optimizer).toBeUndefined();
  });

  it("refuses optimizer state of another adapter, naming the tensor", () => {
    const n = loraParamCount(model, lora);
    const bytes = encodeLoraOptimizer(model, lora, { step: 1, m: new Float32Array(n), v: new Float32Array(n) });
    const other: LoraConfig = { ...lora, targetModules: ["q_proj", "v_proj"] };
    expect(() => decodeLoraOptimizer(model, other, bytes)).toThrow(HfFormatError);
    expect(() => decodeLoraOptimizer(model, other, bytes)).toThrow(/m\.layers\.0\.wv\.lora_a/);
    expect(() => decodeLoraOptimizer(model, { ...lora, r: 8 }, bytes)).toThrow(/shape/);
    expect(() => encodeLoraOptimizer(model, lora, { step: 1, m: new Float32Array(3), v: new Float32Array(n) })).toThrow(/3 elements/);
  });
});

import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { batchFromTokens } from "../../src/model/batch.ts";
import { decodeModel, decodeOptimizer, encodeModel, encodeOptimizer, loadCheckpoint, saveCheckpoint } from "../../src/model/checkpoint.ts";
import { paramCount, paramLayout, parseModelConfig } from "../../src/model/config.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import { initParams } from "../../src/model/init.ts";
import { decodeSafetensors, encodeSafetensors, readSafetensorsHeader } from "../../src/model/safetensors.ts";
import { encode, PAD_ID, TOKENIZER_VOCAB_SIZE } from "../../src/model/tokenizer.ts";

const config = parseModelConfig({
  vocab_size: TOKENIZER_VOCAB_SIZE,
  d_model: 12,
  n_layers: 2,
  n_heads: 2,
  n_kv_heads: 1,
  d_ff: 20,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: false,
});

describe("safetensors", () => {
  it("writes the documented layout: u64 LE header length, JSON header padded to 8, F32 LE data", () => {
    const a = new Float32Array([1.5, -2, 3.25, 0.1]);
    const b = new Float32Array([7]);
    const bytes = encodeSafetensors(
      [
        { name: "a", shape: [2, 2], data: a },
        { name: "b", shape: [1], data: b },
      ],
      { note: "hi" },
    );
    const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    expect(n % 8).toBe(0);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
    expect(header).toEqual({
      __metadata__: { note: "hi" },
      a: { dtype: "F32", shape: [2, 2], data_offsets: [0, 16] },
      b: { dtype: "F32", shape: [1], data_offsets: [16, 20] },
    });
    expect(bytes.length).toBe(8 + n + 20);
    expect(new DataView(bytes.buffer).getFloat32(8 + n + 8, true)).toBe(3.25);
    const back = decodeSafetensors(bytes);
    expect(back.metadata).toEqual({ note: "hi" });
    expect(back.tensors.map((t) => t.name)).toEqual(["a", "b"]);
    expect(back.tensors[0].data).toEqual(a);
  });

  it("reads BF16, F16 and F64 tensors written by other tools", () => {
    const header = JSON.stringify({
      h: { dtype: "F16", shape: [2], data_offsets: [0, 4] },
      bf: { dtype: "BF16", shape: [1], data_offsets: [4, 6] },
      d: { dtype: "F64", shape: [1], data_offsets: [6, 14] },
    });
    const json = new TextEncoder().encode(header);
    const bytes = new Uint8Array(8 + json.length + 14);
    const dv = new DataView(bytes.buffer);
    dv.setBigUint64(0, BigInt(json.length), true);
    bytes.set(json, 8);
    const d0 = 8 + json.length;
    dv.setUint16(d0, 0x3c00, true); // 1.0
    dv.setUint16(d0 + 2, 0xc100, true); // -2.5
    dv.setUint16(d0 + 4, 0x4049, true); // bf16 of 3.140625
    dv.setFloat64(d0 + 6, 0.25, true);
    const t = decodeSafetensors(bytes).tensors;
    expect(Array.from(t[0].data)).toEqual([1, -2.5]);
    expect(t[1].data[0]).toBe(3.140625);
    expect(t[2].data[0]).toBe(0.25);
  });

  it("rejects truncated files and offsets that do not fit", () => {
    const bytes = encodeSafetensors([{ name: "a", shape: [3], data: new Float32Array(3) }]);
    expect(() => readSafetensorsHeader(bytes.subarray(0, bytes.length - 4))).toThrow(/data_offsets/);
    expect(() => readSafetensorsHeader(bytes.subarray(0, 4))).toThrow(/shorter/);
    expect(() => encodeSafetensors([{ name: "a", shape: [2], data: new Float32Array(3) }])).toThrow(/needs 2/);
  });
});

describe("checkpoints", () => {
  it("model bytes carry the config in __metadata__ and every tensor under its layout name", () => {
    const params = initParams(config, 9);
    const bytes = encodeModel(config, params, 7);
    const header = readSafetensorsHeader(bytes);
    expect(JSON.parse(header.metadata.config)).toEqual(config);
    expect(header.metadata.step).toBe("7");
    expect(Object.keys(header.tensors)).toEqual(paramLayout(config).map((s) => s.name));
    expect(header.tensors["layers.1.wk"].shape).toEqual([12, 6]);
    const back = decodeModel(bytes);
    expect(back.config).toEqual(config);
    expect(back.params).toEqual(params);
    expect(back.step).toBe(7);
  });

  it("optimizer bytes round-trip exactly", () => {
    const n = paramCount(config);
    const state = { step: 3, m: initParams(config, 1), v: Float32Array.from(initParams(config, 2), Math.abs) };
    const back = decodeOptimizer(config, encodeOptimizer(config, state));
    expect(back.step).toBe(3);
    expect(back.m).toEqual(state.m);
    expect(back.v).toEqual(state.v);
    expect(back.m.length).toBe(n);
    expect(() => decodeModel(encodeOptimizer(config, state))).toThrow(/config/);
  });

  it("save -> load -> continue training is bit-identical to uninterrupted training", async () => {
    const batch = batchFromTokens(
      [
        { prompt: encode("abc"), response: encode("de") },
        { prompt: encode("x"), response: encode("yz!") },
      ],
      { padId: PAD_ID },
    );
    const adv = new Float32Array([1, 1, 1, -1, -1, -1]);
    const options = { config, seed: 11, lr: 1e-3 };
    const straight = new CpuTrainer(options);
    const old = (await straight.logProbs(batch)).log_probs;
    for (let s = 0; s < 4; s++) await straight.policyStep(batch, adv, old);

    const first = new CpuTrainer(options);
    for (let s = 0; s < 2; s++) await first.policyStep(batch, adv, old);
    const dir = await mkdtemp(join(tmpdir(), "lts-ckpt-"));
    try {
      await saveCheckpoint(dir, await first.getState());
      expect((await readFile(join(dir, "model.safetensors"))).length).toBeGreaterThan(4 * paramCount(config));
      const loaded = await loadCheckpoint(dir);
      expect(loaded.optimizer?.step).toBe(2);
      const resumed = new CpuTrainer({ ...options, params: loaded.params, optimizer: loaded.optimizer });
      for (let s = 0; s < 2; s++) await resumed.policyStep(batch, adv, old);
      const a = await straight.getState();
      const b = await resumed.getState();
      expect(b.optimizer.step).toBe(4);
      expect(b.params).toEqual(a.params);
      expect(b.optimizer.m).toEqual(a.optimizer.m);
      expect(b.optimizer.v).toEqual(a.optimizer.v);
      // and the resumed weights really moved from the checkpoint
      expect(b.params).not.toEqual(loaded.params);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a checkpoint without optimizer state loads parameters only", async () => {
    const dir = await mkdtemp(join(tmpdir(), "lts-ckpt-"));
    try {
      await saveCheckpoint(dir, { config, params: initParams(config, 1) });
      const c = await loadCheckpoint(dir);
      expect(c.optimizer).toBeUndefined();
      expect(c.params).toEqual(initParams(config, 1));
      await expect(loadCheckpoint(dir, undefined, { optimizer: true })).rejects.toThrow();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

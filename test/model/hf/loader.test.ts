// loadPretrained's reading paths (folder, file map, sharded), the writer round trip, the export of our
// own checkpoints, and the typed errors for each way a folder can be wrong.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadCheckpoint } from "../../../src/model/checkpoint.ts";
import { paramLayout, parseModelConfig, type ModelConfig } from "../../../src/model/config.ts";
import { generate } from "../../../src/model/generate.ts";
import {
  exportHf,
  HfFormatError,
  hfModelFiles,
  loadPretrained,
  ModelFolderError,
  parseHfConfig,
  saveHfModel,
} from "../../../src/model/hf/index.ts";
import { TensorReader } from "../../../src/model/hf/tensor-reader.ts";
import { convertTensor, toBf16, toF16 } from "../../../src/model/hf/tensors.ts";
import type { FileReader } from "../../../src/platform/index.ts";
import { initParams } from "../../../src/model/init.ts";
import { forward, sequenceInput } from "../../../src/model/reference/model.ts";
import { applyChatTemplate, byteTokenizer, encode } from "../../../src/model/tokenizer.ts";

const tmp = mkdtempSync(join(tmpdir(), "hf-loader-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CONFIG: ModelConfig = parseModelConfig({
  vocab_size: 40,
  d_model: 16,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 24,
  max_seq_len: 32,
  rope_theta: 10000,
  norm_eps: 1e-6,
  tie_embeddings: false,
  qkv_bias: true,
});

function logitsOf(config: ModelConfig, params: Parameters<typeof forward>[1], ids: number[]): Float32Array {
  return forward(config, params as Float32Array, sequenceInput(ids)).logits as Float32Array;
}

/** The folder's files as a map, with some replaced or removed. */
function filesWith(changes: Record<string, string | Uint8Array | undefined>): Record<string, Uint8Array> {
  const base = hfModelFiles({ config: CONFIG, params: initParams(CONFIG, 1), dtype: "F32" });
  const out: Record<string, Uint8Array> = {};
  for (const [k, v] of Object.entries({ ...base, ...changes }))
    if (v !== undefined) out[k] = typeof v === "string" ? new TextEncoder().encode(v) : v;
  for (const [k, v] of Object.entries(changes)) if (v === undefined) delete out[k];
  return out;
}

async function loadError(files: Record<string, Uint8Array | string>): Promise<HfFormatError> {
  const bytes = Object.fromEntries(Object.entries(files).map(([k, v]) => [k, typeof v === "string" ? new TextEncoder().encode(v) : v]));
  const e = await loadPretrained(bytes).then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(HfFormatError);
  return e as HfFormatError;
}

describe("loadPretrained", () => {
  it.each(["F32", "BF16", "F16"] as const)(
    "writer → loader round trip in %s, from a folder and from a file map, sharded or not",
    async (dtype) => {
      const params = initParams(CONFIG, 2);
      const dir = join(tmp, `rt-${dtype}`);
      await saveHfModel(dir, { config: CONFIG, params, dtype, maxShardBytes: 4000 });
      const fromDir = await loadPretrained(dir);
      const fromMap = await loadPretrained(hfModelFiles({ config: CONFIG, params, dtype }));
      const round =
        dtype === "F32" ? (x: number) => x : dtype === "BF16" ? (x: number) => bf16Value(toBf16(x)) : (x: number) => f16Value(toF16(x));
      for (const s of paramLayout(CONFIG)) {
        const want = Float32Array.from(params.subarray(s.offset, s.offset + s.size), round);
        expect(Array.from(fromDir.weights[s.name]), s.name).toEqual(Array.from(want));
        expect(Array.from(fromMap.weights[s.name]), s.name).toEqual(Array.from(want));
      }
      expect(readFileSync(join(dir, "model.safetensors.index.json"), "utf8")).toContain("model-00002-of-");
      const generation = { eosTokenIds: [3, 4], bosTokenId: 1, padTokenId: 0, temperature: 0.6, topP: 0.9, topK: 20 };
      expect((await loadPretrained(hfModelFiles({ config: CONFIG, params, dtype, generation }))).generation).toEqual(generation);
    },
  );

  it("exports our own checkpoint (the calc demo's) as an HF Llama folder that loads back to the same logits and chat ids", async () => {
    const ckpt = await loadCheckpoint("examples/calc/checkpoint-sft", undefined, { optimizer: false });
    const dir = join(tmp, "calc-hf");
    await exportHf(dir, ckpt);
    const config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    expect(config.architectures).toEqual(["LlamaForCausalLM"]);
    const model = await loadPretrained(dir);
    const ids = applyChatTemplate([{ role: "user", content: "12+30=" }], { addGenerationPrompt: true });
    const a = logitsOf(ckpt.config, ckpt.params, ids);
    const b = logitsOf(model.config, model.weights, ids);
    expect(Array.from(b)).toEqual(Array.from(a));
    const tok = model.tokenizer;
    expect(tok).not.toBeNull();
    expect(tok!.applyChatTemplate([{ role: "user", content: "12+30=" }], { addGenerationPrompt: true })).toEqual(ids);
    expect(tok!.eosTokenIds).toEqual(byteTokenizer.eosTokenIds);
    const g1 = generate(ckpt.config, ckpt.params, ids, { maxTokens: 6, temperature: 0 });
    const g2 = generate(model.config, model.weights, ids, { maxTokens: 6, temperature: 0, stop: [...tok!.eosTokenIds] });
    expect(g2.tokens).toEqual(g1.tokens);
    expect(tok!.decode(g2.tokens)).toBe(byteTokenizer.decode(g1.tokens));
    expect(tok!.encode("héllo ✓")).toEqual(encode("héllo ✓"));
  });

  it("names the file and field of every kind of bad input", async () => {
    const cfg = JSON.parse(new TextDecoder().decode(filesWith({})["config.json"]));
    let e = await loadError(filesWith({ "config.json": JSON.stringify({ ...cfg, architectures: ["GPT2LMHeadModel"] }) }));
    expect([e.file, e.field]).toEqual(["config.json", "architectures"]);
    expect(e.message).toMatch(/GPT2LMHeadModel/);
    e = await loadError(filesWith({ "config.json": JSON.stringify({ ...cfg, rope_scaling: { rope_type: "yarn", factor: 4 } }) }));
    expect([e.file, e.field]).toEqual(["config.json", "rope_scaling.rope_type"]);
    e = await loadError(filesWith({ "config.json": JSON.stringify({ ...cfg, hidden_size: undefined }) }));
    expect([e.file, e.field]).toEqual(["config.json", "hidden_size"]);
    e = await loadError(filesWith({ "config.json": "{not json" }));
    expect(e.file).toBe("config.json");
    e = await loadError(filesWith({ "config.json": undefined }));
    expect(e.file).toBe("config.json");
    // a tensor missing, of the wrong shape, of an unsupported dtype
    const shard = (header: Record<string, unknown>, data: Uint8Array): Uint8Array => {
      const json = new TextEncoder().encode(JSON.stringify(header));
      const out = new Uint8Array(8 + json.length + data.length);
      new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
      out.set(json, 8);
      out.set(data, 8 + json.length);
      return out;
    };
    const small = {
      ...cfg,
      num_hidden_layers: 1,
      vocab_size: 4,
      hidden_size: 4,
      head_dim: 2,
      num_attention_heads: 2,
      num_key_value_heads: 2,
      intermediate_size: 2,
    };
    e = await loadError({ "config.json": JSON.stringify(small), "model.safetensors": shard({}, new Uint8Array(0)) });
    expect([e.file, e.field]).toEqual(["model.safetensors", "model.embed_tokens.weight"]);
    e = await loadError({
      "config.json": JSON.stringify(small),
      "model.safetensors": shard(
        { "model.embed_tokens.weight": { dtype: "F32", shape: [4, 3], data_offsets: [0, 48] } },
        new Uint8Array(48),
      ),
    });
    expect([e.file, e.field]).toEqual(["model.safetensors", "model.embed_tokens.weight"]);
    expect(e.message).toMatch(/\[4,3\].*\[4,4\]/);
    e = await loadError({
      "config.json": JSON.stringify(small),
      "model.safetensors": shard(
        { "model.embed_tokens.weight": { dtype: "I8", shape: [4, 4], data_offsets: [0, 16] } },
        new Uint8Array(16),
      ),
    });
    expect([e.file, e.field]).toEqual(["model.safetensors", "model.embed_tokens.weight.dtype"]);
    e = await loadError({
      "config.json": JSON.stringify(small),
      "model.safetensors": shard(
        { "model.embed_tokens.weight": { dtype: "F32", shape: [4, 4], data_offsets: [0, 64] } },
        new Uint8Array(10),
      ),
    });
    expect(e.file).toBe("model.safetensors");
    expect(e.message).toMatch(/data_offsets/);
    // a shard listed in the index but absent
    const sharded = hfModelFiles({ config: CONFIG, params: initParams(CONFIG, 1), dtype: "F32", maxShardBytes: 4000 });
    const second = Object.keys(sharded).find((n) => n.startsWith("model-00002-of-"));
    expect(second).toBeDefined();
    const { [second as string]: _gone, ...rest } = sharded;
    e = await loadError(rest);
    expect([e.file, e.field]).toEqual(["model.safetensors.index.json", "weight_map"]);
    expect(e.message).toContain(second);
  });

  it("fills absent config.json fields with each architecture's own defaults (as HF's config classes)", () => {
    const shape = { hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4, intermediate_size: 96, vocab_size: 50 };
    const llama = parseHfConfig({ architectures: ["LlamaForCausalLM"], ...shape }).config;
    expect(llama).toMatchObject({ n_kv_heads: 4, max_seq_len: 2048, rope_theta: 10000, norm_eps: 1e-6, tie_embeddings: false });
    expect(llama.head_dim ?? 64 / 4).toBe(16);
    const qwen2 = parseHfConfig({ architectures: ["Qwen2ForCausalLM"], ...shape }).config;
    expect(qwen2).toMatchObject({ qkv_bias: true, max_seq_len: 32768, tie_embeddings: false });
    expect(qwen2.head_dim ?? 64 / 4).toBe(16);
    // Qwen3Config's head_dim is 128 unless given, whatever hidden_size / num_attention_heads is.
    expect(parseHfConfig({ architectures: ["Qwen3ForCausalLM"], ...shape }).config).toMatchObject({ head_dim: 128, qk_norm: true });
    expect(parseHfConfig({ architectures: ["Qwen3ForCausalLM"], ...shape, head_dim: 16 }).config.head_dim).toBe(16);
  });

  it("reads from a folder path with a clear error when it does not exist", async () => {
    const e = await loadPretrained(join(tmp, "nowhere")).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(ModelFolderError);
    expect((e as Error).message).toMatch(/nowhere does not exist: expected a Hugging Face model folder holding config\.json/);
  });

  it("lists tensors the model does not use instead of dropping them silently", async () => {
    const dir = join(tmp, "extra");
    await saveHfModel(dir, {
      config: { ...CONFIG, tie_embeddings: true },
      params: initParams({ ...CONFIG, tie_embeddings: true }, 3),
      dtype: "F32",
    });
    const m = await loadPretrained(dir);
    expect(m.ignoredTensors).toEqual([]);
    // An untied checkpoint read as tied: lm_head.weight is in the file but unused, and reported.
    const config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    await saveHfModel(dir, { config: CONFIG, params: initParams(CONFIG, 3), dtype: "F32" });
    writeFileSync(join(dir, "config.json"), JSON.stringify(config));
    expect((await loadPretrained(dir)).ignoredTensors).toEqual(["lm_head.weight"]);
  });
});

describe("tensor conversion", () => {
  it("transposes [out, in] into [in, out] for every dtype and odd shapes", () => {
    const rows = 67;
    const cols = 131;
    const values = Float32Array.from({ length: rows * cols }, (_, i) => ((i * 7919) % 1000) / 250 - 2);
    const enc = {
      F32: new Uint8Array(values.buffer.slice(0)),
      BF16: new Uint8Array(Uint16Array.from(values, toBf16).buffer),
      F16: new Uint8Array(Uint16Array.from(values, toF16).buffer),
    };
    for (const dtype of ["F32", "BF16", "F16"] as const) {
      const t = convertTensor(enc[dtype], dtype, rows, cols, true);
      const plain = convertTensor(enc[dtype], dtype, rows, cols, false);
      for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) expect(t[j * rows + i]).toBe(plain[i * cols + j]);
      for (let k = 0; k < values.length; k++) expect(Math.abs(plain[k] - values[k])).toBeLessThanOrEqual(Math.abs(values[k]) * 2 ** -7);
    }
  });

  it("reads tensors in pieces straight into their outputs: the same values as a whole-tensor conversion", async () => {
    // A file whose tensor starts at an odd byte offset, read with pieces far smaller than the tensor so
    // every band and chunk boundary (and the ragged last one) is crossed.
    const shapes: Array<[number, number]> = [
      [67, 131],
      [9, 5],
      [1, 300],
      [300, 1],
      [16, 8],
    ];
    for (const dtype of ["F32", "BF16", "F16"] as const)
      for (const [rows, cols] of shapes) {
        const values = Float32Array.from({ length: rows * cols }, (_, i) => ((i * 7919) % 1000) / 250 - 2);
        const raw =
          dtype === "F32"
            ? new Uint8Array(values.buffer.slice(0))
            : new Uint8Array(Uint16Array.from(values, dtype === "BF16" ? toBf16 : toF16).buffer);
        const file = new Uint8Array(3 + raw.length + 5);
        file.set(raw, 3);
        for (const chunkBytes of [1, 40, 1000, 1 << 20]) {
          const reader = new TensorReader(chunkBytes);
          for (const transpose of [false, true]) {
            const at = { reader: bytesFile(file), file: "model.safetensors", name: "t", offset: 3 };
            const got = await reader.read(at, dtype, rows, cols, transpose);
            const want = convertTensor(raw, dtype, rows, cols, transpose);
            expect(Array.from(got), `${dtype} ${rows}x${cols} chunk ${chunkBytes} transpose ${transpose}`).toEqual(Array.from(want));
            // into a caller's array: a view in the middle of a larger buffer, its neighbours untouched
            const big = new Float32Array(rows * cols + 3).fill(7);
            await reader.read(at, dtype, rows, cols, transpose, big.subarray(1, 1 + rows * cols));
            expect(Array.from(big.subarray(1, 1 + rows * cols))).toEqual(Array.from(want));
            expect([big[0], big[rows * cols + 1], big[rows * cols + 2]]).toEqual([7, 7, 7]);
          }
        }
      }
  });

  it("a file cut inside a tensor, or a failing read, is an error naming the file and tensor", async () => {
    const cut = { reader: bytesFile(new Uint8Array(100)), file: "model-00001-of-00002.safetensors", name: "model.norm.weight", offset: 0 };
    const e = await new TensorReader(16).read(cut, "F32", 1, 40, false).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(HfFormatError);
    expect([(e as HfFormatError).file, (e as HfFormatError).field]).toEqual(["model-00001-of-00002.safetensors", "model.norm.weight"]);
    const failing: FileReader = {
      ...bytesFile(new Uint8Array(4096)),
      readInto: async (offset, target) => {
        if (offset >= 1024) throw new Error("disk gone");
        return target.length;
      },
    };
    // 2 KiB read in 1 KiB pieces (bands of 8 rows of 128 bytes): the second read fails, plain or transposed.
    for (const transpose of [false, true])
      await expect(new TensorReader(1024).read({ ...cut, reader: failing }, "BF16", 16, 64, transpose)).rejects.toThrow("disk gone");
  });

  it("rounds to bf16 and f16 to nearest even, with infinities, NaN and subnormals", () => {
    expect(bf16Value(toBf16(1 + 2 ** -8))).toBe(1); // tie → even
    expect(bf16Value(toBf16(1 + 3 * 2 ** -8))).toBe(1 + 2 ** -6);
    expect(Number.isNaN(bf16Value(toBf16(Number.NaN)))).toBe(true);
    expect(f16Value(toF16(65520))).toBe(Number.POSITIVE_INFINITY);
    expect(f16Value(toF16(65504))).toBe(65504);
    expect(f16Value(toF16(2 ** -24))).toBe(2 ** -24);
    expect(f16Value(toF16(-(2 ** -20)))).toBe(-(2 ** -20));
    expect(f16Value(toF16(1 + 2 ** -11))).toBe(1);
    expect(f16Value(toF16(0.1))).toBeCloseTo(0.0999755859375, 12);
  });
});

function bytesFile(bytes: Uint8Array): FileReader {
  return {
    size: bytes.length,
    read: async (offset, length) => bytes.slice(offset, offset + length),
    async readInto(offset, target) {
      const part = bytes.subarray(offset, offset + target.length);
      target.set(part);
      return part.length;
    },
    close: async () => undefined,
  };
}

function bf16Value(bits: number): number {
  return new Float32Array(new Uint32Array([bits << 16]).buffer)[0];
}

function f16Value(bits: number): number {
  return convertTensor(new Uint8Array(new Uint16Array([bits]).buffer), "F16", 1, 1, false)[0];
}

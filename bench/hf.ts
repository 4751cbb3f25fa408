/**
 * Hugging Face checkpoints: writes random BF16 checkpoints shaped like SmolLM2-135M and Qwen2.5-0.5B,
 * then, each in a fresh child process, loads them with `loadPretrained` (twice: the first read warms the
 * page cache, the second is timed) and runs prefill and greedy decode on the CPU engine and, when a
 * WebGPU adapter exists, on the WebGPU engine. Prints load GB/s (goal >= 1), peak RSS per parameter,
 * GPU bytes per parameter and tokens/s. The PyTorch eager baseline for a GPU machine is
 * bench/torch/hf_generate.py (same shapes).
 * Run: `npm run bench -- hf` or `npx tsx bench/hf.ts [--shape smollm2-135m|qwen2.5-0.5b] [--prompt N] [--decode N] [--no-gpu] [--dir D]`.
 */
import { SHAPES } from "./_shapes.ts";
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, rmSync, statSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { paramLayout, type ModelConfig } from "../src/model/config.ts";
import { toHfConfig } from "../src/model/hf/config.ts";
import { hfTensorName } from "../src/model/hf/tensors.ts";
import type { Tokenizer } from "../src/model/tokenizer-api.ts";

const argv = process.argv.slice(2);
const arg = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};

/** Random BF16 tensors written straight to the file, one at a time (no f32 copy of the model). */
function writeCheckpoint(dir: string, config: ModelConfig): number {
  mkdirSync(dir, { recursive: true });
  const layout = paramLayout(config);
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let offset = 0;
  const entries = layout.map((s) => {
    const { hf, transpose } = hfTensorName(s.name);
    const shape = transpose ? [s.shape[1], s.shape[0]] : s.shape;
    header[hf] = { dtype: "BF16", shape, data_offsets: [offset, offset + 2 * s.size] };
    offset += 2 * s.size;
    return { size: s.size, norm: s.shape.length === 1 };
  });
  let json = Buffer.from(JSON.stringify(header));
  json = Buffer.concat([json, Buffer.alloc((8 - (json.length % 8)) % 8, 0x20)]);
  const fd = openSync(join(dir, "model.safetensors"), "w");
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, len);
  writeSync(fd, json);
  let state = 0x9e3779b9;
  const chunk = new Uint16Array(1 << 20);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (const e of entries) {
    for (let done = 0; done < e.size; done += chunk.length) {
      const n = Math.min(chunk.length, e.size - done);
      for (let i = 0; i < n; i++) {
        state ^= state << 13;
        state ^= state >>> 17;
        state ^= state << 5;
        f[0] = e.norm ? 1 : ((state >>> 0) / 2 ** 32 - 0.5) * 0.07; // uniform with std ~0.02
        chunk[i] = u[0] >>> 16;
      }
      writeSync(fd, new Uint8Array(chunk.buffer, 0, 2 * n));
    }
  }
  closeSync(fd);
  const cfg = toHfConfig(config, { torchDtype: "bfloat16", eosTokenIds: [config.vocab_size - 1] });
  writeSync(openSync(join(dir, "config.json"), "w"), JSON.stringify(cfg));
  return statSync(join(dir, "model.safetensors")).size;
}

/** The measuring child: load (warm, then timed), peak RSS, prefill and decode on each engine. */
async function child(dir: string, prompt: number, decode: number, gpu: boolean): Promise<void> {
  const { loadPretrained } = await import("../src/model/hf/index.ts");
  const { cpuGenerationEngine } = await import("../src/cpu/generation.ts");
  const file = statSync(join(dir, "model.safetensors")).size;
  await loadPretrained(dir); // warms the page cache; its memory is dropped before the timed load
  (globalThis as { gc?: () => void }).gc?.();
  const t0 = performance.now();
  const model = await loadPretrained(dir);
  const loadS = (performance.now() - t0) / 1000;
  const params = Object.values(model.weights).reduce((a, w) => a + w.length, 0);
  const rss = process.resourceUsage().maxRSS * 1024;
  // The floor: first-touching fresh float32 memory of the same tensor sizes (the page faults every load
  // pays; on a virtual machine they dominate).
  const f0 = performance.now();
  const touched = Object.values(model.weights).map((w) => new Float32Array(w.length).fill(1));
  const floorS = (performance.now() - f0) / 1000;
  console.log(
    `  load: ${(file / 1e9).toFixed(2)} GB of BF16 in ${loadS.toFixed(2)} s = ${(file / 1e9 / loadS).toFixed(2)} GB/s (goal >= 1); floor (allocating and first-touching the f32 weights alone) ${floorS.toFixed(2)} s = ${(file / 1e9 / floorS).toFixed(2)} GB/s; loader / floor time ${(loadS / floorS).toFixed(2)}`,
  );
  console.log(
    `  memory: ${(params / 1e6).toFixed(1)}M params; peak RSS ${(rss / 1e9).toFixed(2)} GB = ${(rss / params).toFixed(2)} bytes/param (the f32 weights are 4)`,
  );
  touched.length = 0;
  const ids = Array.from({ length: prompt }, (_, i) => (i * 7919 + 13) % model.config.vocab_size);
  // A random checkpoint has no tokenizer files: ids stand for text (decoding is not what is measured).
  const idsTokenizer: Tokenizer = {
    vocabSize: model.config.vocab_size,
    eosTokenIds: [],
    bosTokenId: null,
    padTokenId: null,
    toolCallFormat: null,
    encode: () => [],
    decode: (t) => Array.from(t).join(" "),
    isSpecial: () => false,
    applyChatTemplate: () => [],
  };
  const run = async (label: string, engine: typeof cpuGenerationEngine): Promise<number[]> => {
    // warm-up (the GPU engine uploads the weights on its first call), then prefill alone: one new token;
    // then prefill + decode
    await engine.generate(
      model.config,
      model.weights,
      [{ prompt: ids.slice(0, 2), maxTokens: 1, temperature: 0, stopTokenIds: [] }],
      idsTokenizer,
    );
    const p0 = performance.now();
    await engine.generate(model.config, model.weights, [{ prompt: ids, maxTokens: 1, temperature: 0, stopTokenIds: [] }], idsTokenizer);
    const prefillS = (performance.now() - p0) / 1000;
    const d0 = performance.now();
    const [g] = await engine.generate(
      model.config,
      model.weights,
      [{ prompt: ids, maxTokens: decode + 1, temperature: 0, stopTokenIds: [] }],
      idsTokenizer,
    );
    const decodeS = (performance.now() - d0) / 1000 - prefillS;
    console.log(
      `  ${label}: prefill ${prompt} tokens ${(prompt / prefillS).toFixed(1)} tok/s; decode ${decode} tokens ${(decode / decodeS).toFixed(2)} tok/s`,
    );
    return g.tokenIds;
  };
  const cpuTokens = await run("cpu engine", cpuGenerationEngine);
  if (!gpu) return;
  const { probeGpu, describeAdapter } = await import("../src/gpu/device.ts");
  const probe = await probeGpu();
  if (!probe.ok) {
    console.log(`  webgpu: none (${probe.reason.split("\n")[0]})`);
    return;
  }
  const { GpuGenerationEngine } = await import("../src/gpu/generation.ts");
  for (const weightFormat of ["f32", "bf16"] as const) {
    try {
      const engine = await GpuGenerationEngine.create({ weightFormat });
      if (weightFormat === "f32") console.log(`  webgpu adapter: ${describeAdapter(engine.ctx.handle!.report)}`);
      const gpuTokens = await run(`webgpu engine, ${weightFormat} weights`, engine);
      const same = gpuTokens.join(",") === cpuTokens.join(",");
      console.log(
        `  webgpu ${weightFormat}: ${(engine.weightBytes / params).toFixed(2)} GPU bytes/param; greedy tokens ${same ? "equal" : "differ from"} the CPU engine's${weightFormat === "f32" ? "" : " (its weights are not rounded)"}`,
      );
      engine.destroy();
      engine.ctx.destroy();
    } catch (e) {
      console.log(`  webgpu ${weightFormat}: ${(e as Error).message.split("\n")[0]}`);
    }
  }
}

async function main(): Promise<void> {
  const prompt = Number(arg("--prompt") ?? 32);
  const decode = Number(arg("--decode") ?? 8);
  const gpu = !argv.includes("--no-gpu");
  if (arg("--child") !== undefined) return child(arg("--child")!, prompt, decode, gpu);
  const names = arg("--shape") ? [arg("--shape")!] : Object.keys(SHAPES);
  const root = arg("--dir") ?? join(tmpdir(), "lightning-bench-hf");
  for (const name of names) {
    const config = SHAPES[name];
    if (!config) throw new Error(`unknown shape ${name}; one of ${Object.keys(SHAPES).join(", ")}`);
    const dir = join(root, name);
    const w0 = performance.now();
    const bytes = existsSync(join(dir, "model.safetensors")) ? statSync(join(dir, "model.safetensors")).size : writeCheckpoint(dir, config);
    console.log(
      `hf ${name}: ${(bytes / 1e9).toFixed(2)} GB checkpoint ready in ${((performance.now() - w0) / 1000).toFixed(1)} s at ${dir}`,
    );
    const r = spawnSync(
      process.execPath,
      [
        "--expose-gc",
        "--import",
        "tsx",
        fileURLToPath(import.meta.url),
        "--child",
        dir,
        "--prompt",
        String(prompt),
        "--decode",
        String(decode),
        ...(gpu ? [] : ["--no-gpu"]),
      ],
      { stdio: "inherit" },
    );
    if (r.status !== 0) process.exitCode = 1;
  }
  if (arg("--dir") === undefined && !argv.includes("--keep")) rmSync(root, { recursive: true, force: true });
}

await main();

/**
 * Generation throughput: new tokens per second of batched greedy generation for each preset.
 * CPU rows: the CPU engine (src/model/generate.ts, KV cache) beside the same generation without a cache
 * (the whole sequence through the reference forward for every new token).
 * GPU rows, on the WebGPU adapter found (its name is printed): the KV-cached GPU engine
 * (src/gpu/decode.ts) beside the GPU engine's uncached path (the whole left-padded prefix through the
 * model every step, the engine before the cache existed), and against the CPU engine of this run.
 * Every engine must produce the CPU engine's tokens (checked), so the ratios compare equal work.
 * Run: `npm run bench -- generate` (or `npx tsx bench/generate.ts [--base] [--preset NAME] [--no-cpu] [--gpu-batch N] [--tokens N]`).
 */
import { forward, initParams, paramCount, presetConfig, type ModelConfig, type PresetName } from "../src/model/index.ts";
import type { Generation, GenerationEngine, GenerationRequest } from "../src/model/generation.ts";
import { cpuGenerationEngine } from "../src/cpu/generation.ts";
import type { GpuGenerationEngine } from "../src/gpu/generation.ts";

const argv = process.argv.slice(2);
const withBase = argv.includes("--base");
const withCpu = !argv.includes("--no-cpu");
function numArg(name: string): number | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : undefined;
}

/** The GPU engines (cached and uncached, one device) and the adapter's name, or why there are none. */
async function gpuEngines(): Promise<{ line: string; cached?: GpuGenerationEngine; uncached?: GpuGenerationEngine }> {
  try {
    const { probeGpu, describeAdapter } = await import("../src/gpu/device.ts");
    const p = await probeGpu();
    if (!p.ok) return { line: `none (${p.reason.split("\n")[0]})` };
    const { GpuGenerationEngine } = await import("../src/gpu/generation.ts");
    const cached = await GpuGenerationEngine.create();
    const uncached = new (GpuGenerationEngine as typeof GpuGenerationEngine)(cached.ctx, { kvCache: false });
    return { line: describeAdapter(cached.ctx.handle!.report), cached, uncached };
  } catch (e) {
    return { line: `none (${(e as Error).message})` };
  }
}

/** Greedy continuation recomputing the full forward for every token (no cache). */
function greedyNoCache(config: ModelConfig, params: Float32Array, prompt: number[], maxTokens: number): number[] {
  const seq = prompt.slice();
  const out: number[] = [];
  for (let i = 0; i < maxTokens; i++) {
    const L = seq.length;
    const r = forward(config, params, {
      n: 1,
      inputIds: Int32Array.from(seq),
      attentionMask: new Int32Array(L).fill(1),
      positionIds: Int32Array.from({ length: L }, (_, j) => j),
    });
    const logits = r.logits.subarray((L - 1) * config.vocab_size, L * config.vocab_size);
    let best = 0;
    for (let j = 1; j < config.vocab_size; j++) if (logits[j] > logits[best]) best = j;
    out.push(best);
    seq.push(best);
  }
  return out;
}

const SHAPES: Record<PresetName, { batch: number; prompt: number; tokens: number }> = {
  tiny: { batch: 8, prompt: 32, tokens: 32 },
  small: { batch: 2, prompt: 32, tokens: 16 },
  base: { batch: 1, prompt: 16, tokens: 4 },
};

async function timed<T>(run: () => Promise<T> | T): Promise<{ value: T; sec: number }> {
  const t = performance.now();
  const value = await run();
  return { value, sec: (performance.now() - t) / 1000 };
}

/** Tokens per second of one engine on `requests` after a short warm-up (pipeline compilation, uploads). */
async function measure(
  engine: GenerationEngine,
  config: ModelConfig,
  params: Float32Array,
  requests: GenerationRequest[],
): Promise<{ out: Generation[]; tps: number }> {
  await engine.generate(
    config,
    params,
    requests.map((r) => ({ ...r, maxTokens: 2 })),
  );
  const { value, sec } = await timed(() => engine.generate(config, params, requests));
  return { out: value, tps: value.reduce((a, g) => a + g.tokenIds.length, 0) / sec };
}

const gpu = await gpuEngines();
console.log(`adapter: ${gpu.line}`);
const fmt = (x: number): string => x.toFixed(1);
const tokensOf = (gs: Generation[]): string => gs.map((g) => g.tokenIds.join()).join("|");
const only = argv.includes("--preset") ? [argv[argv.indexOf("--preset") + 1] as PresetName] : null;
for (const preset of only ?? (["tiny", "small", ...(withBase ? ["base"] : [])] as PresetName[])) {
  const config = presetConfig(preset);
  const params = initParams(config, 1);
  const s = { ...SHAPES[preset] };
  s.tokens = numArg("--tokens") ?? s.tokens;
  const prompts = (batch: number): number[][] =>
    Array.from({ length: batch }, (_, i) => Array.from({ length: s.prompt }, (_, j) => (i * 31 + j * 7) % 256));
  // stop ids none: every row generates exactly `tokens` tokens
  const requestsFor = (ps: number[][]): GenerationRequest[] =>
    ps.map((prompt) => ({ prompt, maxTokens: s.tokens, temperature: 0, stopTokenIds: [] }));
  const head = `preset=${preset} params=${paramCount(config)} prompt=${s.prompt} new=${s.tokens}`;
  let cpuTps = NaN;
  let cpuTokens: string | null = null;
  if (withCpu) {
    const requests = requestsFor(prompts(s.batch));
    const cached = await timed(() => cpuGenerationEngine.generate(config, params, requests));
    const base = await timed(() => prompts(s.batch).map((p) => greedyNoCache(config, params, p, s.tokens)));
    const same = cached.value.every((g, i) => g.tokenIds.join() === base.value[i].join());
    cpuTps = (s.batch * s.tokens) / cached.sec;
    cpuTokens = tokensOf(cached.value);
    console.log(
      `generate cpu ${head} batch=${s.batch} kv-cache tokens/s=${fmt(cpuTps)} no-cache tokens/s=${fmt((s.batch * s.tokens) / base.sec)} ` +
        `ratio=${(base.sec / cached.sec).toFixed(2)}x same_tokens=${same}`,
    );
    if (!same) process.exitCode = 1;
  }
  if (gpu.cached && gpu.uncached) {
    const batch = numArg("--gpu-batch") ?? s.batch;
    const requests = requestsFor(prompts(batch));
    const cached = await measure(gpu.cached, config, params, requests);
    const uncached = await measure(gpu.uncached, config, params, requests);
    // the CPU engine's tokens are the oracle when it ran on the same batch
    const same =
      tokensOf(cached.out) === tokensOf(uncached.out) && (cpuTokens === null || batch !== s.batch || cpuTokens === tokensOf(cached.out));
    console.log(
      `generate webgpu ${head} batch=${batch} kv-cache tokens/s=${fmt(cached.tps)} no-cache tokens/s=${fmt(uncached.tps)} ` +
        `ratio=${(cached.tps / uncached.tps).toFixed(2)}x vs_cpu_kv=${Number.isNaN(cpuTps) ? "n/a" : `${(cached.tps / cpuTps).toFixed(2)}x`} same_tokens=${same}`,
    );
    if (!same) process.exitCode = 1;
  }
}
gpu.cached?.destroy();
gpu.uncached?.destroy();
gpu.cached?.ctx.destroy();

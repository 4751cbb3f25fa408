/**
 * Generation throughput: new tokens per second of batched greedy generation for each preset, with the
 * engine the policy server uses here (src/proxy/generation.ts), beside a baseline measured in the same
 * run: the same generation without a KV cache (the whole sequence through the reference forward for
 * every new token). Both produce the same tokens (checked), so the ratio is the cache's gain.
 * The WebGPU adapter found is reported; generation runs on the CPU engine until a GPU engine exists.
 * Run: `npm run bench -- generate` (or `npx tsx bench/generate.ts [--base]`).
 */
import { forward, initParams, paramCount, presetConfig, type ModelConfig, type PresetName } from "../src/model/index.ts";
import { cpuGenerationEngine } from "../src/proxy/generation.ts";

const withBase = process.argv.includes("--base");

async function adapterLine(): Promise<string> {
  try {
    const { probeGpu, describeAdapter } = await import("../src/gpu/device.ts");
    const p = await probeGpu();
    return p.ok ? describeAdapter(p.report) : `none (${p.reason.split("\n")[0]})`;
  } catch (e) {
    return `none (${(e as Error).message})`;
  }
}

/** Greedy continuation recomputing the full forward for every token (no cache). */
function greedyNoCache(config: ModelConfig, params: Float32Array, prompt: number[], maxTokens: number): number[] {
  const seq = prompt.slice();
  const out: number[] = [];
  for (let i = 0; i < maxTokens; i++) {
    const L = seq.length;
    const r = forward(config, params, { n: 1, inputIds: Int32Array.from(seq), attentionMask: new Int32Array(L).fill(1), positionIds: Int32Array.from({ length: L }, (_, j) => j) });
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

console.log(`adapter: ${await adapterLine()}; engine: ${cpuGenerationEngine.backend}`);
for (const preset of ["tiny", "small", ...(withBase ? ["base"] : [])] as PresetName[]) {
  const config = presetConfig(preset);
  const params = initParams(config, 1);
  const s = SHAPES[preset];
  const prompts = Array.from({ length: s.batch }, (_, i) => Array.from({ length: s.prompt }, (_, j) => (i * 31 + j * 7) % 256));
  // stop ids none: every row generates exactly `tokens` tokens
  const requests = prompts.map((prompt) => ({ prompt, maxTokens: s.tokens, temperature: 0, stopTokenIds: [] }));
  let t = performance.now();
  const cached = await cpuGenerationEngine.generate(config, params, requests);
  const cachedSec = (performance.now() - t) / 1000;
  t = performance.now();
  const base = prompts.map((p) => greedyNoCache(config, params, p, s.tokens));
  const baseSec = (performance.now() - t) / 1000;
  const same = cached.every((g, i) => g.tokenIds.join() === base[i].join());
  const n = s.batch * s.tokens;
  console.log(
    `generate preset=${preset} params=${paramCount(config)} batch=${s.batch} prompt=${s.prompt} new=${s.tokens} ` +
      `kv-cache tokens/s=${(n / cachedSec).toFixed(1)} no-cache tokens/s=${(n / baseSec).toFixed(1)} ratio=${(baseSec / cachedSec).toFixed(2)}x same_tokens=${same}`,
  );
  if (!same) process.exitCode = 1;
}

/**
 * The CPU engines end to end, same run: the plain-TS engine (`ops: "reference"`, what the CPU engine was
 * before the Wasm kernels became the default) against the default Wasm engine on 1 thread and on every
 * CPU. Policy step: `CpuTrainer.policyStep` on a GRPO-shaped batch (calc demo: 16 problems x 8 rollouts,
 * 16 prompt + 48 response tokens; `tiny` preset: 16 rows of 32 + 96), tokens/s = every token of the batch
 * (prompt and response) per second of step. Decode: `CpuGenerationEngine.generate`, 4 greedy requests of a
 * 16-token prompt and 48 new tokens, tokens/s = new tokens per second; plus the Wasm engine decoding op
 * by op (weights resident, no fused decode step) and with its weights and KV cache NOT resident (copied
 * per call, as before the engine kept them in Wasm memory).
 * Run: `npm run bench -- cpu-engine` (or `npx tsx bench/cpu-engine.ts`).
 */
import { loadavg } from "node:os";
import { CALC_CONFIG } from "../examples/calc/config.ts";
import { batchFromTokens } from "../src/model/batch.ts";
import { parseModelConfig, type ModelConfig } from "../src/model/config.ts";
import { paramViews, type ParamViews } from "../src/model/params.ts";
import { CpuPool } from "../src/cpu/pool.ts";
import { CpuTrainer } from "../src/cpu/trainer.ts";
import { initParams, Rng } from "../src/model/init.ts";
import { opsWithout, type ModelOps } from "../src/model/model-ops.ts";
import { presetConfig } from "../src/model/presets.ts";
import type { TokenBatch } from "../src/model/train-types.ts";
import { WasmOps } from "../src/cpu/wasm-ops.ts";
import { platform } from "../src/platform/index.ts";
import type { GenerationEngine, GenerationRequest } from "../src/model/generation.ts";
import { CpuGenerationEngine } from "../src/cpu/generation.ts";
import { generate } from "../src/model/generate.ts";

const loadAverage = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
const loadBefore = loadAverage();
const all = platform.cpuCount();

/** Best of `runs` after `warmups` (JIT tiers, Wasm tier-up): on a shared machine the minimum is the least
 * disturbed figure. */
async function best(f: () => Promise<unknown>, runs: number, warmups = 1): Promise<number> {
  for (let i = 0; i < warmups; i++) await f();
  let min = Infinity;
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await f();
    min = Math.min(min, performance.now() - t);
  }
  return min;
}

function grpoBatch(config: ModelConfig, rows: number, P: number, R: number): TokenBatch {
  const rng = new Rng(3);
  const tok = () => 1 + Math.floor(rng.uniform() * (config.vocab_size - 1));
  return batchFromTokens(
    Array.from({ length: rows }, () => ({ prompt: Array.from({ length: P }, tok), response: Array.from({ length: R }, tok) })),
    { padId: 0 },
  );
}

/** The Wasm engine with residency hidden: every op copies its weights in, the decoder's cache too. */
class CopyingEngine implements GenerationEngine {
  readonly backend = "cpu" as const;
  constructor(private readonly ops: ModelOps) {}
  async generate(config: ModelConfig, params: Float32Array, requests: readonly GenerationRequest[]) {
    return requests.map((r) => {
      const out = generate(config, params, r.prompt, { maxTokens: r.maxTokens, temperature: 0, stop: [], ops: this.ops });
      return { tokenIds: out.tokens, logprobs: out.logprobs, text: "", finishReason: out.finishReason };
    });
  }
}

/** The Wasm engine decoding op by op (no fused step), its weights resident as the engine keeps them. */
class PerOpEngine implements GenerationEngine {
  readonly backend = "cpu" as const;
  private from: Float32Array | null = null;
  private views: ParamViews = {};
  constructor(private readonly ops: ModelOps) {}
  async generate(config: ModelConfig, params: Float32Array, requests: readonly GenerationRequest[]) {
    if (this.from !== params) {
      this.ops.resident?.release();
      this.views = paramViews(config, params);
      this.ops.resident?.pin(Object.values(this.views));
      this.from = params;
    }
    return requests.map((r) => {
      const out = generate(config, this.views, r.prompt, { maxTokens: r.maxTokens, temperature: 0, stop: [], ops: this.ops });
      return { tokenIds: out.tokens, logprobs: out.logprobs, text: "", finishReason: out.finishReason };
    });
  }
}

const rows: string[][] = [
  [
    "model",
    "work",
    "TS engine",
    "Wasm 1 thr",
    "ratio",
    `Wasm ${all} thr`,
    "ratio",
    "Wasm 1 thr, op by op",
    "Wasm 1 thr, weights copied per call",
  ],
];
const pool1 = await CpuPool.create(1);
const copying = opsWithout(new WasmOps(pool1), "resident");
const poolPerOp = await CpuPool.create(1);
const perOp = opsWithout(new WasmOps(poolPerOp), "decodeStepper");
for (const [name, config, B, P, R] of [
  ["calc demo", CALC_CONFIG, 128, 16, 48],
  ["tiny preset", parseModelConfig(presetConfig("tiny")), 16, 32, 96],
] as const) {
  const batch = grpoBatch(config, B, P, R);
  const adv = new Float32Array(B * R).fill(0.5);
  const stepTokS: number[] = [];
  for (const [i, ops] of [{ ops: "reference" as const }, { threads: 1 }, { threads: all }].entries()) {
    const t = new CpuTrainer({ config, seed: 1, lr: 1e-5, ...ops });
    const old = (await t.logProbs(batch)).log_probs;
    const ms = await best(() => t.policyStep(batch, adv, old), i === 0 ? 1 : 3);
    stepTokS.push((B * (P + R) * 1000) / ms);
    t.close();
  }
  const params = initParams(config, 1);
  const requests: GenerationRequest[] = Array.from({ length: 4 }, (_, i) => ({
    prompt: Array.from({ length: 16 }, (_, j) => 1 + ((i * 31 + j * 7) % (config.vocab_size - 1))),
    maxTokens: 48,
    temperature: 0,
    stopTokenIds: [],
  }));
  const newTokens = requests.length * 48;
  const decTokS: number[] = [];
  const engines: GenerationEngine[] = [
    new CpuGenerationEngine({ ops: "reference" }),
    new CpuGenerationEngine({ threads: 1 }),
    new CpuGenerationEngine({ threads: all }),
    new PerOpEngine(perOp),
    new CopyingEngine(copying),
  ];
  for (const e of engines) {
    // a decode run takes milliseconds: enough of them that every engine runs JIT-compiled code
    const ms = await best(() => e.generate(config, params, requests), 10, 3);
    decTokS.push((newTokens * 1000) / ms);
    e.close?.();
  }
  const f = (x: number) => `${x.toFixed(0)} tok/s`;
  const r = (x: number, base: number) => `${(x / base).toFixed(1)}x`;
  rows.push([
    name,
    `policy step, ${B} x ${P}+${R} tokens`,
    f(stepTokS[0]),
    f(stepTokS[1]),
    r(stepTokS[1], stepTokS[0]),
    f(stepTokS[2]),
    r(stepTokS[2], stepTokS[0]),
    "",
    "",
  ]);
  rows.push([
    name,
    "decode, 4 x (16 prompt + 48 new)",
    f(decTokS[0]),
    f(decTokS[1]),
    r(decTokS[1], decTokS[0]),
    f(decTokS[2]),
    r(decTokS[2], decTokS[0]),
    `${f(decTokS[3])} (${r(decTokS[3], decTokS[0])})`,
    `${f(decTokS[4])} (${r(decTokS[4], decTokS[0])})`,
  ]);
}
pool1.close();
poolPerOp.close();

console.log(`${all} CPUs; load average before: ${loadBefore}, after: ${loadAverage()}`);
console.log([rows[0], rows[0].map(() => "---"), ...rows.slice(1)].map((x) => `| ${x.join(" | ")} |`).join("\n"));

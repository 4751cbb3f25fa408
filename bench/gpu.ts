/**
 * WebGPU engine figures on the adapter found here, each beside the CPU reference measured in the same run:
 * - matmul GFLOP/s by size (the tiled WGSL kernel vs src/model/reference/ops.ts matmul, up to 512);
 * - policyStep (PPO, token-mean, AdamW, clipping) response tokens/s per preset (tiny, small; base with
 *   `--base` or on a hardware adapter), vs the CPU trainer on the same batch (small: on a 1-row slice,
 *   because the plain-TS reference would take minutes; tokens/s is per token so it still compares).
 * The line format `policy_step preset=... n=... P=... R=... tokens/s=...` is also what
 * bench/torch/policy_step.py prints for the same shapes in PyTorch eager.
 * Run: `npm run bench -- gpu` (or `npx tsx bench/gpu.ts [--base]`).
 */
import { GpuContext } from "../src/gpu/context.ts";
import { describeAdapter, GpuUnavailableError } from "../src/gpu/device.ts";
import { matmul } from "../src/gpu/kernels/matmul.ts";
import { GpuPolicyTrainer } from "../src/gpu/trainer.ts";
import { CpuTrainer } from "../src/cpu/trainer.ts";
import { paramCount, type ModelConfig } from "../src/model/config.ts";
import { presetConfig, type PresetName } from "../src/model/presets.ts";
import { Rng } from "../src/model/init.ts";
import { sliceRows } from "../src/model/batch.ts";
import * as ops from "../src/model/reference/ops.ts";
import type { TokenBatch } from "../src/model/train-types.ts";

let ctx: GpuContext;
try {
  ctx = await GpuContext.create();
} catch (e) {
  if (!(e instanceof GpuUnavailableError)) throw e;
  console.log(`no WebGPU adapter here, nothing to measure: ${e.message}`);
  process.exit(0);
}
const report = ctx.handle!.report;
console.log(`adapter: ${describeAdapter(report)}`);
console.log(`tuning: ${JSON.stringify(ctx.tuning)}`);

const sync = (): Promise<void> => ctx.drain();

function randn(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.normal());
}

// ---- matmul GFLOP/s
{
  const rng = new Rng(1);
  const rows: string[][] = [["size", "GPU ms", "GPU GFLOP/s", "CPU ref ms", "CPU GFLOP/s", "ratio"]];
  for (const n of report.software ? [128, 256, 512, 1024] : [128, 256, 512, 1024, 2048, 4096]) {
    const a = randn(rng, n * n);
    const b = randn(rng, n * n);
    const [A, B, C] = [ctx.upload(a), ctx.upload(b), ctx.alloc(n * n)];
    const flop = 2 * n * n * n;
    matmul(ctx, A, B, C, { M: n, N: n, K: n });
    await sync();
    let reps = 1;
    let gpuMs = 0;
    for (;;) {
      const t0 = performance.now();
      for (let r = 0; r < reps; r++) matmul(ctx, A, B, C, { M: n, N: n, K: n });
      await sync();
      gpuMs = (performance.now() - t0) / reps;
      if (gpuMs * reps > 300 || reps >= 64) break;
      reps *= 4;
    }
    let cpuMs = NaN;
    if (n <= 512) {
      const t0 = performance.now();
      ops.matmul(a, b, { m: n, k: n, n });
      cpuMs = performance.now() - t0;
    }
    const gf = (ms: number): string => (Number.isFinite(ms) ? (flop / ms / 1e6).toFixed(2) : "-");
    rows.push([
      `${n}x${n}x${n}`,
      gpuMs.toFixed(2),
      gf(gpuMs),
      Number.isFinite(cpuMs) ? cpuMs.toFixed(1) : "-",
      gf(cpuMs),
      Number.isFinite(cpuMs) ? `${(cpuMs / gpuMs).toFixed(1)}x` : "-",
    ]);
    for (const x of [A, B, C]) x.destroy();
  }
  console.log("\nmatmul (f32, square)");
  console.table(rows.slice(1).map((r) => Object.fromEntries(r.map((v, i) => [rows[0][i], v]))));
}

// ---- policyStep tokens/s
function fullBatch(config: ModelConfig, n: number, P: number, R: number, rng: Rng): TokenBatch {
  const T = P + R;
  const inputIds = Int32Array.from({ length: n * T }, () => rng.nextU32() % config.vocab_size);
  const attentionMask = new Int32Array(n * T).fill(1);
  const positionIds = Int32Array.from({ length: n * T }, (_, i) => i % T);
  return { n, P, R, inputIds, attentionMask, positionIds };
}

type Shape = { n: number; P: number; R: number; micro: number };
/** Batch shapes per preset (bench/torch/policy_step.py uses the hardware ones). A software adapter
 * (lavapipe on a shared CPU) gets a quarter of the tokens so the run stays within minutes. */
const SHAPES: Record<PresetName, Shape> = {
  tiny: { n: 8, P: 32, R: 96, micro: 8 },
  small: { n: 8, P: 64, R: 192, micro: 4 },
  base: { n: 4, P: 128, R: 384, micro: 2 },
};
const SOFTWARE_SHAPES: Record<PresetName, Shape> = {
  tiny: { n: 4, P: 16, R: 48, micro: 4 },
  small: { n: 2, P: 32, R: 96, micro: 2 },
  base: { n: 1, P: 64, R: 192, micro: 1 },
};

/** FLOPs of one step: 6 x params x tokens for the matmuls (forward + backward) plus attention; as the torch script. */
function stepFlops(config: ModelConfig, s: Shape): number {
  const T = s.P + s.R;
  return 6 * paramCount(config) * s.n * T + 12 * config.n_layers * s.n * T * T * config.d_model;
}

async function gpuTokensPerSecond(config: ModelConfig, batch: TokenBatch, micro: number, steps: number): Promise<number> {
  const trainer = await GpuPolicyTrainer.create({ config, seed: 0, context: ctx, lr: 1e-5 });
  const old = (await trainer.logProbs(batch, { microBatchSize: micro })).log_probs;
  const adv = old.map((_, i) => (i % 2 === 0 ? 1 : -1));
  await trainer.policyStep(batch, adv, old, { microBatchSize: micro }); // warm-up: pipelines, workspace
  await sync();
  const t0 = performance.now();
  for (let s = 0; s < steps; s++) await trainer.policyStep(batch, adv, old, { microBatchSize: micro });
  await sync();
  const seconds = (performance.now() - t0) / 1000;
  trainer.destroy();
  return (steps * batch.n * batch.R) / seconds;
}

async function cpuTokensPerSecond(config: ModelConfig, batch: TokenBatch): Promise<number> {
  // the plain-TS ops, as in the published table (bench/cpu-engine.ts measures the default Wasm engine)
  const trainer = new CpuTrainer({ config, seed: 0, lr: 1e-5, ops: "reference" });
  const old = (await trainer.logProbs(batch)).log_probs;
  const adv = old.map((_, i) => (i % 2 === 0 ? 1 : -1));
  const t0 = performance.now();
  await trainer.policyStep(batch, adv, old);
  return (batch.n * batch.R) / ((performance.now() - t0) / 1000);
}

const presets: PresetName[] = ["tiny", "small"];
if (process.argv.includes("--base") || !report.software) presets.push("base");
console.log("\npolicyStep (PPO token-mean + grad clip + AdamW), response tokens per second");
for (const name of presets) {
  const config = presetConfig(name);
  const s = (report.software ? SOFTWARE_SHAPES : SHAPES)[name];
  const batch = fullBatch(config, s.n, s.P, s.R, new Rng(2));
  const steps = report.software ? 2 : 10;
  const gpu = await gpuTokensPerSecond(config, batch, s.micro, steps);
  console.log(
    `policy_step preset=${name} params=${paramCount(config)} n=${s.n} P=${s.P} R=${s.R} micro=${s.micro} backend=webgpu tokens/s=${gpu.toFixed(1)}`,
  );
  console.log(
    `  achieved ${((stepFlops(config, s) * (gpu / (s.n * s.R))) / 1e9).toFixed(2)} GFLOP/s (same estimate as bench/torch/policy_step.py)`,
  );
  if (name === "base") continue; // the CPU reference would take many minutes
  const cpuBatch = name === "tiny" ? batch : sliceRows(batch, 0, 1);
  const cpu = await cpuTokensPerSecond(config, cpuBatch);
  console.log(
    `policy_step preset=${name} params=${paramCount(config)} n=${cpuBatch.n} P=${s.P} R=${s.R} micro=${cpuBatch.n} backend=cpu-reference tokens/s=${cpu.toFixed(1)}`,
  );
  console.log(`  ratio webgpu / cpu-reference: ${(gpu / cpu).toFixed(2)}x`);
}
ctx.destroy();
process.exit(0);

/**
 * LoRA policy steps (PPO token-mean with a KL term against the base, grad clip, AdamW on the adapter alone)
 * on random checkpoints shaped like SmolLM2-135M and Qwen2.5-0.5B (their Hugging Face config numbers), r 16
 * on all seven projections. Per shape: response tokens/s on the CPU engine (a short batch: the plain-TS
 * reference is slow) and on WebGPU with the frozen base in float32 and bf16, with and without activation
 * checkpointing; for each WebGPU run, the device memory measured (`GpuContext.allocatedBytes`: every
 * storage buffer the context made) against the formula of docs/lora.md, term by term.
 * Run: `npm run bench -- lora` or `npx tsx bench/lora.ts [--shape smollm2-135m|qwen2.5-0.5b] [--layers N]
 * [--n 2 --P 8 --R 8] [--cpu-n 1] [--no-cpu] [--no-gpu] [--steps 1] [--long 2048]`.
 */
import { SHAPES } from "./_shapes.ts";
import { GpuContext } from "../src/gpu/context.ts";
import { describeAdapter, GpuUnavailableError } from "../src/gpu/device.ts";
import { METRIC_COLUMNS } from "../src/gpu/kernels/ppo-loss.ts";
import { SUMSQ_GROUPS } from "../src/gpu/kernels/reduce.ts";
import type { WeightFormat } from "../src/gpu/kernels/weights.ts";
import { GpuPolicyTrainer } from "../src/gpu/trainer.ts";
import { sliceRows } from "../src/model/batch.ts";
import { headDim, paramLayout, type ModelConfig } from "../src/model/config.ts";
import { CpuTrainer } from "../src/cpu/trainer.ts";
import { loraLayout, loraParamCount, parseLoraConfig, type LoraConfig } from "../src/model/lora.ts";
import type { ModelWeights } from "../src/model/params.ts";
import type { PolicyTrainer, TokenBatch } from "../src/model/train-types.ts";

const LORA = parseLoraConfig({
  r: 16,
  alpha: 32,
  targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
});

const argv = process.argv.slice(2);
const arg = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const num = (name: string, fallback: number): number => Number(arg(name) ?? fallback);

/** Random weights by tensor (uniform with std ~0.02, norms 1, biases 0), no single flat buffer. */
function randomWeights(config: ModelConfig, seed: number): ModelWeights {
  let state = seed >>> 0 || 0x9e3779b9;
  const out: ModelWeights = {};
  for (const s of paramLayout(config)) {
    const t = new Float32Array(s.size);
    if (s.name.endsWith("norm")) t.fill(1);
    else if (s.shape.length === 2)
      for (let i = 0; i < t.length; i++) {
        state ^= state << 13;
        state ^= state >>> 17;
        state ^= state << 5;
        t[i] = ((state >>> 0) / 2 ** 32 - 0.5) * 0.07;
      }
    out[s.name] = t;
  }
  return out;
}

/** n rows of P prompt + R response tokens, every token real. */
function fullBatch(config: ModelConfig, n: number, P: number, R: number): TokenBatch {
  const T = P + R;
  return {
    n,
    P,
    R,
    inputIds: Int32Array.from({ length: n * T }, (_, i) => (i * 7919 + 13) % config.vocab_size),
    attentionMask: new Int32Array(n * T).fill(1),
    positionIds: Int32Array.from({ length: n * T }, (_, i) => i % T),
  };
}

/** The formula of docs/lora.md, "Memory on the GPU": bytes per term for a LoRA policy step with N = rows · T
 * tokens per micro-batch and NR = rows · R response rows. */
function loraStepBytes(
  c: ModelConfig,
  lora: LoraConfig,
  o: { baseFormat: WeightFormat; recompute: boolean; N: number; NR: number; microBatches: number },
): Record<"base" | "adapter" | "activations" | "other", number> {
  const hd = headDim(c);
  const [d, qd, kvd, ff, H, KV, V, L] = [
    c.d_model,
    c.n_heads * hd,
    c.n_kv_heads * hd,
    c.d_ff,
    c.n_heads,
    c.n_kv_heads,
    c.vocab_size,
    c.n_layers,
  ];
  const layout = paramLayout(c);
  const matrices = layout.filter((s) => s.shape.length === 2).reduce((a, s) => a + s.size, 0);
  const vectors = layout.filter((s) => s.shape.length === 1).reduce((a, s) => a + s.size, 0);
  const perWeight = o.baseFormat === "f32" ? 4 : 2;
  const rope = c.max_seq_len * hd; // cos and sin of hd/2 frequencies
  const base = perWeight * matrices + 4 * vectors + 4 * rope;
  const Pa = loraParamCount(c, lora);
  const adapter = 4 * 4 * Pa; // values, gradients, AdamW m and v
  const targets = lora.targetModules.length;
  const qkNorm = c.qk_norm ? qd + kvd + H + KV : 0;
  // one layer's saved activations per token: q, k, v, h1, rstd1, attn, lse, xMid, h2, rstd2, gate, up, act, x · lora_a
  const layerSet = 2 * qd + 2 * kvd + 3 * d + 2 + H + 3 * ff + qkNorm + targets * lora.r;
  const sets = o.recompute ? 1 : L;
  const inputs = (L + 1) * d; // each layer's input and the last output
  const head = d + 1 + 3; // final norm output and rstd; ids, mask, positions
  const backward = 2 * d + 2 * qd + 2 * kvd + H + 3 * ff + (c.qk_norm ? qd + kvd : 0) + lora.r;
  const perResponseRow = 2 * d + V + 8; // hSel, dhSel, logits, 2 softmax stats, logprob, entropy, row, target, dlogprob, dentropy
  const activations = 4 * (o.N * (sets * layerSet + inputs + head + backward) + o.NR * perResponseRow);
  const C = METRIC_COLUMNS.length;
  const other = 4 * (o.NR * (5 + C) + (loraLayout(c, lora).length * SUMSQ_GROUPS + 1) + (o.microBatches * C + 1));
  return { base, adapter, activations, other };
}

const mb = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

interface Row {
  shape: string;
  backend: string;
  base: string;
  recompute: string;
  batch: string;
  tokensPerSecond: number;
  measured?: number;
  formula?: ReturnType<typeof loraStepBytes>;
}

async function timeSteps(trainer: PolicyTrainer, batch: TokenBatch, steps: number, micro: number): Promise<number> {
  const ref = (await trainer.logProbs(batch, { baseOnly: true, microBatchSize: micro })).log_probs;
  const adv = ref.map((_, i) => (i % 2 === 0 ? 1 : -1));
  const options = { microBatchSize: micro, klLossCoef: 0.01, refLogProbs: ref };
  await trainer.policyStep(batch, adv, ref, options); // warm-up: pipelines, workspace
  const t0 = performance.now();
  for (let s = 0; s < steps; s++) await trainer.policyStep(batch, adv, ref, options);
  return (steps * batch.n * batch.R) / ((performance.now() - t0) / 1000);
}

async function main(): Promise<void> {
  const names = arg("--shape") ? [arg("--shape")!] : Object.keys(SHAPES);
  const [n, P, R] = [num("--n", 2), num("--P", 8), num("--R", 8)];
  const cpuN = num("--cpu-n", 1);
  const steps = num("--steps", 1);
  const long = num("--long", 2048);
  const rows: Row[] = [];
  /** The device's largest bindable buffer, or null without WebGPU. */
  let bindLimit: number | null = null;
  if (!argv.includes("--no-gpu")) {
    try {
      const probe = await GpuContext.create();
      console.log(`webgpu adapter: ${describeAdapter(probe.handle!.report)}`);
      bindLimit = Math.min(probe.device.limits.maxStorageBufferBindingSize, probe.device.limits.maxBufferSize);
      probe.destroy();
    } catch (e) {
      if (!(e instanceof GpuUnavailableError)) throw e;
      console.log(`no WebGPU adapter here: ${e.message.split("\n")[0]}`);
    }
  }
  for (const name of names) {
    const full = SHAPES[name];
    if (!full) throw new Error(`unknown shape ${name}; one of ${Object.keys(SHAPES).join(", ")}`);
    const layers = num("--layers", full.n_layers);
    const config = { ...full, n_layers: layers };
    const label = layers === full.n_layers ? name : `${name} (${layers} of ${full.n_layers} layers)`;
    const base = randomWeights(config, 1);
    console.log(`\n${label}: LoRA r ${LORA.r} on ${LORA.targetModules.length} projections, ${loraParamCount(config, LORA)} adapter params`);
    if (!argv.includes("--no-cpu")) {
      const cpu = new CpuTrainer({ config, lr: 1e-4, lora: { config: LORA, base, seed: 0 } });
      const batch = sliceRows(fullBatch(config, cpuN, P, R), 0, cpuN);
      const tps = await timeSteps(cpu, batch, 1, cpuN);
      rows.push({ shape: label, backend: "cpu", base: "f32", recompute: "-", batch: `${cpuN}x(${P}+${R})`, tokensPerSecond: tps });
      console.log(`lora_step shape=${name} layers=${layers} backend=cpu n=${cpuN} P=${P} R=${R} tokens/s=${tps.toFixed(2)}`);
    }
    // The formula alone for the full shape: at this batch, and one long row (where checkpointing pays).
    for (const [weightFormat, recompute, N, NR, what] of [
      ["f32", false, n * (P + R), n * R, `${n}x(${P}+${R})`],
      ["bf16", false, n * (P + R), n * R, `${n}x(${P}+${R})`],
      ["bf16", false, long, long / 2, `1x(${long / 2}+${long / 2})`],
      ["bf16", true, long, long / 2, `1x(${long / 2}+${long / 2})`],
    ] as const) {
      const f = loraStepBytes(config, LORA, { baseFormat: weightFormat, recompute, N, NR, microBatches: 1 });
      console.log(
        `  formula ${label}, ${what}, ${weightFormat} base, recompute ${recompute}: ${mb(f.base + f.adapter + f.activations + f.other)} = base ${mb(f.base)} + adapter ${mb(f.adapter)} + activations ${mb(f.activations)} + other ${mb(f.other)}`,
      );
    }
    if (bindLimit === null) continue;
    // A float32 embedding table over the device's binding limit cannot be bound at all (Qwen's 151,936 x 896
    // on lavapipe's 128 MiB): the WebGPU runs then use the largest vocabulary that fits, and say so.
    let gpuConfig = config;
    let gpuLabel = label;
    let gpuBase = base;
    if (4 * config.vocab_size * config.d_model > bindLimit) {
      const vocab = Math.floor(bindLimit / (4 * config.d_model) / 1024) * 1024;
      gpuConfig = { ...config, vocab_size: vocab };
      gpuLabel = `${label}, vocab cut to ${vocab} (the ${config.vocab_size}-row embedding is over this device's ${(bindLimit / 2 ** 20).toFixed(0)} MiB binding limit)`;
      gpuBase = randomWeights(gpuConfig, 1);
      console.log(`WebGPU runs: ${gpuLabel}`);
    }
    const variants: Array<[WeightFormat, boolean]> = [
      ["f32", false],
      ["bf16", false],
      ["bf16", true],
    ];
    for (const [weightFormat, recompute] of variants) {
      const ctx = await GpuContext.create();
      const trainer = await GpuPolicyTrainer.create({
        config: gpuConfig,
        lr: 1e-4,
        context: ctx,
        lora: { config: LORA, base: gpuBase, seed: 0 },
        weightFormat,
        recomputeActivations: recompute,
      });
      const batch = fullBatch(gpuConfig, n, P, R);
      const tps = await timeSteps(trainer, batch, steps, n);
      const measured = ctx.allocatedBytes - 4 * steps * (METRIC_COLUMNS.length + 1); // the timed steps' own metric sums (the formula counts one)
      const formula = loraStepBytes(gpuConfig, LORA, { baseFormat: weightFormat, recompute, N: n * (P + R), NR: n * R, microBatches: 1 });
      const total = Object.values(formula).reduce((a, b) => a + b, 0);
      rows.push({
        shape: gpuLabel,
        backend: "webgpu",
        base: weightFormat,
        recompute: String(recompute),
        batch: `${n}x(${P}+${R})`,
        tokensPerSecond: tps,
        measured,
        formula,
      });
      console.log(
        `lora_step shape=${name} layers=${layers} backend=webgpu base=${weightFormat} recompute=${recompute} n=${n} P=${P} R=${R} tokens/s=${tps.toFixed(2)} gpu_bytes=${measured} formula_bytes=${total} (base ${mb(formula.base)}, adapter+grads+adam ${mb(formula.adapter)}, activations ${mb(formula.activations)}, other ${mb(formula.other)})`,
      );
      trainer.destroy();
      ctx.destroy();
    }
  }
  console.log(
    "\n| shape | backend | base | checkpointing | batch | response tokens/s | GPU memory measured | formula (base + adapter·4 + activations + other) |",
  );
  console.log("|---|---|---|---|---|---:|---:|---|");
  for (const r of rows) {
    const f = r.formula;
    const formula = f
      ? `${mb(f.base + f.adapter + f.activations + f.other)} = ${mb(f.base)} + ${mb(f.adapter)} + ${mb(f.activations)} + ${mb(f.other)}`
      : "-";
    console.log(
      `| ${r.shape} | ${r.backend} | ${r.base} | ${r.recompute} | ${r.batch} | ${r.tokensPerSecond.toFixed(2)} | ${r.measured === undefined ? "-" : mb(r.measured)} | ${formula} |`,
    );
  }
  process.exit(0);
}

await main();

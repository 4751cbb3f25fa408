/**
 * What a critic costs (GAE, `advEstimator: "gae"`) against a GRPO step, same batch, same run: the GRPO
 * step's training work is `logProbs` (old log-probs) + `policyStep`; a PPO step with a critic adds
 * `values` + `valueStep` on a critic of the policy's architecture started from its weights (as verl
 * starts its critic from the actor's checkpoint). The two parts run alternately; printed: ms of each (best
 * of the runs) and ratio = (policy + critic) / policy of each run, its median and range (one pair of
 * neighbouring runs shares the machine's load best on a shared machine); the goal is at most 1.8x. The last
 * two columns time the critic without its reuse of the `values` forward in `valueStep` (src/cpu/value-trainer.ts). Rollouts, rewards
 * and the advantage kernels are the same for both and left out. CPU engine, Wasm kernels, on 1 thread and
 * on every CPU. Run: `npm run bench -- ppo` (or `npx tsx bench/ppo.ts [--runs N]`).
 *
 * The LoRA case is the Calc-X demo's default policy: the committed model (examples/calc-x/model) with a
 * rank-16 adapter on all seven projections, as `agl train` trains it; its GRPO step also takes the base's
 * log-probs (the KL to the base that `agl train` tracks with an adapter). Its critic is still the whole model.
 */
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { CpuTrainer } from "../src/cpu/trainer.ts";
import { createCpuValueTrainer } from "../src/cpu/value-trainer.ts";
import type { ModelConfig } from "../src/model/config.ts";
import { loadPretrained } from "../src/model/hf/loader.ts";
import { initParams } from "../src/model/init.ts";
import { LORA_TARGETS, parseLoraConfig } from "../src/model/lora.ts";
import type { ModelParams } from "../src/model/params.ts";
import { presetConfig } from "../src/model/presets.ts";
import { platform } from "../src/platform/index.ts";
import { ppoBenchBatch, timeCriticStep, timePolicyStep } from "./_ppo-steps.ts";

const { values: flags } = parseArgs({ options: { runs: { type: "string", default: "7" } } });
const runs = Number(flags.runs);
const loadAverage = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
const loadBefore = loadAverage();

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

interface Case {
  label: string;
  config: ModelConfig;
  rows: number;
  P: number;
  R: number;
  /** A LoRA policy on these weights (rank, alpha; all seven projections); else full fine-tuning from random weights. */
  lora?: { weights: ModelParams; r: number; alpha: number };
}

const calcX = await loadPretrained("examples/calc-x/model");

const CASES: Case[] = [
  {
    // examples/calc-x's policy (its tokenizer's 513 ids, CALC_X_SHAPE) on a step of 8 tasks x 8 rollouts
    label: "Calc-X policy",
    config: {
      vocab_size: 513,
      d_model: 64,
      n_layers: 2,
      n_heads: 4,
      n_kv_heads: 2,
      d_ff: 192,
      max_seq_len: 256,
      rope_theta: 10000,
      norm_eps: 1e-6,
      tie_embeddings: true,
      qkv_bias: true,
    },
    rows: 64,
    P: 64,
    R: 96,
  },
  {
    label: "Calc-X model, LoRA r 16",
    config: calcX.config,
    rows: 64,
    P: 64,
    R: 96,
    lora: { weights: calcX.weights, r: 16, alpha: 32 },
  },
  { label: "tiny preset", config: presetConfig("tiny"), rows: 16, P: 32, R: 96 },
];

const table: string[][] = [
  ["model", "batch", "threads", "GRPO step ms", "critic ms", "ratio (median)", "range", "critic ms, no reuse", "ratio (median)"],
];
for (const c of CASES)
  for (const threads of [...new Set([1, platform.cpuCount()])]) {
    const policyParams = c.lora?.weights ?? initParams(c.config, 1);
    const policy = new CpuTrainer({
      config: c.config,
      ...(c.lora
        ? {
            lora: {
              config: parseLoraConfig({ r: c.lora.r, alpha: c.lora.alpha, targetModules: LORA_TARGETS }),
              base: c.lora.weights,
              seed: 1,
            },
          }
        : { params: policyParams }),
      threads,
      lr: 1e-4,
    });
    const critic = createCpuValueTrainer({ config: c.config, policyParams, threads, lr: 1e-4 });
    const b = ppoBenchBatch(c.config, c.rows, c.P, c.R);
    const step = { ref: c.lora !== undefined };
    // warm-up (JIT tiers, Wasm tier-up, worker start), then the two parts alternately
    await timePolicyStep(policy, b, step);
    await timeCriticStep(critic, b);
    await timeCriticStep(critic, b, {}, false);
    let policyMs = Infinity;
    let criticMs = Infinity;
    let plainMs = Infinity;
    const ratios: number[] = [];
    const plainRatios: number[] = [];
    for (let r = 0; r < runs; r++) {
      const p = await timePolicyStep(policy, b, step);
      const q = await timeCriticStep(critic, b);
      const u = await timeCriticStep(critic, b, {}, false);
      policyMs = Math.min(policyMs, p);
      criticMs = Math.min(criticMs, q);
      plainMs = Math.min(plainMs, u);
      ratios.push((p + q) / p);
      plainRatios.push((p + u) / p);
    }
    policy.close();
    critic.close();
    table.push([
      c.label,
      `${c.rows} x ${c.P}+${c.R}`,
      String(threads),
      policyMs.toFixed(0),
      criticMs.toFixed(0),
      `${median(ratios).toFixed(2)}x`,
      `${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)}`,
      plainMs.toFixed(0),
      `${median(plainRatios).toFixed(2)}x`,
    ]);
  }

const widths = table[0].map((_, i) => Math.max(...table.map((row) => row[i].length)));
for (const row of table) console.log(row.map((cell, i) => cell.padStart(widths[i])).join("  "));
console.log(`load average before ${loadBefore}, after ${loadAverage()}`);

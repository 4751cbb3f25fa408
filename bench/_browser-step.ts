/** The policy step bench/browser.ts times in Node and in a Chromium page (bundled from this file). */
import { batchFromTokens, GpuPolicyTrainer, type ModelConfig, PAD_ID, Rng, TOKENIZER_VOCAB_SIZE } from "../src/browser.ts";

export const BENCH_CONFIG: ModelConfig = {
  vocab_size: TOKENIZER_VOCAB_SIZE,
  d_model: 128,
  n_layers: 4,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 256,
  max_seq_len: 64,
  rope_theta: 10000,
  norm_eps: 1e-5,
  tie_embeddings: true,
};

export interface StepTiming {
  adapter: string;
  /** Response tokens per second of wall time over the timed steps (after one warm-up step). */
  tokensPerSecond: number;
  seconds: number[];
}

/** `steps` PPO policy steps on a fixed batch of `rows` rows (16 prompt + 32 response tokens). */
export async function timeSteps(rows = 8, steps = 3): Promise<StepTiming> {
  const trainer = await GpuPolicyTrainer.create({ config: BENCH_CONFIG, seed: 1, lr: 1e-4 });
  try {
    const rng = new Rng(2);
    const ids = (n: number) => Array.from({ length: n }, () => rng.nextU32() % 256);
    const batch = batchFromTokens(
      Array.from({ length: rows }, () => ({ prompt: ids(16), response: ids(32) })),
      { padId: PAD_ID },
    );
    const adv = Float32Array.from({ length: rows * batch.R }, () => rng.normal());
    const old = (await trainer.logProbs(batch)).log_probs;
    await trainer.policyStep(batch, adv, old); // warm-up: pipelines compile
    const seconds: number[] = [];
    for (let i = 0; i < steps; i++) {
      const t0 = performance.now();
      await trainer.policyStep(batch, adv, old);
      seconds.push((performance.now() - t0) / 1000);
    }
    const r = trainer.ctx.handle?.report;
    const total = seconds.reduce((a, b) => a + b, 0);
    return {
      adapter: r ? `${r.vendor} ${r.architecture} ${r.description}`.trim() : "?",
      tokensPerSecond: (rows * 32 * steps) / total,
      seconds,
    };
  } finally {
    trainer.destroy();
  }
}

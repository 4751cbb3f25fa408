/**
 * The training-side work of one PPO step, timed piece by piece on the same batch (bench/ppo.ts): the
 * policy's part, which a GRPO step does alone (old log-probs, then the policy update), and the critic's
 * part, which GAE adds (values before the update, then the critic update).
 */
import { batchFromTokens, resolveResponseMask } from "../src/model/batch.ts";
import type { ModelConfig } from "../src/model/config.ts";
import { Rng } from "../src/model/init.ts";
import type { PolicyTrainer, StepOptions, TokenBatch } from "../src/model/train-types.ts";
import type { ValueTrainer } from "../src/model/value-types.ts";

/** A batch with what both parts need: advantages for the policy, returns for the critic. */
export interface PpoBenchBatch {
  batch: TokenBatch;
  advantages: Float32Array;
  returns: Float32Array;
}

/** `rows` random rows of `P` prompt and `R` response tokens (ids 1..vocab-1), a group's ±1 advantages and
 * returns in [0, 1). */
export function ppoBenchBatch(config: ModelConfig, rows: number, P: number, R: number, seed = 3): PpoBenchBatch {
  const rng = new Rng(seed);
  const tok = () => 1 + Math.floor(rng.uniform() * (config.vocab_size - 1));
  const batch = batchFromTokens(
    Array.from({ length: rows }, () => ({ prompt: Array.from({ length: P }, tok), response: Array.from({ length: R }, tok) })),
    { padId: 0 },
  );
  const mask = resolveResponseMask(batch);
  const advantages = mask.map((m, k) => m * (Math.floor(k / R) % 2 === 0 ? 1 : -1));
  const returns = mask.map((m) => m * rng.uniform());
  return { batch, advantages, returns };
}

async function timed(f: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await f();
  return performance.now() - t;
}

/** ms of a GRPO step's training work: `logProbs` (the old log-probs), with `ref` the base's too (a LoRA
 * trainer's KL reference), then one `policyStep`. */
export function timePolicyStep(
  policy: PolicyTrainer,
  b: PpoBenchBatch,
  { ref = false, ...options }: StepOptions & { ref?: boolean } = {},
): Promise<number> {
  return timed(async () => {
    const old = await policy.logProbs(b.batch, options);
    if (ref) await policy.logProbs(b.batch, { ...options, baseOnly: true });
    await policy.policyStep(b.batch, b.advantages, old.log_probs, options);
  });
}

/**
 * ms of what a critic adds to a step: `values` (GAE's input, before any update), then one `valueStep`.
 * `reuse: false` runs `values` in two micro-batches, so the CPU critic keeps no forward for the step to
 * reuse (the step then makes its own).
 */
export function timeCriticStep(critic: ValueTrainer, b: PpoBenchBatch, options: StepOptions = {}, reuse = true): Promise<number> {
  return timed(async () => {
    const values = await critic.values(b.batch, reuse ? options : { ...options, microBatchSize: Math.ceil(b.batch.n / 2) });
    await critic.valueStep(b.batch, b.returns, values, options);
  });
}

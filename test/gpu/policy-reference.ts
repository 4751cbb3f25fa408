/** The CPU reference's policy gradient and batches for the GPU trainer tests (shared by test/gpu/*trainer*). */
import { backward, backwardLora, forward } from "../../src/model/reference/model.ts";
import type { LoraConfig } from "../../src/model/lora.ts";
import type { Rng } from "../../src/model/init.ts";
import { batchFromTokens, resolveResponseMask } from "../../src/model/batch.ts";
import { normFromMask, ppoPolicyLoss } from "../../src/model/ppo-loss.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import type { PolicyStepOptions, TokenBatch } from "../../src/model/train-types.ts";

const PAD = 0;

/** Rows of different prompt/response lengths, so left and right padding both occur. */
export function makeBatch(rng: Rng, vocab: number, rows: number): TokenBatch {
  const tokens = (k: number): number[] => Array.from({ length: k }, () => 1 + (rng.nextU32() % (vocab - 1)));
  const spec = Array.from({ length: rows }, (_, i) => ({ prompt: tokens(2 + (i % 3)), response: tokens(3 + ((i * 2) % 4)) }));
  return batchFromTokens(spec, { padId: PAD });
}

export function responseCols(x: ArrayLike<number>, b: TokenBatch): Float32Array {
  const T = b.P + b.R;
  const out = new Float32Array(b.n * b.R);
  for (let i = 0; i < b.n; i++) for (let t = 0; t < b.R; t++) out[i * b.R + t] = x[i * T + b.P + t];
  return out;
}

export function fullCols(x: ArrayLike<number>, b: TokenBatch): Float64Array {
  const T = b.P + b.R;
  const out = new Float64Array(b.n * T);
  for (let i = 0; i < b.n; i++) for (let t = 0; t < b.R; t++) out[i * T + b.P + t] = x[i * b.R + t];
  return out;
}

/** The PPO loss and gradient of the CPU reference (float64 model, logits divided by `options.temperature`),
 * the oracle for the GPU backward: the whole model's gradient, or with `lora` the adapter's only (the base frozen). */
export function referenceGradients(
  config: ModelConfig,
  params: Float32Array,
  batch: TokenBatch,
  adv: Float32Array,
  old: Float32Array,
  options: PolicyStepOptions,
  lora?: { config: LoraConfig; adapter: Float32Array },
) {
  const p64 = Float64Array.from(params);
  const adapter = lora && { config: lora.config, params: Float64Array.from(lora.adapter) };
  const out = forward(config, p64, batch, { ...(adapter ? { lora: adapter } : {}), temperature: options.temperature });
  const mask = resolveResponseMask(batch);
  const loss = ppoPolicyLoss(
    {
      rows: batch.n,
      cols: batch.R,
      logProbs: responseCols(out.logprob, batch),
      oldLogProbs: old,
      advantages: adv,
      responseMask: mask,
      entropy: responseCols(out.entropy, batch),
      refLogProbs: options.refLogProbs,
    },
    options,
    normFromMask(mask, batch.n, batch.R),
  );
  const dLogProbs = fullCols(loss.dLogProbs, batch);
  const dEntropy = fullCols(loss.dEntropy, batch);
  return {
    loss,
    grads: adapter ? backwardLora(config, p64, out.cache, dLogProbs, dEntropy) : backward(config, p64, out.cache, dLogProbs, dEntropy),
  };
}

export function randomAdvantages(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.normal());
}

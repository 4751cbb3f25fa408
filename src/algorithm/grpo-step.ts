/**
 * One GRPO policy update from finished rollouts, without a store or a policy server: the padded batch
 * and the group advantages in the Wasm core, tied groups dropped, old (and reference) log-probs, then
 * `ppoEpochs` passes of shuffled mini-batches on the trainer. `GRPO` (grpo.ts) calls it each step; a
 * browser tab that pulls rollouts from a remote store calls it directly (docs/browser.md).
 */
import { buildTrainingBatch, tokenMetrics, type AggregationLevel, type FinishedRollout, type Grouping } from "../adapter/batch.ts";
import { resolveResponseMask } from "../model/batch.ts";
import { Rng } from "../model/init.ts";
import { PAD_ID } from "../model/tokenizer.ts";
import type { PolicyLossOptions, PolicyTrainer, StepMetrics, TokenBatch } from "../model/train-types.ts";
import { libraryKernels, type BatchTensors, type Kernels } from "../wasm/index.ts";
import { KL_ALIASES } from "../wasm/types.ts";

/** Agent Lightning's `trace_aggregator` option: what becomes a training row (docs/adapters.md#the-training-batch). */
export interface TraceAggregatorOptions {
  /** "transition": one row per LLM call; "trajectory": one row per run of calls whose context extends the
   * previous call's, the tokens between the model's replies (tool results, chat scaffolding) masked out of
   * the loss ["transition"]. */
  level?: AggregationLevel;
}

export interface GrpoUpdateOptions {
  maxPromptLength: number;
  maxResponseLength: number;
  traceAggregator?: TraceAggregatorOptions;
  /** Which rows share a GRPO baseline: the same sample and turn (or merged run) index, or the same sample
   * (Agent Lightning's) ["sample_turn"; the two agree on single-call rollouts]. */
  grouping?: Grouping;
  /** Reward of a rollout without one [0]. */
  rewardFillna?: number;
  /** Divide group-centred rewards by the group std [true]. */
  normByStd?: boolean;
  /** Leave rows of all-equal-reward groups out of the update [true]. */
  dropTiedGroups?: boolean;
  loss?: PolicyLossOptions;
  /** Learning rate of this update [the trainer's]. */
  lr?: number;
  microBatchSize?: number;
  miniBatchSize?: number;
  /** Passes over the rows [1]. */
  ppoEpochs?: number;
  /** Compute the KL to the base even when `loss.klLossCoef` is 0 (LoRA trainers) [false]. */
  trackKl?: boolean;
  kernels?: Kernels;
  /** Shuffles the mini-batches [a fresh Rng(0)]. */
  shuffle?: Rng;
}

export interface GrpoUpdate {
  /** Rows of the batch, and the rows that took part in the update. */
  rows: number;
  trainedRows: number;
  /** Attended tokens (prompt + response) of the batch's rows, and of the trained rows (what each pass over them reads). */
  tokens: number;
  trainedTokens: number;
  /** Tokens of the trained rows under the loss mask (the model's own tokens). */
  lossTokens: number;
  /** The batch builder's metrics (`training/…`: docs/adapters.md#the-training-batch). */
  batchMetrics: Record<string, number>;
  /** Share of groups whose rewards were all equal. */
  tiedGroupShare: number;
  /** KL of the rollout policy to the base (0 when not computed). */
  klRef: number;
  updates: number;
  skippedUpdates: number;
  /** Token-weighted means over the updates taken; null when no row carried a gradient. */
  metrics: StepMetrics | null;
  /** True when the trainer's weights changed (at least one update was not skipped). */
  changed: boolean;
}

/** Rows `keep` of a batch, as a new TokenBatch. */
export function selectRows(t: BatchTensors | TokenBatch, keep: readonly number[]): TokenBatch {
  const T = t.P + t.R;
  const take = <A extends Int32Array | Float32Array | Uint8Array>(a: A, w: number): A => {
    const out = new (a.constructor as new (n: number) => A)(keep.length * w);
    keep.forEach((r, i) => out.set(a.subarray(r * w, (r + 1) * w), i * w));
    return out;
  };
  const mask = t.responseMask;
  return {
    n: keep.length,
    P: t.P,
    R: t.R,
    inputIds: take(t.inputIds, T),
    attentionMask: take(t.attentionMask as Int32Array, T),
    positionIds: take(t.positionIds, T),
    ...(mask ? { responseMask: take(mask as Int32Array, t.R) } : {}),
  };
}

/** Builds the batch of `finished` and takes the GRPO update on `trainer`. */
export async function grpoUpdate(trainer: PolicyTrainer, finished: FinishedRollout[], o: GrpoUpdateOptions): Promise<GrpoUpdate> {
  const batch = buildTrainingBatch(finished, {
    maxPromptLength: o.maxPromptLength,
    maxResponseLength: o.maxResponseLength,
    padTokenId: PAD_ID,
    rewardFillna: o.rewardFillna ?? 0,
    level: o.traceAggregator?.level ?? "transition",
    grouping: o.grouping ?? "sample_turn",
    kernels: o.kernels,
  });
  const t = batch.tensors;
  const result: GrpoUpdate = {
    rows: t.n,
    trainedRows: 0,
    tokens: batch.metrics["training/n_tokens"],
    trainedTokens: 0,
    lossTokens: 0,
    batchMetrics: batch.metrics,
    tiedGroupShare: batch.metrics["training/tied_group_ratio"] ?? 0,
    klRef: 0,
    updates: 0,
    skippedUpdates: 0,
    metrics: null,
    changed: false,
  };
  if (t.n === 0) return result;
  const kernels = o.kernels ?? libraryKernels();
  const mask = Float32Array.from(t.responseMask);
  const adv = kernels
    .grpo({ rewards: t.tokenLevelScores, mask, B: t.n, T: t.R, groups: batch.groups }, o.normByStd ?? true)
    .advantages.slice();
  const keep: number[] = [];
  for (let i = 0; i < t.n; i++) {
    if (t.isDrop[i]) continue;
    let any = !(o.dropTiedGroups ?? true);
    for (let j = 0; j < t.R && !any; j++) any = adv[i * t.R + j] !== 0;
    if (any) keep.push(i);
  }
  if (keep.length === 0) return result;
  const sub = selectRows(t, keep);
  const subAdv = new Float32Array(keep.length * t.R);
  keep.forEach((r, i) => subAdv.set(adv.subarray(r * t.R, (r + 1) * t.R), i * t.R));
  const old = await trainer.logProbs(sub, { microBatchSize: o.microBatchSize });
  const wantsRef = (o.loss?.klLossCoef ?? 0) !== 0 || o.trackKl === true;
  const ref = wantsRef ? (await trainer.logProbs(sub, { microBatchSize: o.microBatchSize, baseOnly: true })).log_probs : undefined;
  if (ref) result.klRef = maskedMean(kernels.klPenalty(old.log_probs, ref, KL_ALIASES[o.loss?.klLossType ?? "low_var_kl"]), sub, t.R);
  const all = await updates(trainer, sub, subAdv, old.log_probs, ref, o);
  result.metrics = combineMetrics(all);
  result.updates = all.length;
  result.skippedUpdates = all.filter((m) => m.skipped).length;
  result.changed = result.updates > result.skippedUpdates;
  result.trainedRows = keep.length;
  const kept = tokenMetrics({ ...sub, responseMask: resolveResponseMask(sub) });
  result.trainedTokens = kept["training/n_tokens"];
  result.lossTokens = kept["training/n_loss_tokens"];
  return result;
}

/** `ppoEpochs` passes over the rows in shuffled mini-batches, one policy step each. */
async function updates(
  trainer: PolicyTrainer,
  batch: TokenBatch,
  advantages: Float32Array,
  oldLogProbs: Float32Array,
  refLogProbs: Float32Array | undefined,
  o: GrpoUpdateOptions,
): Promise<StepMetrics[]> {
  const R = batch.R;
  const size = Math.min(o.miniBatchSize ?? batch.n, batch.n);
  const shuffle = o.shuffle ?? new Rng(0);
  const all: StepMetrics[] = [];
  for (let epoch = 0; epoch < (o.ppoEpochs ?? 1); epoch++) {
    const order = size < batch.n ? permutation(shuffle, batch.n) : Array.from({ length: batch.n }, (_, i) => i);
    for (let start = 0; start < batch.n; start += size) {
      const rows = order.slice(start, start + size);
      const pick = (a: Float32Array): Float32Array => {
        const out = new Float32Array(rows.length * R);
        rows.forEach((r, i) => out.set(a.subarray(r * R, (r + 1) * R), i * R));
        return out;
      };
      const whole = size === batch.n; // one update over every row, in order: no copies
      all.push(
        await trainer.policyStep(
          whole ? batch : selectRows(batch, rows),
          whole ? advantages : pick(advantages),
          whole ? oldLogProbs : pick(oldLogProbs),
          {
            ...o.loss,
            lr: o.lr,
            microBatchSize: o.microBatchSize,
            ...(refLogProbs ? { refLogProbs: whole ? refLogProbs : pick(refLogProbs) } : {}),
          },
        ),
      );
    }
  }
  return all;
}

/** A seeded Fisher-Yates shuffle of 0..n-1. */
function permutation(rng: Rng, n: number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rng.uniform() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

/** Masked mean of a [n, R] per-token tensor over the batch's response tokens. */
function maskedMean(x: Float32Array, batch: TokenBatch, R: number): number {
  const mask = resolveResponseMask(batch);
  let sum = 0;
  let count = 0;
  for (let i = 0; i < batch.n * R; i++)
    if (mask[i] !== 0) {
      sum += x[i];
      count++;
    }
  return count > 0 ? sum / count : 0;
}

const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** One set of metrics for several updates: token-weighted means of the taken (not skipped) updates, summed tokens. */
export function combineMetrics(all: StepMetrics[]): StepMetrics {
  const taken = all.filter((m) => !m.skipped);
  const use = taken.length > 0 ? taken : all;
  const tokens = use.reduce((a, m) => a + m.tokens, 0);
  const avg = (k: "loss" | "pg_loss" | "clip_frac" | "clip_frac_lower" | "approx_kl" | "entropy" | "grad_norm"): number =>
    tokens > 0 ? use.reduce((a, m) => a + m[k] * m.tokens, 0) / tokens : mean(use.map((m) => m[k]));
  const seconds = all.reduce((a, m) => a + (m.tokens_per_second > 0 ? m.tokens / m.tokens_per_second : 0), 0);
  const allTokens = all.reduce((a, m) => a + m.tokens, 0);
  return {
    loss: avg("loss"),
    pg_loss: avg("pg_loss"),
    clip_frac: avg("clip_frac"),
    clip_frac_lower: avg("clip_frac_lower"),
    approx_kl: avg("approx_kl"),
    entropy: avg("entropy"),
    grad_norm: avg("grad_norm"),
    tokens_per_second: seconds > 0 ? allTokens / seconds : 0,
    tokens: allTokens,
    skipped: taken.length === 0,
    step: all[all.length - 1].step,
  };
}

/**
 * One update of the PPO family from finished rollouts, without a store or a policy server (verl's
 * agent-mode step after the rollouts, docs/training.md#the-ppo-step): the padded batch, the old and
 * reference log-probs and the KL penalty in the reward when it is on, the critic's values, the advantages
 * of the estimator in the Wasm core, over-long prompts and rows without advantage dropped, the critic's
 * update, then `ppoEpochs` passes of shuffled mini-batches on the policy trainer. With the defaults it is
 * GRPO's update (`grpoUpdate`). `PPO`/`GRPO` (ppo.ts, grpo.ts) call it each step; a browser tab that
 * pulls rollouts from a remote store calls it directly (docs/browser.md).
 */
import { buildTrainingBatch, tokenMetrics, type FinishedRollout, type Grouping, type TrainingBatch } from "../adapter/batch.ts";
import { resolveResponseMask } from "../model/batch.ts";
import { Rng } from "../model/init.ts";
import { PAD_ID } from "../model/tokenizer.ts";
import type { KlLossType, LogProbOptions, PolicyLossOptions, PolicyTrainer, StepMetrics, TokenBatch } from "../model/train-types.ts";
import type { ValueStepMetrics } from "../model/value-types.ts";
import { ValidationError } from "../types/errors.ts";
import { libraryKernels, type BatchTensors, type Kernels } from "../wasm/index.ts";
import { KL_ALIASES } from "../wasm/types.ts";
import { checkEstimator, computeAdvantages } from "./advantages.ts";
import { FixedKlController, type KlController } from "./kl-controller.ts";
import type { TraceAggregatorOptions } from "./grpo-options.ts";
import type { AdvantageEstimator, CriticOptions } from "./ppo-options.ts";

export type { TraceAggregatorOptions } from "./grpo-options.ts";
import { actorMetrics, combineValueMetrics, criticMetrics, dataMetrics } from "./ppo-metrics.ts";

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
  /** The rollouts' sampling temperature: the old, reference and trained log-probs are those of the logits
   * divided by it, as in verl's actor; 0 (greedy rollouts) leaves the logits as they are [1]. */
  temperature?: number;
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

/** The PPO family's settings on top of GRPO's (PpoOptions' fields, docs/training.md#the-ppo-step). */
export interface PpoUpdateOptions extends GrpoUpdateOptions {
  /** ["grpo"] */
  advEstimator?: AdvantageEstimator;
  /** gae, reinforce_plus_plus: discount [1]. */
  gamma?: number;
  /** gae: λ [1]. */
  lam?: number;
  /** Subtract β·KL(old ‖ ref) from the token rewards (LoRA trainers: the base is the reference) [false]. */
  useKlInReward?: boolean;
  /** The in-reward KL estimator [kl]. */
  klPenalty?: KlLossType;
  /** β, updated after the penalty with this step's KL; keep one across steps [fixed 0.001]. */
  klCtrl?: KlController;
  /** The value model (gae). */
  critic?: CriticOptions;
  /** Take the actor's update (false during the critic's warm-up) [true]. */
  updateActor?: boolean;
  /** remax: the reward of each task's greedy rollout, by the rows' data id. */
  rewardBaselines?: ReadonlyMap<string, number>;
  /** Agent Lightning's rounding: leave out a random remainder of rows so each update's rows are a multiple of its mini-batch [false]. */
  dropRemainder?: boolean;
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

export interface PpoUpdate extends GrpoUpdate {
  /** The step's metrics under verl's names (`critic/score/mean`, `actor/pg_loss`, `critic/vf_loss`, ...). */
  verlMetrics: Record<string, number>;
  /** The batch the rows came from, and per row-token: the rewards (scores minus the KL penalty), advantages, returns and (with a critic) old values. */
  batch: TrainingBatch;
  tokenRewards: Float32Array;
  advantages: Float32Array;
  returns: Float32Array;
  values: Float32Array | null;
  /** 1 for the rows the actor's update used. */
  trained: Uint8Array;
  /** The critic's value steps (token-weighted means), null without a critic. */
  criticMetrics: ValueStepMetrics | null;
  criticUpdates: number;
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
  return ppoUpdate(trainer, finished, o);
}

/** Builds the batch of `finished` and takes the PPO-family update its options describe (GRPO's by default). */
export async function ppoUpdate(trainer: PolicyTrainer, finished: FinishedRollout[], o: PpoUpdateOptions): Promise<PpoUpdate> {
  const estimator = o.advEstimator ?? "grpo";
  checkEstimator(estimator);
  checkCritic(estimator, o.critic);
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
  const R = t.R;
  const result: PpoUpdate = {
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
    verlMetrics: { ...batch.metrics },
    batch,
    tokenRewards: t.tokenLevelScores,
    advantages: new Float32Array(0),
    returns: new Float32Array(0),
    values: null,
    trained: new Uint8Array(t.n),
    criticMetrics: null,
    criticUpdates: 0,
  };
  if (t.n === 0) return result;
  const kernels = o.kernels ?? libraryKernels();
  const mask = Float32Array.from(t.responseMask);
  const micro = logProbOptions(o);
  // The KL in the reward needs every row's old and reference log-probs before the advantages (verl's order);
  // without it they are computed later, for the rows that train only.
  let oldAll: Float32Array | undefined;
  let refAll: Float32Array | undefined;
  if (o.useKlInReward) {
    oldAll = (await trainer.logProbs(t, micro)).log_probs;
    refAll = (await trainer.logProbs(t, { ...micro, baseOnly: true })).log_probs;
    const ctrl = o.klCtrl ?? new FixedKlController(0.001);
    const beta = ctrl.value;
    const penalty = kernels.applyKlPenalty(
      { scores: t.tokenLevelScores, logp: oldAll, ref: refAll, mask, B: t.n, T: R },
      KL_ALIASES[o.klPenalty ?? "kl"],
      beta,
    );
    result.tokenRewards = penalty.rewards.slice();
    ctrl.update(penalty.currentKl, t.n);
    result.verlMetrics["actor/reward_kl_penalty"] = penalty.currentKl;
    result.verlMetrics["actor/reward_kl_penalty_coeff"] = beta;
  }
  if (o.critic) result.values = (await o.critic.trainer.values(t, { microBatchSize: o.critic.microBatchSize ?? o.microBatchSize })).slice();
  const out = computeAdvantages(
    kernels,
    estimator,
    {
      rewards: result.tokenRewards,
      mask,
      B: t.n,
      T: R,
      groups: batch.groups,
      values: result.values ?? undefined,
      baselines: estimator === "remax" ? remaxBaselines(batch.dataIds, o.rewardBaselines) : undefined,
    },
    { gamma: o.gamma, lam: o.lam, normByStd: o.normByStd },
  );
  const adv = out.advantages;
  result.advantages = adv;
  result.returns = out.returns;
  // Agent Lightning drops over-long prompts once the advantages are computed; rows whose advantages are all
  // zero (tied groups) carry no policy gradient and are left out of the actor's update.
  const valid: number[] = [];
  for (let i = 0; i < t.n; i++) if (!t.isDrop[i]) valid.push(i);
  const keep = valid.filter((i) => {
    if (!(o.dropTiedGroups ?? true)) return true;
    for (let k = i * R; k < (i + 1) * R; k++) if (mask[k] !== 0 && adv[k] !== 0) return true;
    return false;
  });
  result.verlMetrics["training/n_triplets_prompt_too_long"] = t.n - valid.length;
  const shuffle = o.shuffle ?? new Rng(0);
  if (o.critic) {
    const c = o.critic;
    const rows = o.dropRemainder ? dropRemainder(valid, c.miniBatchSize ?? o.miniBatchSize, shuffle) : valid;
    const sub = selectRows(t, rows);
    const returns = pickRows(out.returns, rows, R);
    const oldValues = pickRows(result.values as Float32Array, rows, R);
    const all = await miniBatches(sub.n, c.miniBatchSize ?? o.miniBatchSize, c.ppoEpochs ?? o.ppoEpochs ?? 1, shuffle, (mb) =>
      c.trainer.valueStep(
        mb ? selectRows(sub, mb) : sub,
        mb ? pickRows(returns, mb, R) : returns,
        mb ? pickRows(oldValues, mb, R) : oldValues,
        {
          cliprangeValue: c.cliprangeValue ?? 0.5,
          lossAggMode: c.lossAggMode ?? o.loss?.lossAggMode,
          lr: c.lr,
          microBatchSize: c.microBatchSize ?? o.microBatchSize,
        },
      ),
    );
    if (all.length > 0) {
      result.criticMetrics = combineValueMetrics(all);
      result.criticUpdates = all.length;
      Object.assign(result.verlMetrics, criticMetrics(result.criticMetrics));
    }
  }
  const actorRows = o.dropRemainder ? dropRemainder(keep, o.miniBatchSize, shuffle) : keep;
  result.verlMetrics["training/n_triplets_dropped_remainder"] = keep.length - actorRows.length;
  Object.assign(
    result.verlMetrics,
    dataMetrics({
      ...t,
      mask,
      scores: t.tokenLevelScores,
      rewards: result.tokenRewards,
      advantages: adv,
      returns: out.returns,
      values: result.values,
      rows: valid,
    }),
  );
  if (actorRows.length === 0 || o.updateActor === false) return result;
  await actorUpdate(trainer, t, actorRows, adv, oldAll, refAll, kernels, shuffle, o, result);
  return result;
}

/** The policy's part of the step on rows `keep`: old (and reference) log-probs, then the PPO epochs. */
async function actorUpdate(
  trainer: PolicyTrainer,
  t: BatchTensors,
  keep: number[],
  adv: Float32Array,
  oldAll: Float32Array | undefined,
  refAll: Float32Array | undefined,
  kernels: Kernels,
  shuffle: Rng,
  o: PpoUpdateOptions,
  result: PpoUpdate,
): Promise<void> {
  const R = t.R;
  const sub = selectRows(t, keep);
  const subAdv = pickRows(adv, keep, R);
  const old = oldAll ? pickRows(oldAll, keep, R) : (await trainer.logProbs(sub, logProbOptions(o))).log_probs;
  const wantsRef = (o.loss?.klLossCoef ?? 0) !== 0 || o.trackKl === true;
  const ref = !wantsRef
    ? undefined
    : refAll
      ? pickRows(refAll, keep, R)
      : (await trainer.logProbs(sub, { ...logProbOptions(o), baseOnly: true })).log_probs;
  if (ref) result.klRef = maskedMean(kernels.klPenalty(old, ref, KL_ALIASES[o.loss?.klLossType ?? "low_var_kl"]), sub, R);
  const all = await updates(trainer, sub, subAdv, old, ref, { ...o, shuffle });
  result.metrics = combineMetrics(all);
  result.updates = all.length;
  result.skippedUpdates = all.filter((m) => m.skipped).length;
  result.changed = result.updates > result.skippedUpdates;
  result.trainedRows = keep.length;
  for (const i of keep) result.trained[i] = 1;
  const kept = tokenMetrics({ ...sub, responseMask: resolveResponseMask(sub) });
  result.trainedTokens = kept["training/n_tokens"];
  result.lossTokens = kept["training/n_loss_tokens"];
  Object.assign(result.verlMetrics, actorMetrics(result.metrics));
  if ((o.loss?.klLossCoef ?? 0) !== 0) {
    result.verlMetrics["actor/kl_loss"] = result.klRef;
    result.verlMetrics["actor/kl_coef"] = o.loss?.klLossCoef ?? 0;
  }
}

/** What every log-prob pass of the update is given: the micro-batch size and the temperature (0: 1). */
function logProbOptions(o: GrpoUpdateOptions): LogProbOptions {
  return { microBatchSize: o.microBatchSize, temperature: o.temperature ? o.temperature : 1 };
}

/** GAE needs a critic, and only GAE reads one. */
export function checkCritic(estimator: AdvantageEstimator, critic: CriticOptions | undefined): void {
  if (estimator === "gae" && !critic)
    throw new ValidationError("advEstimator gae needs a critic (its values are the baseline)", ["critic"]);
  if (critic && estimator !== "gae")
    throw new ValidationError(`a critic is only used by advEstimator gae, got ${JSON.stringify(estimator)}`, ["critic"]);
}

/** ReMax's baseline of each row: the reward of its task's greedy rollout. */
function remaxBaselines(dataIds: readonly string[], byDataId: ReadonlyMap<string, number> | undefined): Float32Array {
  return Float32Array.from(dataIds, (id, i) => {
    const b = byDataId?.get(id);
    if (b === undefined)
      throw new ValidationError(`remax: no greedy baseline reward for row ${i} (data id ${id})`, ["rewardBaselines", id]);
    return b;
  });
}

/** Agent Lightning's rounding: `rows` shuffled and cut to a multiple of `size` (kept in their order). */
function dropRemainder(rows: number[], size: number | undefined, shuffle: Rng): number[] {
  if (size === undefined || rows.length % size === 0) return rows;
  const order = permutation(shuffle, rows.length);
  const kept = order.slice(0, rows.length - (rows.length % size)).sort((a, b) => a - b);
  return kept.map((k) => rows[k]);
}

/** Rows `rows` of a [n, R] per-token tensor. */
function pickRows(a: Float32Array, rows: readonly number[], R: number): Float32Array {
  const out = new Float32Array(rows.length * R);
  rows.forEach((r, i) => out.set(a.subarray(r * R, (r + 1) * R), i * R));
  return out;
}

/**
 * `epochs` passes over `n` rows in mini-batches of `size` [all], shuffled when smaller than `n`; `step` gets
 * each mini-batch's rows, or null for one mini-batch of every row in order (no copies needed).
 */
async function miniBatches<T>(
  n: number,
  size: number | undefined,
  epochs: number,
  shuffle: Rng,
  step: (rows: number[] | null) => Promise<T>,
): Promise<T[]> {
  const s = Math.min(size ?? n, n);
  const all: T[] = [];
  for (let epoch = 0; epoch < epochs; epoch++) {
    const order = s < n ? permutation(shuffle, n) : Array.from({ length: n }, (_, i) => i);
    for (let start = 0; start < n; start += s) all.push(await step(s === n ? null : order.slice(start, start + s)));
  }
  return all;
}

/** `ppoEpochs` passes over the rows in shuffled mini-batches, one policy step each. */
async function updates(
  trainer: PolicyTrainer,
  batch: TokenBatch,
  advantages: Float32Array,
  oldLogProbs: Float32Array,
  refLogProbs: Float32Array | undefined,
  o: GrpoUpdateOptions & { shuffle: Rng },
): Promise<StepMetrics[]> {
  const R = batch.R;
  return miniBatches(batch.n, o.miniBatchSize, o.ppoEpochs ?? 1, o.shuffle, (rows) =>
    trainer.policyStep(
      rows ? selectRows(batch, rows) : batch,
      rows ? pickRows(advantages, rows, R) : advantages,
      rows ? pickRows(oldLogProbs, rows, R) : oldLogProbs,
      {
        ...o.loss,
        ...logProbOptions(o),
        lr: o.lr,
        ...(refLogProbs ? { refLogProbs: rows ? pickRows(refLogProbs, rows, R) : refLogProbs } : {}),
      },
    ),
  );
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

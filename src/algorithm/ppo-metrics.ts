/**
 * A step's metrics under verl's names (docs/training.md#what-a-step-reports): the batch's scores, rewards,
 * advantages, returns, values and lengths (`critic/…`, `response_length/…`, `prompt_length/…`, verl's
 * `compute_data_metrics`), the actor's update (`actor/…`) and the critic's (`critic/vf_loss`, …).
 */
import type { StepMetrics } from "../model/train-types.ts";
import type { ValueStepMetrics } from "../model/value-types.ts";

export interface DataMetricsInput {
  n: number;
  P: number;
  R: number;
  attentionMask: ArrayLike<number>;
  /** [n, R] the loss mask. */
  mask: ArrayLike<number>;
  /** [n, R] token_level_scores and token_level_rewards (scores minus the KL penalty). */
  scores: ArrayLike<number>;
  rewards: ArrayLike<number>;
  advantages: ArrayLike<number>;
  returns: ArrayLike<number>;
  /** [n, R] the critic's values, when there is a critic. */
  values?: ArrayLike<number> | null;
  /** The rows to describe [all]. */
  rows?: readonly number[];
}

interface Stats {
  mean: number;
  max: number;
  min: number;
}
function stats(xs: readonly number[]): Stats {
  if (xs.length === 0) return { mean: 0, max: 0, min: 0 };
  let sum = 0,
    max = -Infinity,
    min = Infinity;
  for (const x of xs) {
    sum += x;
    if (x > max) max = x;
    if (x < min) min = x;
  }
  return { mean: sum / xs.length, max, min };
}
/** Unbiased variance (torch.var). */
function variance(xs: readonly number[]): number {
  if (xs.length < 2) return 0;
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  return xs.reduce((a, x) => a + (x - m) * (x - m), 0) / (xs.length - 1);
}
function put(out: Record<string, number>, name: string, s: Stats): void {
  out[`${name}/mean`] = s.mean;
  out[`${name}/max`] = s.max;
  out[`${name}/min`] = s.min;
}

/** verl's `compute_data_metrics` over `rows`: sequence score and reward, token advantages/returns/values under the mask, lengths. */
export function dataMetrics(x: DataMetricsInput): Record<string, number> {
  const { P, R } = x;
  const rows = x.rows ?? Array.from({ length: x.n }, (_, i) => i);
  const score: number[] = [],
    reward: number[] = [],
    adv: number[] = [],
    ret: number[] = [],
    val: number[] = [],
    promptLength: number[] = [],
    responseLength: number[] = [];
  for (const i of rows) {
    let s = 0,
      r = 0,
      pl = 0,
      rl = 0;
    for (let t = 0; t < R; t++) {
      const k = i * R + t;
      s += x.scores[k];
      r += x.rewards[k];
      if (x.mask[k] !== 0) {
        adv.push(x.advantages[k]);
        ret.push(x.returns[k]);
        if (x.values) val.push(x.values[k]);
      }
    }
    for (let j = 0; j < P; j++) pl += x.attentionMask[i * (P + R) + j];
    for (let j = P; j < P + R; j++) rl += x.attentionMask[i * (P + R) + j];
    score.push(s);
    reward.push(r);
    promptLength.push(pl);
    responseLength.push(rl);
  }
  const out: Record<string, number> = {};
  put(out, "critic/score", stats(score));
  put(out, "critic/rewards", stats(reward));
  put(out, "critic/advantages", stats(adv));
  put(out, "critic/returns", stats(ret));
  if (x.values) {
    put(out, "critic/values", stats(val));
    out["critic/vf_explained_var"] = 1 - variance(ret.map((v, k) => v - val[k])) / (variance(ret) + 1e-5);
  }
  put(out, "response_length", stats(responseLength));
  out["response_length/clip_ratio"] = rows.length ? responseLength.filter((l) => l === R).length / rows.length : 0;
  put(out, "prompt_length", stats(promptLength));
  out["prompt_length/clip_ratio"] = rows.length ? promptLength.filter((l) => l === P).length / rows.length : 0;
  return out;
}

/** The actor update's metrics (verl's `actor/…` names). */
export function actorMetrics(m: StepMetrics): Record<string, number> {
  return {
    "actor/pg_loss": m.pg_loss,
    "actor/pg_clipfrac": m.clip_frac,
    "actor/pg_clipfrac_lower": m.clip_frac_lower,
    "actor/ppo_kl": m.approx_kl,
    "actor/entropy": m.entropy,
    "actor/grad_norm": m.grad_norm,
    "actor/loss": m.loss,
  };
}

/** One set of critic metrics for several value steps: token-weighted means of the taken (not skipped) steps. */
export function combineValueMetrics(all: readonly ValueStepMetrics[]): ValueStepMetrics {
  const taken = all.filter((m) => !m.skipped);
  const use = taken.length > 0 ? taken : all;
  const tokens = use.reduce((a, m) => a + m.tokens, 0);
  const avg = (k: "vf_loss" | "vf_clipfrac" | "vpred_mean" | "grad_norm"): number =>
    tokens > 0 ? use.reduce((a, m) => a + m[k] * m.tokens, 0) / tokens : use.reduce((a, m) => a + m[k], 0) / Math.max(use.length, 1);
  return {
    vf_loss: avg("vf_loss"),
    vf_clipfrac: avg("vf_clipfrac"),
    vpred_mean: avg("vpred_mean"),
    grad_norm: avg("grad_norm"),
    tokens: all.reduce((a, m) => a + m.tokens, 0),
    skipped: taken.length === 0,
    step: all[all.length - 1].step,
  };
}

/** The critic update's metrics (verl's `critic/…` names). */
export function criticMetrics(m: ValueStepMetrics): Record<string, number> {
  return {
    "critic/vf_loss": m.vf_loss,
    "critic/vf_clipfrac": m.vf_clipfrac,
    "critic/vpred_mean": m.vpred_mean,
    "critic/grad_norm": m.grad_norm,
  };
}

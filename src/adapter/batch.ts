/**
 * The batch builder: triplets of finished rollouts -> the padded training batch, at transition level (one
 * row per LLM call) or trajectory level (consecutive calls whose context extends the previous call merged
 * into one row), with upstream's batch metrics and GRPO group ids (docs/adapters.md#the-training-batch).
 *
 * Grouping: upstream puts every row of one dataset sample into one group (`uid = data_id`), so turn 1 of
 * one rollout is compared with turn 5 of another: different prompts in one baseline. `grouping` offers
 * "sample" (upstream) and "sample_turn" (default: same sample AND same turn index / merged-segment index).
 * Each batch reports how many groups have all-equal rewards (no gradient under GRPO/RLOO).
 */
import { ValidationError } from "../types/errors.ts";
import { libraryKernels, type BatchTensors, type Kernels } from "../wasm/index.ts";
import { toRagged } from "../wasm/validate.ts";
import { denseIds } from "../wasm/dense-ids.ts";
import type { Span } from "../types/span.ts";
import { TraceTripletAdapter } from "./trace-triplet.ts";
import type { Triplet } from "./types.ts";

export interface FinishedRollout {
  rollout_id: string;
  /** the dataset sample this rollout answers (GRPO groups are built from it) */
  data_id: string;
  triplets: Triplet[];
}

export type Grouping = "sample" | "sample_turn";
/** What becomes a row: each LLM call ("transition"), or each run of calls that extend one another ("trajectory"). */
export type AggregationLevel = "transition" | "trajectory";
export const AGGREGATION_LEVELS: readonly AggregationLevel[] = ["transition", "trajectory"];
export const GROUPINGS: readonly Grouping[] = ["sample", "sample_turn"];

/** Throws a ValidationError naming the option (under `path`, e.g. ["traceAggregator"]) unless both are known. */
export function checkRowOptions(
  level: string,
  grouping: string,
  path: { level: (string | number)[]; grouping: (string | number)[] } = { level: ["level"], grouping: ["grouping"] },
): void {
  const check = (value: string, allowed: readonly string[], where: (string | number)[]) => {
    if (!allowed.includes(value))
      throw new ValidationError(`${where.join(".")} must be one of ${allowed.join(", ")}, got ${JSON.stringify(value)}`, where);
  };
  check(level, AGGREGATION_LEVELS, path.level);
  check(grouping, GROUPINGS, path.grouping);
}

export interface BatchBuilderOptions {
  level?: AggregationLevel;
  maxPromptLength: number;
  maxResponseLength: number;
  padTokenId?: number;
  /** reward for rollouts without one (default 0; null makes a missing reward an error) */
  rewardFillna?: number | null;
  grouping?: Grouping;
  /**
   * Kernels to lay the batch out with. Default: the library's own Wasm instance (`libraryKernels()`), and the tensors are
   * copied out of Wasm memory so they stay valid. When given, the tensors are views over that instance's
   * memory (no copy), valid until its next kernel call: for callers that manage the lifetime themselves.
   */
  kernels?: Kernels;
}

export interface TrainingBatch {
  tensors: BatchTensors;
  rewards: Float32Array;
  dataIds: string[];
  rolloutIds: string[];
  /** transition level only */
  turnIndex: number[] | null;
  /** dense group id per row, and the key of each group */
  groups: Int32Array;
  groupKeys: string[];
  metrics: Record<string, number>;
}

interface Row {
  prompt: number[];
  response: number[];
  mask: number[] | null;
  reward: number;
  dataId: string;
  rolloutId: string;
  turn: number;
}

const ids = (v: unknown): number[] => (Array.isArray(v) ? (v as number[]) : []);
const tokens = (t: Triplet) => ({ prompt: ids(t.prompt?.token_ids), response: ids(t.response?.token_ids) });

/** A finished rollout's triplets from the spans of its latest attempt (no spans: no triplets). */
export function rolloutFromSpans(
  rollout: { rollout_id: string; data_id: string },
  spans: readonly Span[],
  adapter: { adapt(spans: Span[]): Triplet[] } = new TraceTripletAdapter(),
): FinishedRollout {
  return { rollout_id: rollout.rollout_id, data_id: rollout.data_id, triplets: spans.length > 0 ? adapter.adapt([...spans]) : [] };
}

/** The last non-null triplet reward (scanning backwards), or null. */
export function finalReward(triplets: readonly Triplet[]): number | null {
  for (let i = triplets.length - 1; i >= 0; i--)
    if (triplets[i].reward !== null && triplets[i].reward !== undefined) return triplets[i].reward;
  return null;
}

const startsWith = (a: number[], prefix: number[]) => a.length >= prefix.length && prefix.every((x, i) => a[i] === x);

/** Splits a rollout's turns into runs where each turn's prompt+response extends the previous turn's. */
export function mergeRuns(turns: { prompt: number[]; response: number[] }[]): number[][] {
  const runs: number[][] = [];
  turns.forEach((t, k) => {
    const prev = turns[k - 1];
    if (k > 0 && startsWith([...t.prompt, ...t.response], [...prev.prompt, ...prev.response])) runs[runs.length - 1].push(k);
    else runs.push([k]);
  });
  return runs;
}

/**
 * One trajectory row from a run of turns: the first turn's prompt, then every later token, with loss mask
 * 1 on model-generated tokens and 0 on tokens the environment added. Deviation from upstream
 * (docs/adapters.md#the-training-batch): its two slicing slips (a mask longer than the response after prompt
 * overflow; the whole prompt appended again when no new token came between turns) are not reproduced; the
 * row is always exactly the last turn's prompt+response with a mask aligned to it.
 */
export function trajectoryRow(turns: { prompt: number[]; response: number[] }[], run: number[], P: number) {
  const g0 = turns[run[0]];
  let prompt = g0.prompt;
  let resp: number[] = [],
    mask: number[] = [];
  if (run[0] > 0 && prompt.length > P) {
    resp = prompt.slice(P);
    mask = new Array(resp.length).fill(1); // upstream trains on the overflow (kept)
    prompt = prompt.slice(0, P);
  }
  resp = resp.concat(g0.response);
  mask = mask.concat(new Array(g0.response.length).fill(1));
  let have = g0.prompt.length + g0.response.length;
  for (const k of run.slice(1)) {
    const t = turns[k];
    const newPrompt = t.prompt.slice(Math.min(have, t.prompt.length));
    const newResp = t.response.slice(Math.max(0, have - t.prompt.length));
    resp = resp.concat(newPrompt, newResp);
    mask = mask.concat(new Array(newPrompt.length).fill(0), new Array(newResp.length).fill(1));
    have = t.prompt.length + t.response.length;
  }
  return { prompt, response: resp, mask };
}

export function buildTrainingBatch(rollouts: readonly FinishedRollout[], o: BatchBuilderOptions): TrainingBatch {
  const level = o.level ?? "transition";
  const grouping = o.grouping ?? "sample_turn";
  checkRowOptions(level, grouping);
  const fillna = o.rewardFillna === undefined ? 0 : o.rewardFillna;
  const P = o.maxPromptLength,
    R = o.maxResponseLength;
  const rows: Row[] = [];
  const metrics: Record<string, number> = {};
  let rewardSum = 0,
    withTrace = 0,
    withReward = 0,
    unmerged = 0,
    turnsTotal = 0;
  const turnLengths: number[] = [];

  for (const r of rollouts) {
    let reward = finalReward(r.triplets);
    if (reward !== null) withReward++;
    else if (fillna === null) throw new ValidationError(`rollout ${r.rollout_id} has no reward and rewardFillna is null`, ["rewardFillna"]);
    else reward = fillna;
    rewardSum += reward;
    if (r.triplets.length === 0) continue;
    withTrace++;
    const turns = r.triplets.map(tokens);
    if (level === "transition") {
      turns.forEach((t, k) => rows.push({ ...t, mask: null, reward: reward!, dataId: r.data_id, rolloutId: r.rollout_id, turn: k }));
    } else {
      turnsTotal += turns.length;
      for (const t of turns) turnLengths.push(t.response.length);
      const runs = mergeRuns(turns);
      if (runs.length > 1) unmerged++;
      runs.forEach((run, k) => {
        const row = trajectoryRow(turns, run, P);
        rows.push({ ...row, reward: reward!, dataId: r.data_id, rolloutId: r.rollout_id, turn: k });
      });
    }
  }

  const rewards = Float32Array.from(rows, (r) => r.reward);
  const laid = (o.kernels ?? libraryKernels()).batchLayout({
    prompts: toRagged(rows.map((r) => r.prompt)),
    responses: toRagged(rows.map((r) => r.response)),
    responseMasks: level === "trajectory" ? toRagged(rows.map((r) => r.mask ?? [])) : null,
    rewards,
    maxPromptLength: P,
    maxResponseLength: R,
    padTokenId: o.padTokenId ?? 0,
  });
  const tensors = o.kernels ? laid : copyTensors(laid);

  const { ids: groups, keys: groupKeys } = denseIds(rows.map((r) => (grouping === "sample" ? r.dataId : `${r.dataId}#${r.turn}`)));

  metrics["training/reward"] = rollouts.length > 0 ? rewardSum / rollouts.length : 0;
  metrics["training/n_rollouts"] = rollouts.length;
  metrics["training/n_rollouts_w_trace"] = withTrace;
  metrics["training/n_rollouts_w_reward"] = withReward;
  metrics["training/n_truncated_triplets"] = tensors.nTruncated;
  metrics["training/n_triplets"] = rows.length;
  Object.assign(metrics, tokenMetrics(tensors));
  if (level === "trajectory") {
    metrics["training/n_unmerged_rollouts"] = unmerged;
    metrics["training/n_triplets_by_turn"] = turnsTotal;
    metrics["training/avg_response_length_by_turn"] = turnLengths.length ? turnLengths.reduce((a, b) => a + b, 0) / turnLengths.length : 0;
    metrics["training/max_response_length_by_turn"] = turnLengths.length ? Math.max(...turnLengths) : 0;
    metrics["training/min_response_length_by_turn"] = turnLengths.length ? Math.min(...turnLengths) : 0;
  }
  Object.assign(metrics, groupMetrics(groups, groupKeys.length, rewards));
  return {
    tensors,
    rewards,
    dataIds: rows.map((r) => r.dataId),
    rolloutIds: rows.map((r) => r.rolloutId),
    turnIndex: level === "transition" ? rows.map((r) => r.turn) : null,
    groups,
    groupKeys,
    metrics,
  };
}

/**
 * What a step costs and trains, at either level: `training/n_tokens`, the attended tokens of every row
 * (prompt and response, what each forward pass reads); `training/n_response_tokens`, those in the
 * response columns; `training/n_loss_tokens`, the tokens under the response mask (the model's own tokens,
 * the only ones the loss trains; at transition level every response token).
 */
export function tokenMetrics(t: {
  n: number;
  P: number;
  R: number;
  attentionMask: ArrayLike<number>;
  responseMask: ArrayLike<number>;
}): Record<string, number> {
  const W = t.P + t.R;
  let all = 0,
    response = 0,
    loss = 0;
  for (let i = 0; i < t.n; i++)
    for (let j = 0; j < W; j++) {
      const a = t.attentionMask[i * W + j];
      all += a;
      if (j >= t.P) response += a;
    }
  for (let k = 0; k < t.n * t.R; k++) loss += t.responseMask[k];
  return { "training/n_tokens": all, "training/n_response_tokens": response, "training/n_loss_tokens": loss };
}

/** The tensors in fresh JS memory (out of a shared Wasm arena that the next kernel call reuses). */
function copyTensors(t: BatchTensors): BatchTensors {
  return {
    ...t,
    prompts: t.prompts.slice(),
    responses: t.responses.slice(),
    inputIds: t.inputIds.slice(),
    attentionMask: t.attentionMask.slice(),
    positionIds: t.positionIds.slice(),
    responseMask: t.responseMask.slice(),
    tokenLevelScores: t.tokenLevelScores.slice(),
    isDrop: t.isDrop.slice(),
  };
}

/**
 * Group statistics: `training/n_groups`, `training/n_singleton_groups`, and `training/n_tied_groups` /
 * `training/tied_group_ratio`: groups of two or more rows whose rewards are all equal (max == min), which
 * carry no gradient under GRPO and RLOO. Singletons are counted apart: GRPO keeps their reward as the advantage.
 * `training/n_zero_adv_groups` is upstream HEAD's count (max - min == 0, singletons included).
 */
export function groupMetrics(groups: Int32Array, G: number, rewards: Float32Array): Record<string, number> {
  const lo = new Float64Array(G).fill(Infinity),
    hi = new Float64Array(G).fill(-Infinity),
    count = new Int32Array(G);
  groups.forEach((g, i) => {
    lo[g] = Math.min(lo[g], rewards[i]);
    hi[g] = Math.max(hi[g], rewards[i]);
    count[g]++;
  });
  let tied = 0,
    singletons = 0,
    multi = 0,
    zeroSpread = 0;
  for (let g = 0; g < G; g++) {
    if (count[g] > 0 && hi[g] === lo[g]) zeroSpread++;
    if (count[g] === 1) singletons++;
    else if (count[g] > 1) {
      multi++;
      if (hi[g] === lo[g]) tied++;
    }
  }
  return {
    "training/n_groups": G,
    "training/n_singleton_groups": singletons,
    "training/n_tied_groups": tied,
    "training/tied_group_ratio": multi > 0 ? tied / multi : 0,
    "training/n_zero_adv_groups": zeroSpread,
  };
}

/** Upstream's validation metrics (`val/…`): reward and response lengths over rollouts. */
export function validationMetrics(rollouts: readonly FinishedRollout[], fillna = 0): Record<string, number> {
  const n = rollouts.length;
  const traced = rollouts.filter((r) => r.triplets.length > 0);
  const lens = traced.map((r) => r.triplets.map((t) => tokens(t).response.length));
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  return {
    "val/n_rollouts": n,
    "val/n_rollouts_w_trace": traced.length,
    "val/n_rollouts_w_reward": rollouts.filter((r) => finalReward(r.triplets) !== null).length,
    "val/reward": mean(rollouts.map((r) => finalReward(r.triplets) ?? fillna)),
    "val/mean_response_length": mean(lens.map(mean)),
    "val/sum_response_length": mean(lens.map((l) => l.reduce((a, b) => a + b, 0))),
    "val/turn_count": mean(lens.map((l) => l.length)),
  };
}

/**
 * Rollout-level advantage (newer Agent Lightning; docs/training.md#advantage-estimators): run an outcome estimator on one
 * representative row per rollout, check that it produced one scalar per rollout, and broadcast that scalar
 * over every row (turn) of the rollout under its response mask. Row sums, row scalars and the broadcast
 * run in the kernels; grouping by id strings stays here.
 */
import { LightningError, ValidationError } from "../types/errors.ts";
import type { AdvantageOutput, Kernels } from "./types.ts";
import { denseIds } from "./dense-ids.ts";

export interface RolloutLevelInput {
  rewards: Float32Array; // token_level_rewards [B, T]
  mask: Float32Array; // response_mask [B, T]
  B: number;
  T: number;
  rolloutIds: readonly string[] | null | undefined;
  /** GRPO group id per row; defaults to dataIds */
  uids?: readonly string[] | null;
  dataIds?: readonly string[] | null;
}

/** What the estimator sees: the representative rows, their uids, and the rollout ids in order. */
export interface RepresentativeBatch {
  rewards: Float32Array;
  mask: Float32Array;
  B: number;
  T: number;
  uids: string[];
  rolloutIds: string[];
}

export interface RolloutLevelResult extends Partial<AdvantageOutput> {
  advantages: Float32Array;
  returns?: Float32Array;
  uids: string[];
  metrics: Record<string, number>;
}

const allclose = (a: number, b: number) => Math.abs(a - b) <= 1e-8 + 1e-5 * Math.abs(b);

export function computeRolloutLevelAdvantage(
  kernels: Kernels,
  x: RolloutLevelInput,
  estimator: (batch: RepresentativeBatch) => { advantages: Float32Array; returns?: Float32Array | null },
): RolloutLevelResult {
  const { B, T } = x;
  if (!x.rolloutIds) throw new LightningError("rollout-level advantage needs the non-tensor 'rollout_id_list'");
  if (x.rolloutIds.length !== B) throw new LightningError(`'rollout_id_list' has ${x.rolloutIds.length} entries for ${B} rows`);
  const uids = x.uids ?? x.dataIds;
  if (!uids) throw new LightningError("rollout-level advantage needs 'uid' or 'data_id_list'");
  if (uids.length !== B) throw new LightningError(`'uid' has ${uids.length} entries for ${B} rows`);

  const { ids: rowRollout, keys: order } = denseIds(x.rolloutIds);
  const K = order.length;
  const first = new Int32Array(K).fill(-1),
    rows = new Int32Array(K);
  rowRollout.forEach((k, i) => {
    if (first[k] < 0) first[k] = i;
    rows[k]++;
  });

  const sums = kernels.rowSums(x.rewards, B, T).slice();
  for (let i = 0; i < B; i++) {
    const k = rowRollout[i],
      f = first[k];
    if (uids[i] !== uids[f]) throw new LightningError(`rollout ${order[k]} spans several uids (${uids[f]}, ${uids[i]})`);
    if (!allclose(sums[i], sums[f])) {
      throw new LightningError(`rows of rollout ${order[k]} must carry the same scalar token_level_rewards (${sums[f]} vs ${sums[i]})`);
    }
  }

  const rep: RepresentativeBatch = {
    rewards: new Float32Array(K * T),
    mask: new Float32Array(K * T),
    B: K,
    T,
    uids: Array.from(first, (f) => uids[f]),
    rolloutIds: order,
  };
  first.forEach((f, k) => {
    rep.rewards.set(x.rewards.subarray(f * T, f * T + T), k * T);
    rep.mask.set(x.mask.subarray(f * T, f * T + T), k * T);
  });
  const out = estimator(rep);

  const scalarsOf = (values: Float32Array, what: string): Float32Array => {
    const { first: s, status } = kernels.rowScalars(values, rep.mask, K, T);
    status.forEach((st, k) => {
      if (st === 0) throw new LightningError(`rollout ${order[k]} has no response token to read its ${what} from`);
      if (st === 2)
        throw new LightningError(
          `the estimator must produce scalar outcome-style advantages; rollout ${order[k]}'s ${what} vary over tokens`,
        );
    });
    return s.slice();
  };
  const advScalars = scalarsOf(out.advantages, "advantages");
  const retScalars = out.returns ? scalarsOf(out.returns, "returns") : null;
  const advantages = kernels.broadcastScalars(advScalars, rowRollout, x.mask, B, T).slice();
  const returns = retScalars ? kernels.broadcastScalars(retScalars, rowRollout, x.mask, B, T).slice() : undefined;
  return {
    advantages,
    returns,
    uids: [...uids],
    metrics: {
      "training/rollout_level_advantage/n_rows": B,
      "training/rollout_level_advantage/n_rollouts": K,
      "training/rollout_level_advantage/n_multi_row_rollouts": Array.from(rows).filter((n) => n > 1).length,
      "training/rollout_level_advantage/max_rows_per_rollout": K > 0 ? Math.max(...rows) : 0,
    },
  };
}

/**
 * normalize_advantages_by_rollout (newer Agent Lightning, loss mode `per_rollout_mean`): divide each row's
 * advantages by max(1, tokens of its rollout x numTrainedRows), so every rollout carries the same total
 * weight whatever its number of turns and tokens. Returns a new array.
 */
export function normalizeAdvantagesByRollout(
  advantages: Float32Array,
  mask: Float32Array,
  B: number,
  T: number,
  rolloutIds: readonly string[],
  numTrainedRows: number,
): Float32Array {
  if (rolloutIds.length !== B)
    throw new ValidationError(`rollout_ids length ${rolloutIds.length} does not match ${B} rows`, ["rollout_ids"]);
  if (!(numTrainedRows > 0)) throw new ValidationError(`num_trained_rows must be positive, got ${numTrainedRows}`, ["num_trained_rows"]);
  const { ids, keys } = denseIds(rolloutIds);
  const tokens = new Float64Array(keys.length);
  for (let i = 0; i < B; i++) for (let t = 0; t < T; t++) tokens[ids[i]] += mask[i * T + t];
  const out = new Float32Array(B * T);
  for (let i = 0; i < B; i++) {
    const divisor = Math.max(1, tokens[ids[i]] * numTrainedRows);
    for (let t = 0; t < T; t++) out[i * T + t] = advantages[i * T + t] / divisor;
  }
  return out;
}

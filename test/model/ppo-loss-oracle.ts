/**
 * TEST ORACLE for src/model/ppo-loss.ts: verl's `compute_policy_loss_vanilla`, `agg_loss`,
 * `masked_mean` and `kl_penalty`, transcribed line by line over rows of plain numbers (loss values and
 * metrics only; the production gradients are checked against finite differences of the production
 * loss, which this oracle pins down). Written independently of the production code, which fuses
 * everything into one pass over precomputed aggregation weights.
 * One deliberate departure from verl, shared with production: `seq-mean-token-mean` counts a row with
 * no response tokens as 0 (verl divides by zero there).
 */
import type { KlLossType, LossAggMode, PolicyLossOptions } from "../../src/model/train-types.ts";

type Mat = number[][];

const map2 = (a: Mat, b: Mat, f: (x: number, y: number) => number): Mat => a.map((row, i) => row.map((x, t) => f(x, b[i][t])));
const sum = (xs: number[]): number => xs.reduce((s, x) => s + x, 0);
const mean = (xs: number[]): number => sum(xs) / xs.length;

/** verl masked_mean: sum(x * mask) / (sum(mask) + 1e-8). */
export function maskedMean(x: Mat, mask: Mat): number {
  return sum(map2(x, mask, (v, m) => v * m).flat()) / (sum(mask.flat()) + 1e-8);
}

/** verl agg_loss. */
export function aggLossOracle(loss: Mat, mask: Mat, mode: LossAggMode): number {
  const rowSums = map2(loss, mask, (v, m) => v * m).map(sum);
  switch (mode) {
    case "token-mean":
      return maskedMean(loss, mask);
    case "seq-mean-token-sum":
      return mean(rowSums);
    case "seq-mean-token-mean":
      return mean(rowSums.map((s, i) => (sum(mask[i]) > 0 ? s / sum(mask[i]) : 0)));
    case "seq-mean-token-sum-norm":
      return sum(rowSums) / loss[0].length;
  }
}

/** verl kl_penalty, all aliases. */
export function klPenaltyOracle(logp: number, ref: number, kind: KlLossType): number {
  switch (kind) {
    case "kl":
    case "k1":
      return logp - ref;
    case "abs":
      return Math.abs(logp - ref);
    case "mse":
    case "k2":
      return 0.5 * (logp - ref) ** 2;
    case "low_var_kl":
    case "k3": {
      const kl = Math.min(Math.max(ref - logp, -20), 20);
      const kld = Math.exp(kl) - kl - 1;
      return Math.min(Math.max(kld, -10), 10);
    }
  }
}

export interface OracleInput {
  logProbs: Mat;
  oldLogProbs: Mat;
  advantages: Mat;
  responseMask: Mat;
  entropy: Mat;
  refLogProbs: Mat;
}

/** verl compute_policy_loss_vanilla, then the actor's entropy bonus and KL loss. */
export function ppoLossOracle(x: OracleInput, o: Required<PolicyLossOptions>) {
  const negativeApproxKl = map2(x.logProbs, x.oldLogProbs, (lp, old) => Math.min(Math.max(lp - old, -20), 20));
  const ratio = negativeApproxKl.map((row) => row.map(Math.exp));
  const ppoKl = maskedMean(
    negativeApproxKl.map((row) => row.map((v) => -v)),
    x.responseMask,
  );
  const pgLosses1 = map2(x.advantages, ratio, (a, r) => -a * r);
  const pgLosses2 = map2(x.advantages, ratio, (a, r) => -a * Math.min(Math.max(r, 1 - o.clipRatioLow), 1 + o.clipRatioHigh));
  const clipPgLosses1 = map2(pgLosses1, pgLosses2, Math.max);
  const pgClipfrac = maskedMean(
    map2(pgLosses2, pgLosses1, (l2, l1) => (l2 > l1 ? 1 : 0)),
    x.responseMask,
  );
  const pgLosses3 = x.advantages.map((row) => row.map((a) => -a * o.clipRatioC));
  const clipPgLosses2 = map2(pgLosses3, clipPgLosses1, Math.min);
  const lowerHit = map2(clipPgLosses1, pgLosses3, (c1, l3) => (c1 > l3 ? 1 : 0));
  const pgClipfracLower = maskedMean(
    map2(lowerHit, x.advantages, (h, a) => h * (a < 0 ? 1 : 0)),
    x.responseMask,
  );
  const pgLosses = x.advantages.map((row, i) => row.map((a, t) => (a < 0 ? clipPgLosses2[i][t] : clipPgLosses1[i][t])));
  const pgLoss = aggLossOracle(pgLosses, x.responseMask, o.lossAggMode);
  const entropyLoss = aggLossOracle(x.entropy, x.responseMask, o.lossAggMode);
  const kld = map2(x.logProbs, x.refLogProbs, (lp, ref) => klPenaltyOracle(lp, ref, o.klLossType));
  const klLoss = aggLossOracle(kld, x.responseMask, o.lossAggMode);
  return {
    loss: pgLoss - o.entropyCoeff * entropyLoss + o.klLossCoef * klLoss,
    pg_loss: pgLoss,
    entropy_loss: entropyLoss,
    kl_loss: klLoss,
    clip_frac: pgClipfrac,
    clip_frac_lower: pgClipfracLower,
    approx_kl: ppoKl,
  };
}

/**
 * TEST ORACLE for src/model/ppo-loss.ts: verl's `compute_policy_loss_{vanilla,gspo,gpg,clip_cov,kl_cov,cispo}`,
 * `agg_loss`, `masked_mean` and `kl_penalty`, transcribed line by line over rows of plain numbers with
 * torch's semantics (loss values and metrics only; the production gradients are checked against finite
 * differences of the production loss, which this oracle pins down, and against torch autograd goldens).
 * Written independently of the production code, which fuses everything into one pass over precomputed
 * aggregation weights. verl's names are kept, so each line can be read next to verl's.
 * Departures from verl, shared with production:
 * - `seq-mean-token-mean` counts a row with no response tokens as 0 (verl divides by zero there);
 * - clip_cov's random draw (torch.randperm) is the caller's `randperm`;
 * - kl_cov's torch.topk takes the earlier token first on ties;
 * - metrics verl does not return for a mode are 0.
 */
import type { KlLossType, LossAggMode, PolicyLossOptions } from "../../src/model/train-types.ts";

type Mat = number[][];

const map2 = (a: Mat, b: Mat, f: (x: number, y: number) => number): Mat => a.map((row, i) => row.map((x, t) => f(x, b[i][t])));
const map1 = (a: Mat, f: (x: number) => number): Mat => a.map((row) => row.map(f));
const sum = (xs: number[]): number => xs.reduce((s, x) => s + x, 0);
const mean = (xs: number[]): number => sum(xs) / xs.length;
const clamp = (x: number, lo: number, hi: number): number => Math.min(Math.max(x, lo), hi);

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

/** What a policy loss function returns: pg_loss and its metrics (0 where verl has none). */
interface PgOut {
  pg_loss: number;
  clip_frac: number;
  clip_frac_lower: number;
  approx_kl: number;
}

/** torch.randperm(len) for clip_cov; `candidates` are torch.nonzero's [row, col] pairs, in its order. */
export type RandPerm = (len: number, candidates: Array<[number, number]>) => number[];

/** compute_policy_loss_vanilla */
export function vanillaOracle(x: OracleInput, o: Required<PolicyLossOptions>): PgOut {
  const negativeApproxKl = map2(x.logProbs, x.oldLogProbs, (lp, old) => clamp(lp - old, -20, 20));
  const ratio = map1(negativeApproxKl, Math.exp);
  const ppoKl = maskedMean(
    map1(negativeApproxKl, (v) => -v),
    x.responseMask,
  );
  const pgLosses1 = map2(x.advantages, ratio, (a, r) => -a * r);
  const pgLosses2 = map2(x.advantages, ratio, (a, r) => -a * clamp(r, 1 - o.clipRatioLow, 1 + o.clipRatioHigh));
  const clipPgLosses1 = map2(pgLosses1, pgLosses2, Math.max);
  const pgClipfrac = maskedMean(
    map2(pgLosses2, pgLosses1, (l2, l1) => (l2 > l1 ? 1 : 0)),
    x.responseMask,
  );
  const pgLosses3 = map1(x.advantages, (a) => -a * o.clipRatioC);
  const clipPgLosses2 = map2(pgLosses3, clipPgLosses1, Math.min);
  const lowerHit = map2(clipPgLosses1, pgLosses3, (c1, l3) => (c1 > l3 ? 1 : 0));
  const pgClipfracLower = maskedMean(
    map2(lowerHit, x.advantages, (h, a) => h * (a < 0 ? 1 : 0)),
    x.responseMask,
  );
  const pgLosses = x.advantages.map((row, i) => row.map((a, t) => (a < 0 ? clipPgLosses2[i][t] : clipPgLosses1[i][t])));
  const pgLoss = aggLossOracle(pgLosses, x.responseMask, o.lossAggMode);
  return { pg_loss: pgLoss, clip_frac: pgClipfrac, clip_frac_lower: pgClipfracLower, approx_kl: ppoKl };
}

/** compute_policy_loss_gspo (values only: lp - lp.detach() is 0, so the token ratio is the sequence's) */
export function gspoOracle(x: OracleInput, o: Required<PolicyLossOptions>): PgOut {
  const negativeApproxKl = map2(x.logProbs, x.oldLogProbs, (lp, old) => lp - old);
  const seqLengths = x.responseMask.map((row) => Math.max(sum(row), 1));
  const negativeApproxKlSeq = map2(negativeApproxKl, x.responseMask, (v, m) => v * m).map((row, i) => sum(row) / seqLengths[i]);
  const logSeqImportanceRatio = x.logProbs.map((row, i) => row.map((lp) => Math.min(lp - lp + negativeApproxKlSeq[i], 10)));
  const seqImportanceRatio = map1(logSeqImportanceRatio, Math.exp);
  const pgLosses1 = map2(x.advantages, seqImportanceRatio, (a, r) => -a * r);
  const pgLosses2 = map2(x.advantages, seqImportanceRatio, (a, r) => -a * clamp(r, 1 - o.clipRatioLow, 1 + o.clipRatioHigh));
  const pgLosses = map2(pgLosses1, pgLosses2, Math.max);
  const pgLoss = aggLossOracle(pgLosses, x.responseMask, "seq-mean-token-mean");
  const pgClipfrac = maskedMean(
    map2(pgLosses2, pgLosses1, (l2, l1) => (l2 > l1 ? 1 : 0)),
    x.responseMask,
  );
  const ppoKl = maskedMean(
    map1(negativeApproxKl, (v) => -v),
    x.responseMask,
  );
  return { pg_loss: pgLoss, clip_frac: pgClipfrac, clip_frac_lower: 0, approx_kl: ppoKl };
}

/** compute_policy_loss_gpg (verl returns no metrics; ppo_kl as the others compute it) */
export function gpgOracle(x: OracleInput, o: Required<PolicyLossOptions>): PgOut {
  const pgLosses = map2(x.logProbs, x.advantages, (lp, a) => -lp * a);
  const pgLoss = aggLossOracle(pgLosses, x.responseMask, o.lossAggMode);
  const ppoKl = maskedMean(
    map2(x.logProbs, x.oldLogProbs, (lp, old) => -(lp - old)),
    x.responseMask,
  );
  return { pg_loss: pgLoss, clip_frac: 0, clip_frac_lower: 0, approx_kl: ppoKl };
}

/** compute_policy_loss_clip_cov; also returns corr (0 on the cut tokens). */
export function clipCovOracle(x: OracleInput, o: Required<PolicyLossOptions>, randperm: RandPerm): PgOut & { corr: Mat } {
  const negativeApproxKl = map2(x.logProbs, x.oldLogProbs, (lp, old) => lp - old);
  const ratio = map1(negativeApproxKl, Math.exp);
  const ppoKl = maskedMean(
    map1(negativeApproxKl, (v) => -v),
    x.responseMask,
  );
  const pgLosses1 = map2(x.advantages, ratio, (a, r) => -a * r);
  const corr = map1(x.advantages, () => 1);
  const pgLosses2 = map2(x.advantages, ratio, (a, r) => -a * clamp(r, 1 - o.clipRatioLow, 1 + o.clipRatioHigh));
  const clipByOrigin = x.responseMask.map((row, i) => row.map((m, t) => pgLosses2[i][t] > pgLosses1[i][t] && m > 0));
  const meanAdv = maskedMean(x.advantages, x.responseMask);
  const meanLp = maskedMean(x.logProbs, x.responseMask);
  const covAll = map2(x.advantages, x.logProbs, (a, lp) => (a - meanAdv) * (lp - meanLp));
  covAll.forEach((row, i) =>
    row.forEach((_, t) => {
      if (x.responseMask[i][t] === 0) covAll[i][t] = -Infinity;
      if (clipByOrigin[i][t]) covAll[i][t] = -Infinity;
    }),
  );
  const clipNum = Math.max(Math.trunc(o.clipCovRatio * sum(x.responseMask.flat())), 1);
  let topKIdx: Array<[number, number]> = [];
  covAll.forEach((row, i) =>
    row.forEach((c, t) => {
      if (c < o.clipCovUb && c > o.clipCovLb && x.responseMask[i][t] > 0) topKIdx.push([i, t]);
    }),
  );
  if (topKIdx.length > 0) {
    const perm = randperm(topKIdx.length, topKIdx);
    topKIdx = perm.slice(0, Math.min(clipNum, topKIdx.length)).map((j) => topKIdx[j]);
  }
  for (const [i, t] of topKIdx) corr[i][t] = 0;
  const pgClipfrac = maskedMean(
    map1(corr, (c) => (c === 0 ? 1 : 0)),
    x.responseMask,
  );
  const pgLosses = map2(map2(pgLosses1, pgLosses2, Math.max), corr, (l, c) => l * c);
  const pgLoss = aggLossOracle(pgLosses, x.responseMask, o.lossAggMode);
  return { pg_loss: pgLoss, clip_frac: pgClipfrac, clip_frac_lower: 0, approx_kl: ppoKl, corr };
}

/** compute_policy_loss_kl_cov; also returns the tokens given the KL term. */
export function klCovOracle(x: OracleInput, o: Required<PolicyLossOptions>): PgOut & { penalised: Array<[number, number]> } {
  const negativeApproxKl = map2(x.logProbs, x.oldLogProbs, (lp, old) => lp - old);
  const absKl = map1(negativeApproxKl, Math.abs);
  const ratio = map1(negativeApproxKl, Math.exp);
  const ppoKlAbs = maskedMean(map1(negativeApproxKl, Math.abs), x.responseMask);
  const pgLosses1 = map2(x.advantages, ratio, (a, r) => -a * r);
  const pgLossesKl = map2(pgLosses1, absKl, (l, k) => l + o.ppoKlCoef * k);
  const pgLosses = pgLosses1.map((row) => row.slice());
  const cols = x.advantages[0].length;
  const allValidIdx: number[] = [];
  x.responseMask.flat().forEach((m, j) => {
    if (m > 0) allValidIdx.push(j);
  });
  const allValidAdv = allValidIdx.map((j) => x.advantages[Math.trunc(j / cols)][j % cols]);
  const allValidLogp = allValidIdx.map((j) => x.logProbs[Math.trunc(j / cols)][j % cols]);
  const k = Math.min(o.klCovRatio, allValidAdv.length);
  const penalised: Array<[number, number]> = [];
  if (k !== 0) {
    const advMean = mean(allValidAdv);
    const logpMean = mean(allValidLogp);
    const covLstAll = allValidAdv.map((a, j) => (a - advMean) * (allValidLogp[j] - logpMean));
    const kPercentNums = Math.max(1, Math.trunc(covLstAll.length * o.klCovRatio));
    const largeCovIdxs = covLstAll
      .map((c, j) => [c, j] as const)
      .sort((a, b) => b[0] - a[0] || a[1] - b[1])
      .slice(0, kPercentNums)
      .map(([, j]) => j);
    for (const j of largeCovIdxs) {
      const flat = allValidIdx[j];
      const [i, t] = [Math.trunc(flat / cols), flat % cols];
      pgLosses[i][t] = pgLossesKl[i][t];
      penalised.push([i, t]);
    }
  }
  const pgLoss = aggLossOracle(pgLosses, x.responseMask, o.lossAggMode);
  return { pg_loss: pgLoss, clip_frac: 0, clip_frac_lower: 0, approx_kl: ppoKlAbs, penalised };
}

/** compute_policy_loss_cispo */
export function cispoOracle(x: OracleInput, o: Required<PolicyLossOptions>): PgOut {
  const negativeApproxKl = map2(x.logProbs, x.oldLogProbs, (lp, old) => clamp(lp - old, -20, 20));
  const ratio = map1(negativeApproxKl, Math.exp);
  const ppoKl = maskedMean(
    map1(negativeApproxKl, (v) => -v),
    x.responseMask,
  );
  const clippedRatio = map1(ratio, (r) => clamp(r, 1 - o.clipRatioLow, 1 + o.clipRatioHigh));
  const clippedRatioSg = clippedRatio;
  const pgLosses = x.logProbs.map((row, i) => row.map((lp, t) => -clippedRatioSg[i][t] * x.advantages[i][t] * lp));
  const pgClipfrac = maskedMean(
    map2(ratio, clippedRatio, (r, c) => (r !== c ? 1 : 0)),
    x.responseMask,
  );
  const pgLoss = aggLossOracle(pgLosses, x.responseMask, o.lossAggMode);
  return { pg_loss: pgLoss, clip_frac: pgClipfrac, clip_frac_lower: 0, approx_kl: ppoKl };
}

/** The policy loss of `o.lossMode`, then the actor's entropy bonus and KL loss (dp_actor.update_policy). */
export function ppoLossOracle(x: OracleInput, o: Required<PolicyLossOptions>, randperm?: RandPerm) {
  let pg: PgOut;
  switch (o.lossMode) {
    case "vanilla":
      pg = vanillaOracle(x, o);
      break;
    case "gspo":
      pg = gspoOracle(x, o);
      break;
    case "gpg":
      pg = gpgOracle(x, o);
      break;
    case "clip_cov":
      if (randperm === undefined) throw new Error("clip_cov needs randperm");
      pg = clipCovOracle(x, o, randperm);
      break;
    case "kl_cov":
      pg = klCovOracle(x, o);
      break;
    case "cispo":
      pg = cispoOracle(x, o);
      break;
  }
  const entropyLoss = aggLossOracle(x.entropy, x.responseMask, o.lossAggMode);
  const kld = map2(x.logProbs, x.refLogProbs, (lp, ref) => klPenaltyOracle(lp, ref, o.klLossType));
  const klLoss = aggLossOracle(kld, x.responseMask, o.lossAggMode);
  return {
    loss: pg.pg_loss - o.entropyCoeff * entropyLoss + o.klLossCoef * klLoss,
    pg_loss: pg.pg_loss,
    entropy_loss: entropyLoss,
    kl_loss: klLoss,
    clip_frac: pg.clip_frac,
    clip_frac_lower: pg.clip_frac_lower,
    approx_kl: pg.approx_kl,
  };
}

/**
 * The coefficient β of the KL penalty in the reward (verl's `algorithm.kl_ctrl`, docs/training.md#kl-in-the-reward):
 * fixed, or adaptive (Ziegler et al. 2019): after each step β is multiplied by 1 + e·n/horizon, where
 * e = clip(KL/target − 1, −0.2, 0.2) is the step's proportional error and n its number of rows.
 */
import { ValidationError } from "../types/errors.ts";
import type { KlControllerOptions } from "./ppo-options.ts";

export interface KlController {
  /** β for the next step. */
  readonly value: number;
  /** Called once per step with that step's KL (mean over rows of each row's masked mean) and its rows. */
  update(currentKl: number, nSteps: number): void;
}

export class FixedKlController implements KlController {
  constructor(readonly value: number) {}
  update(): void {}
}

export class AdaptiveKlController implements KlController {
  value: number;
  constructor(
    initKlCoef: number,
    readonly target: number,
    readonly horizon: number,
  ) {
    this.value = initKlCoef;
  }
  update(currentKl: number, nSteps: number): void {
    const error = Math.min(Math.max(currentKl / this.target - 1, -0.2), 0.2);
    this.value *= 1 + (error * nSteps) / this.horizon;
  }
}

/** The controller `o` describes (verl's defaults: fixed, β = 0.001; adaptive: target 0.1, horizon 10000). */
export function klController(o: KlControllerOptions = {}): KlController {
  const type = o.type ?? "fixed";
  const coef = o.klCoef ?? 0.001;
  if (!(Number.isFinite(coef) && coef >= 0))
    throw new ValidationError(`klCtrl.klCoef must be a finite number >= 0, got ${coef}`, ["klCtrl", "klCoef"]);
  if (type === "fixed") return new FixedKlController(coef);
  if (type !== "adaptive")
    throw new ValidationError(`klCtrl.type must be "fixed" or "adaptive", got ${JSON.stringify(type)}`, ["klCtrl", "type"]);
  const target = o.targetKl ?? 0.1;
  const horizon = o.horizon ?? 10000;
  if (!(Number.isFinite(target) && target > 0))
    throw new ValidationError(`klCtrl.targetKl must be > 0, got ${target}`, ["klCtrl", "targetKl"]);
  if (!(Number.isFinite(horizon) && horizon > 0))
    throw new ValidationError(`klCtrl.horizon must be > 0, got ${horizon}`, ["klCtrl", "horizon"]);
  return new AdaptiveKlController(coef, target, horizon);
}

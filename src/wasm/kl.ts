/** One token's KL penalty between the policy's and the reference's log-probs (docs/training.md#kl-penalties). */
import type { KlKind } from "./types.ts";

/** verl's `kl_penalty(logp, ref, kind)` of one token; `k3` (low_var_kl) clamps its input to ±20 and its value to ±10. */
export function klValue(kind: KlKind, logp: number, ref: number): number {
  switch (kind) {
    case "k1":
      return logp - ref;
    case "abs":
      return Math.abs(logp - ref);
    case "k2":
      return 0.5 * (logp - ref) * (logp - ref);
    case "k3": {
      const x = Math.min(Math.max(ref - logp, -20), 20);
      return Math.min(Math.max(Math.exp(x) - x - 1, -10), 10);
    }
  }
}

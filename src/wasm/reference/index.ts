import type { Kernels } from "../types.ts";
import * as adv from "./advantage.ts";
import { batchLayout } from "./layout.ts";
import { extractCalls } from "./trace.ts";

/** The plain-TS oracle behind the same interface as the Wasm kernels. */
export const referenceKernels: Kernels = {
  name: "reference",
  maskedWhiten: adv.maskedWhiten,
  gae: adv.gae,
  grpo: adv.grpo,
  rloo: adv.rloo,
  grpoPassk: adv.grpoPassk,
  opo: adv.opo,
  gpg: adv.gpg,
  reinforcePlusPlus: adv.reinforcePlusPlus,
  reinforcePlusPlusBaseline: adv.reinforcePlusPlusBaseline,
  remax: adv.remax,
  klPenalty: adv.klPenalty,
  applyKlPenalty: adv.applyKlPenalty,
  broadcastScalars: adv.broadcastScalars,
  rowScalars: adv.rowScalars,
  rowSums: (x, B, T) => Float32Array.from(adv.rowSums(x, B, T)),
  batchLayout,
  extractCalls,
};

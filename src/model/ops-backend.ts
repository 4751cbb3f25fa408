/**
 * The ops a model backend provides: the heavy ops of `reference/ops.ts` and AdamW, with the reference's
 * signatures. The plain-TS reference is one backend (and the oracle); `wasm-ops.ts` is the other. The
 * light ops (embedding, residual adds, biases) always run on the reference.
 */
import * as ref from "./reference/ops.ts";
import { adamwStep } from "./reference/optim.ts";

export type ModelOps = Pick<
  typeof ref,
  | "matmul"
  | "matmulABt"
  | "matmulAtB"
  | "matmulBackward"
  | "rmsnorm"
  | "rmsnormBackward"
  | "rope"
  | "ropeBackward"
  | "attention"
  | "attentionBackward"
  | "attentionDecode"
  | "swiglu"
  | "swigluBackward"
  | "logSoftmaxGatherEntropy"
  | "logSoftmaxGatherEntropyBackward"
> & { adamwStep: typeof adamwStep };

/** The plain-TS backend: the reference itself. */
export const referenceOps: ModelOps = { ...ref, adamwStep };

/**
 * The backend interface, `ModelOps`: the ops of `reference/ops.ts` the model runs (embedding aside) and
 * AdamW, with the reference's signatures. The model's functions take one as `ops` (`forward`, `generate`,
 * `CpuDecoder`). The plain-TS reference is one (`referenceOps`, the oracle); the CPU engine's Wasm ops
 * (`WasmOps`, src/cpu/wasm-ops.ts) the other.
 */
import type { ModelConfig } from "./config.ts";
import * as ref from "./reference/ops.ts";
import type { Arr } from "./reference/ops.ts";
import { adamwStep } from "./reference/optim.ts";

/** The reference ops every backend has (`reference/ops.ts`), by name. */
const REFERENCE_OPS = [
  "matmul",
  "matmulABt",
  "matmulAtB",
  "matmulBackward",
  "rmsnorm",
  "rmsnormBackward",
  "rope",
  "ropeBackward",
  "attention",
  "attentionBackward",
  "attentionDecode",
  "swiglu",
  "swigluBackward",
  "logSoftmaxGatherEntropy",
  "logSoftmaxGatherEntropyBackward",
  "add",
  "addInPlace",
  "addBiasInPlace",
  "columnSums",
] as const;

export type ModelOps = Pick<typeof ref, (typeof REFERENCE_OPS)[number]> & {
  adamwStep: typeof adamwStep;
  /** Where the backend keeps arrays in its own memory across calls (the Wasm backend); absent: none. */
  resident?: Residency;
  /** Prefill and decode steps of the whole model, one call each, over resident weights and KV cache (the
   * Wasm backend); absent, or null for a model it does not serve: the decoder runs op by op. */
  decodeStepper?(request: DecodeStepperRequest): DecodeStepper | null;
};

/** What a fused decode step runs over: the model's tensors and its KV cache, resident already. */
export interface DecodeStepperRequest {
  config: ModelConfig;
  /** Tensors by name (paramViews). */
  p: Record<string, Arr>;
  /** The adapter: its scale, rank and tensors by name (loraState). */
  lora?: { scaling: number; config: { r: number }; views: Record<string, Arr> };
  /** Per layer, rotated keys and values, [slots, n_kv*hd] each. */
  kCache: Float32Array[];
  vCache: Float32Array[];
  slots: number;
}

/** A prompt, then one token at a time, through every layer and the head; the backend's copy of the KV
 * cache gains their k, v. */
export interface DecodeStepper {
  /** The prompt into the empty cache; the last position's logits (a fresh array), or null where the
   * backend leaves this prompt to the per-op prefill. */
  prefill(prompt: ArrayLike<number>): Float32Array | null;
  /** The logits [vocab] of `token` at position `at` (the cache holds [0, at)): a fresh array. */
  step(token: number, at: number): Float32Array;
}

/**
 * Arrays kept in a backend's memory across calls, recognised by identity: an op given a resident array
 * reads the resident copy instead of copying it in. The caller must not change a resident array except
 * through `write`. Regions are freed in stack order (`mark`, `release`).
 */
export interface Residency {
  /** Copies the arrays not yet resident in (by identity): all of them, or none (false) when they would
   * exceed the backend's resident budget (then ops copy them per call as usual). */
  pin(arrays: Iterable<Float32Array>): boolean;
  /** Re-copies array[offset, offset + length) of a resident array (no-op for others). */
  write(array: Float32Array, offset: number, length: number): void;
  /** A point to release back to. */
  mark(): number;
  /** Frees every array pinned after `mark` (all of them without one). */
  release(mark?: number): void;
  /**
   * Runs `fn` with its activations kept in the backend's memory: a Float32 result of an op called inside
   * `fn` is a view over that memory (not copied out), and handed back to an op it is read in place. The
   * scope owns those views and frees them all when `fn` returns or throws: they must not be read or
   * written afterwards (copy what must outlive it). Editing one in place inside `fn` is allowed and seen
   * by later ops (there is no second copy). Where results cannot stay (memory that is not shared, whose
   * growth would detach the views), `fn` runs with results copied out as usual. Scopes nest; `pin` and
   * `release` are refused inside one.
   */
  scoped<T>(fn: () => T): T;
  /**
   * `scoped`, except that the array `fn` returns survives: inside an enclosing scope it moves (within the
   * backend's memory) to where this scope began and belongs to the enclosing scope; outside any scope it
   * is copied out. Frees everything else `fn` made (a layer's backward temporaries).
   */
  scopedKeep<A extends Arr>(fn: () => A): A;
}

/** `fn` inside a nested activation scope of `K` whose result survives (`Residency.scopedKeep`), else as is. */
export function withActivationsKeep<A extends Arr>(K: ModelOps, fn: () => A): A {
  return K.resident ? K.resident.scopedKeep(fn) : fn();
}

/** `fn` inside an activation scope of `K` when it has one (`Residency.scoped`), else as is. */
export function withActivations<T>(K: ModelOps, fn: () => T): T {
  return K.resident ? K.resident.scoped(fn) : fn();
}

/**
 * `K`'s ops bound to it in a plain object, without the optional parts named: the same backend decoding op
 * by op (`"decodeStepper"`), or copying every array in per call (`"resident"`). Tests and benchmarks hold
 * those paths to the full backend's bits and times.
 */
export function opsWithout(K: ModelOps, ...parts: ("resident" | "decodeStepper")[]): ModelOps {
  const view: Record<string, unknown> = {};
  for (const name of [...REFERENCE_OPS, "adamwStep"] as const) view[name] = K[name].bind(K);
  if (!parts.includes("resident")) view.resident = K.resident;
  if (!parts.includes("decodeStepper")) view.decodeStepper = K.decodeStepper?.bind(K);
  return view as ModelOps;
}

/** The plain-TS backend: the reference itself. */
export const referenceOps: ModelOps = { ...ref, adamwStep };

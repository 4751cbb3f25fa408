/**
 * The kernel surface shared by the Wasm implementation (`WasmKernels`) and the plain-TS oracle
 * (`referenceKernels`), so tests and benchmarks run both through one interface.
 * Token tensors are flat row-major [B, T] Float32Arrays; the response mask is 0/1 in f32; groups are dense
 * integer ids in [0, G). Results of the Wasm side are views over Wasm memory, valid until the next call.
 */
/** The KL estimators the kernels compute (docs/training.md#kl-penalties). */
export type KlKind = "k1" | "abs" | "k2" | "k3";
/** Every name a KL option accepts (a kind, or one of verl's aliases) and the kind it names. */
export const KL_ALIASES = {
  kl: "k1",
  k1: "k1",
  abs: "abs",
  mse: "k2",
  k2: "k2",
  low_var_kl: "k3",
  k3: "k3",
} as const satisfies Record<string, KlKind>;
/** A KL kind as a loss option names it (`klLossType`): one of {@link KL_ALIASES}' keys. */
export type KlLossType = keyof typeof KL_ALIASES;

export interface TokenInput {
  /** token_level_rewards [B, T] */
  rewards: Float32Array;
  /** response_mask [B, T] */
  mask: Float32Array;
  B: number;
  T: number;
}
export interface GroupedInput extends TokenInput {
  /** group id per row [B] (dense ids >= 0) */
  groups: Int32Array;
}
export interface AdvantageOutput {
  advantages: Float32Array;
  returns: Float32Array;
}

/** Ragged integer rows: row i is values[offsets[i] .. offsets[i+1]). */
export interface RaggedI32 {
  offsets: Int32Array;
  values: Int32Array;
}

export interface LayoutInput {
  prompts: RaggedI32;
  responses: RaggedI32;
  /** Per-row loss mask over the response (trajectory level); absent: the response attention mask. */
  responseMasks?: RaggedI32 | null;
  /** Reward per row [N] */
  rewards: Float32Array;
  maxPromptLength: number;
  maxResponseLength: number;
  padTokenId: number;
}
/** The padded tensors of a training batch (docs/adapters.md#the-training-batch; int64 upstream, int32 here: token ids fit). */
export interface BatchTensors {
  n: number;
  P: number;
  R: number;
  prompts: Int32Array; // [n, P]
  responses: Int32Array; // [n, R]
  inputIds: Int32Array; // [n, P+R]
  attentionMask: Int32Array; // [n, P+R]
  positionIds: Int32Array; // [n, P+R]
  responseMask: Int32Array; // [n, R]
  tokenLevelScores: Float32Array; // [n, R] (float32, docs/departures.md#14)
  isDrop: Uint8Array; // [n]
  nTruncated: number;
}

/** A span tree encoded as columns (see src/adapter/encode.ts); index `root` has parent -1. */
export interface EncodedTrace {
  n: number;
  root: number;
  parent: Int32Array;
  start: Float64Array; // NaN for a missing time
  end: Float64Array;
  flags: Int32Array; // TRACE_FLAG bits
  agent: Int32Array; // agent id or -1
  responseId: Int32Array; // interned response id or -1
  nResponseIds: number;
  reward: Float64Array; // reward value or NaN
  options: number; // TRACE_OPT bits
}
export interface ExtractedCalls {
  /** node indices of the kept LLM calls, DFS order */
  calls: Int32Array;
  /** agent label per call: -1 = "*", else an agent id */
  labels: Int32Array;
  /** matched reward per call, NaN = none */
  rewards: Float64Array;
}

export interface Kernels {
  readonly name: string;
  maskedWhiten(x: Float32Array, mask: Float32Array, zeroPad?: boolean): Float32Array;
  gae(input: TokenInput & { values: Float32Array }, gamma: number, lam: number): AdvantageOutput;
  grpo(input: GroupedInput, normByStd?: boolean, epsilon?: number): AdvantageOutput;
  rloo(input: GroupedInput): AdvantageOutput;
  /** Pass@k: only each group's best row gets max − second max (÷ std + eps); every group needs two rows. */
  grpoPassk(input: GroupedInput, normByStd?: boolean, epsilon?: number): AdvantageOutput;
  /** OPO: score minus the group's response-length-weighted mean score. */
  opo(input: GroupedInput): AdvantageOutput;
  /** GPG: (score − group mean) × batch rows / rows with a non-zero score. */
  gpg(input: GroupedInput): AdvantageOutput;
  reinforcePlusPlus(input: TokenInput, gamma: number): AdvantageOutput;
  reinforcePlusPlusBaseline(input: GroupedInput): AdvantageOutput;
  remax(input: TokenInput & { baselines: Float32Array }): AdvantageOutput;
  klPenalty(logp: Float32Array, ref: Float32Array, kind: KlKind): Float32Array;
  applyKlPenalty(
    input: { scores: Float32Array; logp: Float32Array; ref: Float32Array; mask: Float32Array; B: number; T: number },
    kind: KlKind,
    beta: number,
  ): { rewards: Float32Array; currentKl: number };
  /** out[i, t] = scalars[rowIndex[i]] * mask[i, t] */
  broadcastScalars(scalars: Float32Array, rowIndex: Int32Array, mask: Float32Array, B: number, T: number): Float32Array;
  /** First masked value per row and a status: 0 empty mask, 1 all masked values allclose to it, 2 not. */
  rowScalars(
    x: Float32Array,
    mask: Float32Array,
    B: number,
    T: number,
    rtol?: number,
    atol?: number,
  ): { first: Float32Array; status: Uint8Array };
  rowSums(x: Float32Array, B: number, T: number): Float32Array;
  batchLayout(input: LayoutInput): BatchTensors;
  extractCalls(trace: EncodedTrace): ExtractedCalls;
}

/** The raw exports of the AssemblyScript module (assembly/index.ts); pointers are byte offsets. */
export interface KernelExports {
  memory: WebAssembly.Memory;
  heapBase(): number;
  batchLayout(
    n: number,
    P: number,
    R: number,
    pad: number,
    promptOff: number,
    promptIds: number,
    respOff: number,
    respIds: number,
    maskOff: number,
    maskVals: number,
    rewards: number,
    outPrompts: number,
    outResponses: number,
    outInputIds: number,
    outAttn: number,
    outPos: number,
    outRespMask: number,
    outScores: number,
    outDrop: number,
  ): number;
  maskedWhiten(x: number, m: number, n: number, out: number, zeroPad: number): number;
  groupScratchBytes(B: number, G: number): number;
  groupAdvantage(
    kind: number,
    r: number,
    m: number,
    groups: number,
    B: number,
    T: number,
    G: number,
    eps: number,
    out: number,
    scratch: number,
  ): number;
  gae(r: number, v: number, m: number, B: number, T: number, gamma: number, lam: number, adv: number, ret: number): void;
  discountedReturns(r: number, m: number, B: number, T: number, gamma: number, ret: number): void;
  remax(r: number, m: number, b: number, B: number, T: number, adv: number, ret: number): void;
  klPenalty(kind: number, logp: number, ref: number, n: number, out: number): void;
  applyKlPenalty(
    kind: number,
    scores: number,
    logp: number,
    ref: number,
    m: number,
    B: number,
    T: number,
    beta: number,
    rewards: number,
  ): number;
  broadcastScalars(scalars: number, rowIndex: number, m: number, B: number, T: number, out: number, scratch: number): void;
  rowScalars(x: number, m: number, B: number, T: number, rtol: number, atol: number, first: number, ok: number): void;
  rowSumsF32(r: number, B: number, T: number, out: number): void;
  traceScratchBytes(n: number, nResponseIds: number): number;
  extractCalls(
    n: number,
    root: number,
    parent: number,
    start: number,
    end: number,
    flags: number,
    agent: number,
    rid: number,
    nRid: number,
    reward: number,
    opts: number,
    scratch: number,
    outCalls: number,
    outLabels: number,
    outReward: number,
  ): number;
}

/** Names of the exported constants, mirrored by the TS enums; a test checks both agree. */
export const WHITEN_STATUS = { OK: 0, EMPTY_MASK: 1, SINGLE_TOKEN: 2 } as const;
export const GROUP_ESTIMATOR = { GRPO: 0, GRPO_NO_STD: 1, RLOO: 2, RPP_BASELINE: 3, OPO: 4, GPG: 5, PASSK: 6, PASSK_NO_STD: 7 } as const;
/** groupAdvantage returns this when every group was valid, else the first offending group. */
export const GROUP_OK = -1;
export const KL_KIND_CODE = { k1: 0, abs: 1, k2: 2, k3: 3 } as const;
export const TRACE_FLAG = { LLM: 1, REWARD_SPAN: 2, HAS_AGENT: 4, AGENT_OK: 8, EMPTY_TOKENS: 16 } as const;
export const TRACE_OPT = {
  REPAIR: 1,
  AGENT_FILTER: 2,
  EXCLUDE_IN_REWARD: 4,
  DEDUP: 8,
  SKIP_EMPTY: 16,
  FIRST_SIBLING: 32,
} as const;

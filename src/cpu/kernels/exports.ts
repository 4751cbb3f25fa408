/** The raw exports of the CPU model kernels (assembly/cpu/index.ts); pointers are byte offsets. */
export interface CpuKernelExports {
  memory: WebAssembly.Memory;
  heapBase(): number;
  FORM_AB: WebAssembly.Global;
  FORM_ABT: WebAssembly.Global;
  FORM_ATB: WebAssembly.Global;
  gemmScratchBytes(): number;
  gemm(form: number, a: number, b: number, c: number, m: number, k: number, n: number, j0: number, j1: number, scratch: number): void;
  rmsnorm(x: number, w: number, y: number, rstd: number, rows: number, dim: number, eps: number): void;
  rmsnormBackward(
    x: number,
    w: number,
    rstd: number,
    dy: number,
    dx: number,
    dwAcc: number,
    r0: number,
    r1: number,
    dim: number,
    chunk: number,
  ): void;
  rope(
    x: number,
    y: number,
    positions: number,
    invFreq: number,
    rows: number,
    heads: number,
    hd: number,
    sign: number,
    interleaved: number,
  ): void;
  swiglu(gate: number, up: number, y: number, n: number): void;
  swigluBackward(gate: number, up: number, dy: number, dgate: number, dup: number, n: number): void;
  adamw(
    params: number,
    grads: number,
    m: number,
    v: number,
    n: number,
    b1: number,
    omb1: number,
    b2: number,
    omb2: number,
    eps: number,
    stepSize: number,
    bc2Sqrt: number,
    decay: number,
  ): void;
  logSoftmaxGatherEntropy(z: number, targets: number, logprob: number, entropy: number, lse: number, rows: number, vocab: number): void;
  logSoftmaxGatherEntropyBackward(
    z: number,
    targets: number,
    lse: number,
    entropy: number,
    dlogprob: number,
    dentropy: number,
    dz: number,
    rows: number,
    vocab: number,
  ): void;
  attention(
    q: number,
    k: number,
    v: number,
    mask: number,
    out: number,
    probs: number,
    keepProbs: number,
    scratch: number,
    B: number,
    T: number,
    H: number,
    KV: number,
    hd: number,
    u0: number,
    u1: number,
  ): void;
  attentionBackward(
    q: number,
    k: number,
    v: number,
    probs: number,
    dout: number,
    dq: number,
    dk: number,
    dv: number,
    scratch: number,
    B: number,
    T: number,
    H: number,
    KV: number,
    hd: number,
  ): void;
  attentionDecode(
    q: number,
    kCache: number,
    vCache: number,
    out: number,
    scratch: number,
    len: number,
    H: number,
    KV: number,
    hd: number,
  ): void;
  addF32(a: number, b: number, y: number, n: number): void;
  addBias(x: number, bias: number, rows: number, cols: number): void;
  columnSums(x: number, y: number, acc: number, rows: number, cols: number): void;
  /** One token through the whole model over a descriptor (assembly/cpu/decode.ts, src/cpu/fused-decode.ts). */
  decodeStep(desc: number, token: number, pos: number, eps: number, loraScale: number): void;
  /** A prompt through the whole model into an empty cache over the same descriptor and a per-call table. */
  decodePrefill(desc: number, ws: number, rows: number, eps: number, loraScale: number): void;
}

/** GEMM forms (assembly/cpu/matmul.ts FORM_*): which operand is stored transposed. */
export const GEMM_FORM = { AB: 0, ABT: 1, ATB: 2 } as const;

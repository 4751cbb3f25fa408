/**
 * Plain-TypeScript forward and backward of every op of the policy model, one function each, so each
 * WGSL kernel can be tested alone against its twin here. Generic over Float32Array / Float64Array:
 * outputs take the element type of the first input (Float64 for finite-difference gradient checks).
 * Sums accumulate in JS numbers (double) and are rounded once when stored.
 *
 * Layouts are row-major. Token activations are [rows, features] with rows = batch * seq; attention
 * heads are concatenated along the features ([rows, heads * head_dim]), exactly what `x @ wq` gives.
 * Conventions (RoPE pairs, attention visibility, log-prob shift) are documented in `../config.ts`.
 */
import { ValidationError } from "../../types/errors.ts";
import { ropeInvFreq, type RopeScaling } from "../config.ts";

export type Arr = Float32Array | Float64Array;

/** A zeroed array of `n` elements with the same element type as `like`. */
export function alloc(like: Arr, n: number): Arr {
  return like instanceof Float64Array ? new Float64Array(n) : new Float32Array(n);
}

function checkLength(name: string, a: ArrayLike<number>, expected: number): void {
  if (a.length !== expected) throw new ValidationError(`${name} has ${a.length} elements, expected ${expected}`, [name]);
}

// ---------------------------------------------------------------- matmul

/** Shapes of `y[m, n] = a @ b` with inner dimension k. */
export interface MatDims {
  m: number;
  k: number;
  n: number;
}

/**
 * acc[0..n) += sum over p in [p0, p1) of coef(p) * b[p*n .. p*n+n), four rows of b per pass so the
 * accumulator is loaded and stored a quarter as often (the inner loop of matmul and matmulAtB).
 */
function axpyRows(acc: Float64Array, accOffset: number, b: Arr, n: number, coef: (p: number) => number, p0: number, p1: number): void {
  let p = p0;
  for (; p + 3 < p1; p += 4) {
    const c0 = coef(p);
    const c1 = coef(p + 1);
    const c2 = coef(p + 2);
    const c3 = coef(p + 3);
    const o0 = p * n;
    const o1 = o0 + n;
    const o2 = o1 + n;
    const o3 = o2 + n;
    for (let j = 0; j < n; j++) acc[accOffset + j] += c0 * b[o0 + j] + c1 * b[o1 + j] + c2 * b[o2 + j] + c3 * b[o3 + j];
  }
  for (; p < p1; p++) {
    const c = coef(p);
    const o = p * n;
    for (let j = 0; j < n; j++) acc[accOffset + j] += c * b[o + j];
  }
}

/** y[m,n] = a[m,k] @ b[k,n]. */
export function matmul(a: Arr, b: Arr, { m, k, n }: MatDims): Arr {
  checkLength("a", a, m * k);
  checkLength("b", b, k * n);
  const y = alloc(a, m * n);
  const acc = new Float64Array(n);
  for (let i = 0; i < m; i++) {
    acc.fill(0);
    const ao = i * k;
    axpyRows(acc, 0, b, n, (p) => a[ao + p], 0, k);
    y.set(acc, i * n);
  }
  return y;
}

/** y[m,n] = a[m,k] @ b[n,k]^T (the "B transposed" variant: dx = dy @ W^T, tied lm head). */
export function matmulABt(a: Arr, b: Arr, { m, k, n }: MatDims): Arr {
  checkLength("a", a, m * k);
  checkLength("b", b, n * k);
  const y = alloc(a, m * n);
  for (let i = 0; i < m; i++) {
    const ao = i * k;
    let j = 0;
    // four rows of b against one row of a: each a element is loaded once per four dot products
    for (; j + 3 < n; j += 4) {
      const b0 = j * k;
      const b1 = b0 + k;
      const b2 = b1 + k;
      const b3 = b2 + k;
      let s0 = 0;
      let s1 = 0;
      let s2 = 0;
      let s3 = 0;
      for (let p = 0; p < k; p++) {
        const av = a[ao + p];
        s0 += av * b[b0 + p];
        s1 += av * b[b1 + p];
        s2 += av * b[b2 + p];
        s3 += av * b[b3 + p];
      }
      const yo = i * n + j;
      y[yo] = s0;
      y[yo + 1] = s1;
      y[yo + 2] = s2;
      y[yo + 3] = s3;
    }
    for (; j < n; j++) {
      const bo = j * k;
      let s = 0;
      for (let p = 0; p < k; p++) s += a[ao + p] * b[bo + p];
      y[i * n + j] = s;
    }
  }
  return y;
}

/** y[m,n] = a[k,m]^T @ b[k,n] (the "A transposed" variant: dW = x^T @ dy). */
export function matmulAtB(a: Arr, b: Arr, { m, k, n }: MatDims): Arr {
  checkLength("a", a, k * m);
  checkLength("b", b, k * n);
  const acc = new Float64Array(m * n);
  for (let i = 0; i < m; i++) axpyRows(acc, i * n, b, n, (p) => a[p * m + i], 0, k);
  const y = alloc(a, m * n);
  y.set(acc);
  return y;
}

/** Gradients of `y = x @ w` (x [m,k], w [k,n]) given dy [m,n]: dx = dy @ w^T, dw = x^T @ dy. */
export function matmulBackward(x: Arr, w: Arr, dy: Arr, { m, k, n }: MatDims): { dx: Arr; dw: Arr } {
  return { dx: matmulABt(dy, w, { m, k: n, n: k }), dw: matmulAtB(x, dy, { m: k, k: m, n }) };
}

// ---------------------------------------------------------------- embedding

export interface EmbeddingDims {
  vocab: number;
  dim: number;
}

/** out[r,:] = table[ids[r],:]. Throws on an id outside [0, vocab). */
export function embedding(ids: ArrayLike<number>, table: Arr, { vocab, dim }: EmbeddingDims): Arr {
  checkLength("table", table, vocab * dim);
  const out = alloc(table, ids.length * dim);
  for (let r = 0; r < ids.length; r++) {
    const id = ids[r];
    if (!(id >= 0 && id < vocab && Number.isInteger(id)))
      throw new ValidationError(`token id ${id} outside [0, ${vocab})`, ["inputIds", r]);
    out.set(table.subarray(id * dim, (id + 1) * dim), r * dim);
  }
  return out;
}

/** dTable[v,:] = sum of dy[r,:] over rows r with ids[r] == v (scatter-add). */
export function embeddingBackward(ids: ArrayLike<number>, dy: Arr, { vocab, dim }: EmbeddingDims): Arr {
  checkLength("dy", dy, ids.length * dim);
  const acc = new Float64Array(vocab * dim);
  for (let r = 0; r < ids.length; r++) {
    const o = ids[r] * dim;
    for (let j = 0; j < dim; j++) acc[o + j] += dy[r * dim + j];
  }
  const d = alloc(dy, vocab * dim);
  d.set(acc);
  return d;
}

// ---------------------------------------------------------------- RMSNorm

export interface NormDims {
  rows: number;
  dim: number;
  eps: number;
}

/** y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps) per row; rstd [rows] is kept for the backward. */
export function rmsnorm(x: Arr, w: Arr, { rows, dim, eps }: NormDims): { y: Arr; rstd: Arr } {
  checkLength("x", x, rows * dim);
  checkLength("w", w, dim);
  const y = alloc(x, rows * dim);
  const rstd = alloc(x, rows);
  for (let r = 0; r < rows; r++) {
    const o = r * dim;
    let ss = 0;
    for (let j = 0; j < dim; j++) ss += x[o + j] * x[o + j];
    const rs = 1 / Math.sqrt(ss / dim + eps);
    rstd[r] = rs;
    for (let j = 0; j < dim; j++) y[o + j] = x[o + j] * rs * w[j];
  }
  return { y, rstd };
}

/** dx_j = rstd w_j dy_j - rstd^3/dim x_j sum_k dy_k w_k x_k;  dw_j = sum_rows dy_j x_j rstd. */
export function rmsnormBackward(x: Arr, w: Arr, rstd: Arr, dy: Arr, { rows, dim }: Omit<NormDims, "eps">): { dx: Arr; dw: Arr } {
  const dx = alloc(x, rows * dim);
  const dwAcc = new Float64Array(dim);
  for (let r = 0; r < rows; r++) {
    const o = r * dim;
    const rs = rstd[r];
    let dot = 0;
    for (let j = 0; j < dim; j++) {
      dot += dy[o + j] * w[j] * x[o + j];
      dwAcc[j] += dy[o + j] * x[o + j] * rs;
    }
    const c = (rs * rs * rs * dot) / dim;
    for (let j = 0; j < dim; j++) dx[o + j] = rs * w[j] * dy[o + j] - c * x[o + j];
  }
  const dw = alloc(x, dim);
  dw.set(dwAcc);
  return { dx, dw };
}

// ---------------------------------------------------------------- RoPE

export interface RopeDims {
  rows: number;
  heads: number;
  headDim: number;
  theta: number;
  /** llama3 frequency scaling ({@link ropeInvFreq}) [none]. */
  scaling?: RopeScaling | null;
}

function rotate(x: Arr, positions: ArrayLike<number>, { rows, heads, headDim, theta, scaling }: RopeDims, sign: 1 | -1): Arr {
  checkLength("x", x, rows * heads * headDim);
  checkLength("positions", positions, rows);
  const half = headDim / 2;
  const inv = ropeInvFreq(headDim, theta, scaling);
  const y = alloc(x, x.length);
  for (let r = 0; r < rows; r++) {
    const pos = positions[r];
    for (let i = 0; i < half; i++) {
      const angle = pos * inv[i];
      const c = Math.cos(angle);
      const s = sign * Math.sin(angle);
      for (let h = 0; h < heads; h++) {
        const o = (r * heads + h) * headDim;
        const a = x[o + i];
        const b = x[o + i + half];
        y[o + i] = a * c - b * s;
        y[o + i + half] = b * c + a * s;
      }
    }
  }
  return y;
}

/** Rotary embedding ("rotate_half" pairs (i, i+hd/2)), x and y [rows, heads*hd], positions [rows]. */
export function rope(x: Arr, positions: ArrayLike<number>, dims: RopeDims): Arr {
  return rotate(x, positions, dims, 1);
}

/** RoPE is a rotation, so its backward is the rotation by the opposite angle. */
export function ropeBackward(dy: Arr, positions: ArrayLike<number>, dims: RopeDims): Arr {
  return rotate(dy, positions, dims, -1);
}

// ---------------------------------------------------------------- attention

export interface AttentionDims {
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

/** Key j is visible to query i iff j == i or (j < i and mask[j] == 1); see ../config.ts. */
export function isVisible(mask: ArrayLike<number>, rowBase: number, i: number, j: number): boolean {
  return j === i || (j < i && mask[rowBase + j] === 1);
}

/**
 * Causal grouped-query attention. q [B,T,H*hd], k/v [B,T,KV*hd], mask [B,T]. Returns out [B,T,H*hd] and
 * the softmax probabilities [B,H,T,T] (0 where not visible) for the backward; with `keepProbs` false
 * (inference) probs is empty: [H,T,T] is 940 MB for 14 heads over a 4,096-token prompt.
 */
export function attention(
  q: Arr,
  k: Arr,
  v: Arr,
  mask: ArrayLike<number>,
  dims: AttentionDims,
  keepProbs = true,
): { out: Arr; probs: Arr } {
  const { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd } = dims;
  checkLength("q", q, B * T * H * hd);
  checkLength("k", k, B * T * KV * hd);
  checkLength("v", v, B * T * KV * hd);
  checkLength("attention_mask", mask, B * T);
  const group = H / KV;
  const scale = 1 / Math.sqrt(hd);
  const out = alloc(q, B * T * H * hd);
  const probs = alloc(q, keepProbs ? B * H * T * T : 0);
  const scores = new Float64Array(T);
  const acc = new Float64Array(hd);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const kvh = Math.floor(h / group);
      for (let i = 0; i < T; i++) {
        const qo = ((b * T + i) * H + h) * hd;
        let max = -Infinity;
        for (let j = 0; j <= i; j++) {
          if (!isVisible(mask, b * T, i, j)) continue;
          const ko = ((b * T + j) * KV + kvh) * hd;
          let s = 0;
          for (let d = 0; d < hd; d++) s += q[qo + d] * k[ko + d];
          s *= scale;
          scores[j] = s;
          if (s > max) max = s;
        }
        let sum = 0;
        for (let j = 0; j <= i; j++) {
          if (!isVisible(mask, b * T, i, j)) continue;
          scores[j] = Math.exp(scores[j] - max);
          sum += scores[j];
        }
        acc.fill(0);
        const po = ((b * H + h) * T + i) * T;
        for (let j = 0; j <= i; j++) {
          if (!isVisible(mask, b * T, i, j)) continue;
          const p = scores[j] / sum;
          if (keepProbs) probs[po + j] = p;
          const vo = ((b * T + j) * KV + kvh) * hd;
          for (let d = 0; d < hd; d++) acc[d] += p * v[vo + d];
        }
        out.set(acc, qo);
      }
    }
  }
  return { out, probs };
}

/** Gradients of {@link attention}: dS = P (dP - rowsum(P dP)), dq = scale dS k, dk = scale dS^T q, dv = P^T dout. */
export function attentionBackward(q: Arr, k: Arr, v: Arr, probs: Arr, dout: Arr, dims: AttentionDims): { dq: Arr; dk: Arr; dv: Arr } {
  const { batch: B, seq: T, heads: H, kvHeads: KV, headDim: hd } = dims;
  const group = H / KV;
  const scale = 1 / Math.sqrt(hd);
  const dq = alloc(q, q.length);
  const dkAcc = new Float64Array(k.length);
  const dvAcc = new Float64Array(v.length);
  const dP = new Float64Array(T);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const kvh = Math.floor(h / group);
      for (let i = 0; i < T; i++) {
        const qo = ((b * T + i) * H + h) * hd;
        const po = ((b * H + h) * T + i) * T;
        let rowDot = 0;
        for (let j = 0; j <= i; j++) {
          const p = probs[po + j];
          if (p === 0) {
            dP[j] = 0;
            continue;
          }
          const vo = ((b * T + j) * KV + kvh) * hd;
          let s = 0;
          for (let d = 0; d < hd; d++) {
            s += dout[qo + d] * v[vo + d];
            dvAcc[vo + d] += p * dout[qo + d];
          }
          dP[j] = s;
          rowDot += p * s;
        }
        for (let j = 0; j <= i; j++) {
          const p = probs[po + j];
          if (p === 0) continue;
          const ds = p * (dP[j] - rowDot) * scale;
          const ko = ((b * T + j) * KV + kvh) * hd;
          for (let d = 0; d < hd; d++) {
            dq[qo + d] += ds * k[ko + d];
            dkAcc[ko + d] += ds * q[qo + d];
          }
        }
      }
    }
  }
  const dk = alloc(k, k.length);
  dk.set(dkAcc);
  const dv = alloc(v, v.length);
  dv.set(dvAcc);
  return { dq, dk, dv };
}

// ---------------------------------------------------------------- SwiGLU

function sigmoid(z: number): number {
  return 1 / (1 + Math.exp(-z));
}

/** y = silu(gate) * up, elementwise, silu(z) = z * sigmoid(z). */
export function swiglu(gate: Arr, up: Arr): Arr {
  checkLength("up", up, gate.length);
  const y = alloc(gate, gate.length);
  for (let i = 0; i < gate.length; i++) y[i] = gate[i] * sigmoid(gate[i]) * up[i];
  return y;
}

/** dgate = dy * up * sig (1 + g (1 - sig));  dup = dy * silu(g). */
export function swigluBackward(gate: Arr, up: Arr, dy: Arr): { dgate: Arr; dup: Arr } {
  const dgate = alloc(gate, gate.length);
  const dup = alloc(gate, gate.length);
  for (let i = 0; i < gate.length; i++) {
    const g = gate[i];
    const s = sigmoid(g);
    dgate[i] = dy[i] * up[i] * s * (1 + g * (1 - s));
    dup[i] = dy[i] * g * s;
  }
  return { dgate, dup };
}

// ---------------------------------------------------------------- log-softmax, gather, entropy

export interface VocabDims {
  rows: number;
  vocab: number;
}

/**
 * Per row of logits z [rows, vocab]: lse = logsumexp(z), logprob = z[target] - lse,
 * entropy = lse - sum softmax(z) z. Nothing vocab-sized is kept: the backward recomputes softmax from lse.
 */
export function logSoftmaxGatherEntropy(
  logits: Arr,
  targets: ArrayLike<number>,
  { rows, vocab }: VocabDims,
): { logprob: Arr; entropy: Arr; lse: Arr } {
  checkLength("logits", logits, rows * vocab);
  checkLength("targets", targets, rows);
  const logprob = alloc(logits, rows);
  const entropy = alloc(logits, rows);
  const lse = alloc(logits, rows);
  for (let r = 0; r < rows; r++) {
    const o = r * vocab;
    let max = -Infinity;
    for (let j = 0; j < vocab; j++) if (logits[o + j] > max) max = logits[o + j];
    let sum = 0;
    let sumEz = 0;
    for (let j = 0; j < vocab; j++) {
      const e = Math.exp(logits[o + j] - max);
      sum += e;
      sumEz += e * logits[o + j];
    }
    const l = max + Math.log(sum);
    lse[r] = l;
    logprob[r] = logits[o + targets[r]] - l;
    entropy[r] = l - sumEz / sum;
  }
  return { logprob, entropy, lse };
}

/**
 * dz_k = dlogprob (1[k == target] - p_k) - dentropy p_k (log p_k + H), p = softmax(z).
 * `lse` and `entropy` are the forward outputs.
 */
export function logSoftmaxGatherEntropyBackward(
  logits: Arr,
  targets: ArrayLike<number>,
  lse: Arr,
  entropy: Arr,
  dlogprob: Arr,
  dentropy: Arr,
  { rows, vocab }: VocabDims,
): Arr {
  const dz = alloc(logits, rows * vocab);
  for (let r = 0; r < rows; r++) {
    const gl = dlogprob[r];
    const ge = dentropy[r];
    if (gl === 0 && ge === 0) continue;
    const o = r * vocab;
    const l = lse[r];
    const H = entropy[r];
    for (let j = 0; j < vocab; j++) {
      const logp = logits[o + j] - l;
      const p = Math.exp(logp);
      dz[o + j] = -gl * p - ge * p * (logp + H);
    }
    dz[o + targets[r]] += gl;
  }
  return dz;
}

// ---------------------------------------------------------------- elementwise

/** a + b, elementwise (residual connections). */
export function add(a: Arr, b: Arr): Arr {
  checkLength("b", b, a.length);
  const y = alloc(a, a.length);
  for (let i = 0; i < a.length; i++) y[i] = a[i] + b[i];
  return y;
}

/** x[r, j] += bias[j] for every row r of x [rows, bias.length], in place (projection biases). */
export function addBiasInPlace(x: Arr, bias: Arr): void {
  const n = bias.length;
  if (x.length % n !== 0) throw new ValidationError(`x has ${x.length} elements, not a multiple of the bias's ${n}`, ["x"]);
  for (let o = 0; o < x.length; o += n) for (let j = 0; j < n; j++) x[o + j] += bias[j];
}

/** Sum over rows of x [rows, cols]: the gradient of a bias added to every row. */
export function columnSums(x: Arr, rows: number, cols: number): Arr {
  checkLength("x", x, rows * cols);
  const acc = new Float64Array(cols);
  for (let r = 0; r < rows; r++) for (let j = 0; j < cols; j++) acc[j] += x[r * cols + j];
  const y = alloc(x, cols);
  y.set(acc);
  return y;
}

/** a += b in place (gradient accumulation). */
export function addInPlace(a: Arr, b: Arr): void {
  checkLength("b", b, a.length);
  for (let i = 0; i < a.length; i++) a[i] += b[i];
}

/**
 * Attention of one new query per head against a KV cache of `len` positions (all visible: a
 * generated sequence has no padding). q [H*hd], cache k/v [>= len, KV*hd]. Returns [H*hd].
 */
export function attentionDecode(
  q: Arr,
  kCache: Arr,
  vCache: Arr,
  len: number,
  { heads: H, kvHeads: KV, headDim: hd }: Omit<AttentionDims, "batch" | "seq">,
): Arr {
  const group = H / KV;
  const scale = 1 / Math.sqrt(hd);
  const out = alloc(q, H * hd);
  const scores = new Float64Array(len);
  const acc = new Float64Array(hd);
  for (let h = 0; h < H; h++) {
    const kvh = Math.floor(h / group);
    let max = -Infinity;
    for (let j = 0; j < len; j++) {
      const ko = (j * KV + kvh) * hd;
      let s = 0;
      for (let d = 0; d < hd; d++) s += q[h * hd + d] * kCache[ko + d];
      scores[j] = s * scale;
      if (scores[j] > max) max = scores[j];
    }
    let sum = 0;
    for (let j = 0; j < len; j++) {
      scores[j] = Math.exp(scores[j] - max);
      sum += scores[j];
    }
    acc.fill(0);
    for (let j = 0; j < len; j++) {
      const p = scores[j] / sum;
      const vo = (j * KV + kvh) * hd;
      for (let d = 0; d < hd; d++) acc[d] += p * vCache[vo + d];
    }
    out.set(acc, h * hd);
  }
  return out;
}

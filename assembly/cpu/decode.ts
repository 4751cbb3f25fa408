// One decoded token through the whole model in one call: embedding row, every block (RMSNorm, q/k/v
// projections with their biases, LoRA updates and q/k-norm, RoPE, KV-cache append, attention against the
// cache, o-projection, residual, SwiGLU MLP, residual), the final norm and the lm head. It runs the same
// kernels in the same order, with the same arguments, as the per-op façade (src/cpu/wasm-ops.ts under
// src/model/reference/model.ts's blockForward), and does the light ops (bias, LoRA add, residual) with the
// TypeScript's arithmetic, so its logits are the per-op path's bits; what it saves is the ~10 calls per
// layer from TypeScript and the copies of activations in and out of memory.
//
// Everything is found through a descriptor of i32 words (byte pointers and sizes), written once per
// decoder by src/cpu/fused-decode.ts, which mirrors the DESC_* and LAYER_* offsets below.
import { gemm, FORM_AB, FORM_ABT } from "./matmul";
import { rmsnorm } from "./norm";
import { rope, swiglu } from "./pointwise";
import { attention, attentionDecode } from "./attention";

// header words
const D_LAYERS = 0;
const D_DIM = 1;
const D_HEADS = 2;
const D_KV_HEADS = 3;
const D_HEAD_DIM = 4;
const D_FF = 5;
const D_VOCAB = 6;
const D_FLAGS = 7;
const D_TOK_EMB = 8;
const D_NORM = 9;
const D_LM_HEAD = 10;
const D_INV_FREQ = 11;
const D_LORA_R = 12;
// workspace (activations of one token)
const D_X = 13;
const D_H = 14;
const D_Q = 15;
const D_K = 16;
const D_QR = 17;
const D_ATT = 18;
const D_TMP = 19;
const D_GATE = 20;
const D_UP = 21;
const D_ACT = 22;
const D_LOGITS = 23;
const D_RSTD = 24;
const D_SCORES = 25;
const D_LORA_T = 26;
const D_LORA_U = 27;
const D_POS = 28;
const HEADER_WORDS = 32;

// flags
const F_QKV_BIAS = 1;
const F_QK_NORM = 2;
const F_TIED = 4;

// per-layer words (pointers; 0 = absent); the seven projections' LoRA A and B follow LAYER_LORA
const L_ATTN_NORM = 0;
const L_WQ = 1;
const L_WK = 2;
const L_WV = 3;
const L_BQ = 4;
const L_BK = 5;
const L_BV = 6;
const L_Q_NORM = 7;
const L_K_NORM = 8;
const L_WO = 9;
const L_FFN_NORM = 10;
const L_W_GATE = 11;
const L_W_UP = 12;
const L_W_DOWN = 13;
const L_K_CACHE = 14;
const L_V_CACHE = 15;
const L_LORA = 16; // wq, wk, wv, wo, w_gate, w_up, w_down: A then B each
const LAYER_WORDS = 32;

@inline function word(desc: usize, i: i32): i32 {
  return load<i32>(desc + (<usize>i << 2));
}

@inline function ptr(desc: usize, i: i32): usize {
  return <usize>load<u32>(desc + (<usize>i << 2));
}

/**
 * y [m, n] = x [m, k] · W [k, n], plus scale · (x · A) · B where the layer's LoRA slot `slot` holds an
 * adapter (t [m, r], u [m, n] its scratch): the façade's `proj`, element by element
 * `y = f32(f64(y) + scale · f64(u))` as TypeScript computes `y[i] += scaling * u[i]`. `scratch`: gemm's
 * (m = 1 takes its unpacked path, which needs none).
 */
function proj(layer: usize, w: i32, slot: i32, x: usize, y: usize, m: i32, k: i32, n: i32, r: i32, loraScale: f64, t: usize, u: usize, scratch: usize): void {
  gemm(FORM_AB, x, ptr(layer, w), y, m, k, n, 0, n, scratch);
  const a = ptr(layer, L_LORA + 2 * slot);
  if (a == 0) return;
  gemm(FORM_AB, x, a, t, m, k, r, 0, r, scratch);
  gemm(FORM_AB, t, ptr(layer, L_LORA + 2 * slot + 1), u, m, r, n, 0, n, scratch);
  const mn = m * n;
  for (let i = 0; i < mn; i++) {
    const o = <usize>i << 2;
    store<f32>(y + o, <f32>(<f64>load<f32>(y + o) + loraScale * <f64>load<f32>(u + o)));
  }
}

/** y += b over n elements, f32 (the reference's bias and residual adds). */
function addInto(y: usize, b: usize, n: i32): void {
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const o = <usize>i << 2;
    v128.store(y + o, f32x4.add(v128.load(y + o), v128.load(b + o)));
  }
  for (; i < n; i++) {
    const o = <usize>i << 2;
    store<f32>(y + o, load<f32>(y + o) + load<f32>(b + o));
  }
}

/**
 * Token `token` at position `pos` (the cache holds positions [0, pos)): its k and v are appended at `pos`
 * and its logits [vocab] are left at the descriptor's logits pointer.
 */
export function decodeStep(desc: usize, token: i32, pos: i32, eps: f64, loraScale: f64): void {
  const L = word(desc, D_LAYERS), d = word(desc, D_DIM), H = word(desc, D_HEADS), KV = word(desc, D_KV_HEADS);
  const hd = word(desc, D_HEAD_DIM), ff = word(desc, D_FF), V = word(desc, D_VOCAB), flags = word(desc, D_FLAGS);
  const qDim = H * hd, kvDim = KV * hd;
  const x = ptr(desc, D_X), h = ptr(desc, D_H), q = ptr(desc, D_Q), k = ptr(desc, D_K), qr = ptr(desc, D_QR);
  const att = ptr(desc, D_ATT), tmp = ptr(desc, D_TMP), gate = ptr(desc, D_GATE), up = ptr(desc, D_UP), act = ptr(desc, D_ACT);
  const rstd = ptr(desc, D_RSTD), scores = ptr(desc, D_SCORES), invFreq = ptr(desc, D_INV_FREQ), posCell = ptr(desc, D_POS);
  const tok = ptr(desc, D_TOK_EMB);
  const r = word(desc, D_LORA_R), t = ptr(desc, D_LORA_T), u = ptr(desc, D_LORA_U);
  store<i32>(posCell, pos);
  memory.copy(x, tok + ((<usize>token * <usize>d) << 2), <usize>d << 2);
  for (let l = 0; l < L; l++) {
    const layer = desc + ((<usize>(HEADER_WORDS + l * LAYER_WORDS)) << 2);
    const kSlot = ptr(layer, L_K_CACHE) + ((<usize>pos * <usize>kvDim) << 2);
    const vSlot = ptr(layer, L_V_CACHE) + ((<usize>pos * <usize>kvDim) << 2);
    rmsnorm(x, ptr(layer, L_ATTN_NORM), h, rstd, 1, d, eps);
    proj(layer, L_WQ, 0, h, q, 1, d, qDim, r, loraScale, t, u, 0);
    proj(layer, L_WK, 1, h, k, 1, d, kvDim, r, loraScale, t, u, 0);
    // v goes straight to its cache slot: nothing changes it after its bias
    proj(layer, L_WV, 2, h, vSlot, 1, d, kvDim, r, loraScale, t, u, 0);
    if (flags & F_QKV_BIAS) {
      addInto(q, ptr(layer, L_BQ), qDim);
      addInto(k, ptr(layer, L_BK), kvDim);
      addInto(vSlot, ptr(layer, L_BV), kvDim);
    }
    let qIn = q, kIn = k;
    if (flags & F_QK_NORM) {
      // per-head norms into buffers free at this point (att is [H*hd], at least kvDim)
      rmsnorm(q, ptr(layer, L_Q_NORM), qr, rstd, H, hd, eps);
      rmsnorm(k, ptr(layer, L_K_NORM), att, rstd, KV, hd, eps);
      qIn = qr;
      kIn = att;
    }
    rope(qIn, q, posCell, invFreq, 1, H, hd, 1.0, false);
    rope(kIn, kSlot, posCell, invFreq, 1, KV, hd, 1.0, false);
    attentionDecode(q, ptr(layer, L_K_CACHE), ptr(layer, L_V_CACHE), att, scores, pos + 1, H, KV, hd, 0, KV);
    proj(layer, L_WO, 3, att, tmp, 1, qDim, d, r, loraScale, t, u, 0);
    addInto(x, tmp, d);
    rmsnorm(x, ptr(layer, L_FFN_NORM), h, rstd, 1, d, eps);
    proj(layer, L_W_GATE, 4, h, gate, 1, d, ff, r, loraScale, t, u, 0);
    proj(layer, L_W_UP, 5, h, up, 1, d, ff, r, loraScale, t, u, 0);
    swiglu(gate, up, act, ff);
    proj(layer, L_W_DOWN, 6, act, tmp, 1, ff, d, r, loraScale, t, u, 0);
    addInto(x, tmp, d);
  }
  rmsnorm(x, ptr(desc, D_NORM), h, rstd, 1, d, eps);
  const logits = ptr(desc, D_LOGITS);
  if (flags & F_TIED) gemm(FORM_ABT, h, tok, logits, 1, d, V, 0, V, 0);
  else gemm(FORM_AB, h, ptr(desc, D_LM_HEAD), logits, 1, d, V, 0, V, 0);
}

// prefill's per-call table (i32 words): its activations, sized for the prompt's rows
const P_IDS = 0;
const P_X = 1;
const P_H = 2;
const P_Q = 3;
const P_K = 4;
const P_QN = 5;
const P_KN = 6;
const P_ATT = 7;
const P_TMP = 8;
const P_GATE = 9;
const P_UP = 10;
const P_ACT = 11;
const P_RSTD = 12;
const P_SCORES = 13;
const P_LORA_T = 14;
const P_LORA_U = 15;
const P_POS = 16;
const P_MASK = 17;
const P_GEMM = 18;

/**
 * The prompt's L tokens (positions 0..L-1, every one real) through every block into an empty cache, and the
 * lm head on the last row: the façade's prefill (src/model/reference/model.ts prefillForward) with the same kernel
 * calls on L-row arguments, so the same bits. `ws`: the per-call table (P_*), positions and mask filled in.
 */
export function decodePrefill(desc: usize, ws: usize, L: i32, eps: f64, loraScale: f64): void {
  const nl = word(desc, D_LAYERS), d = word(desc, D_DIM), H = word(desc, D_HEADS), KV = word(desc, D_KV_HEADS);
  const hd = word(desc, D_HEAD_DIM), ff = word(desc, D_FF), V = word(desc, D_VOCAB), flags = word(desc, D_FLAGS);
  const qDim = H * hd, kvDim = KV * hd;
  const ids = ptr(ws, P_IDS), x = ptr(ws, P_X), h = ptr(ws, P_H), q = ptr(ws, P_Q), k = ptr(ws, P_K);
  const qn = ptr(ws, P_QN), kn = ptr(ws, P_KN), att = ptr(ws, P_ATT), tmp = ptr(ws, P_TMP);
  const gate = ptr(ws, P_GATE), up = ptr(ws, P_UP), act = ptr(ws, P_ACT), rstd = ptr(ws, P_RSTD), scores = ptr(ws, P_SCORES);
  const t = ptr(ws, P_LORA_T), u = ptr(ws, P_LORA_U), pos = ptr(ws, P_POS), mask = ptr(ws, P_MASK), scratch = ptr(ws, P_GEMM);
  const r = word(desc, D_LORA_R), invFreq = ptr(desc, D_INV_FREQ), tok = ptr(desc, D_TOK_EMB);
  const rowBytes = <usize>d << 2;
  for (let i = 0; i < L; i++) memory.copy(x + <usize>i * rowBytes, tok + <usize>load<i32>(ids + (<usize>i << 2)) * rowBytes, rowBytes);
  for (let l = 0; l < nl; l++) {
    const layer = desc + ((<usize>(HEADER_WORDS + l * LAYER_WORDS)) << 2);
    const kc = ptr(layer, L_K_CACHE), vc = ptr(layer, L_V_CACHE);
    rmsnorm(x, ptr(layer, L_ATTN_NORM), h, rstd, L, d, eps);
    proj(layer, L_WQ, 0, h, q, L, d, qDim, r, loraScale, t, u, scratch);
    proj(layer, L_WK, 1, h, k, L, d, kvDim, r, loraScale, t, u, scratch);
    // v's rows are the cache's first L rows
    proj(layer, L_WV, 2, h, vc, L, d, kvDim, r, loraScale, t, u, scratch);
    if (flags & F_QKV_BIAS) {
      for (let i = 0; i < L; i++) {
        addInto(q + ((<usize>i * <usize>qDim) << 2), ptr(layer, L_BQ), qDim);
        addInto(k + ((<usize>i * <usize>kvDim) << 2), ptr(layer, L_BK), kvDim);
        addInto(vc + ((<usize>i * <usize>kvDim) << 2), ptr(layer, L_BV), kvDim);
      }
    }
    let qIn = q, kIn = k;
    if (flags & F_QK_NORM) {
      rmsnorm(q, ptr(layer, L_Q_NORM), qn, rstd, L * H, hd, eps);
      rmsnorm(k, ptr(layer, L_K_NORM), kn, rstd, L * KV, hd, eps);
      qIn = qn;
      kIn = kn;
    }
    rope(qIn, q, pos, invFreq, L, H, hd, 1.0, false);
    rope(kIn, kc, pos, invFreq, L, KV, hd, 1.0, false);
    attention(q, kc, vc, mask, att, 0, false, scores, 1, L, H, KV, hd, 0, KV);
    proj(layer, L_WO, 3, att, tmp, L, qDim, d, r, loraScale, t, u, scratch);
    addInto(x, tmp, L * d);
    rmsnorm(x, ptr(layer, L_FFN_NORM), h, rstd, L, d, eps);
    proj(layer, L_W_GATE, 4, h, gate, L, d, ff, r, loraScale, t, u, scratch);
    proj(layer, L_W_UP, 5, h, up, L, d, ff, r, loraScale, t, u, scratch);
    swiglu(gate, up, act, L * ff);
    proj(layer, L_W_DOWN, 6, act, tmp, L, ff, d, r, loraScale, t, u, scratch);
    addInto(x, tmp, L * d);
  }
  rmsnorm(x + <usize>(L - 1) * rowBytes, ptr(desc, D_NORM), h, rstd, 1, d, eps);
  const logits = ptr(desc, D_LOGITS);
  if (flags & F_TIED) gemm(FORM_ABT, h, tok, logits, 1, d, V, 0, V, 0);
  else gemm(FORM_AB, h, ptr(desc, D_LM_HEAD), logits, 1, d, V, 0, V, 0);
}

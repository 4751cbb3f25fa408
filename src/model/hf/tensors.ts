/**
 * HF tensor names ↔ our layout names, and the conversion of a tensor's raw bytes (BF16, F16, F32,
 * little-endian) into our float32 layout: linear weights are stored [out, in] by Hugging Face and
 * [in, out] by us, so they are transposed on the way (cache-blocked, in the same pass as the dtype
 * conversion). The mapping table is in docs/hf-models.md.
 */
import { ValidationError } from "../../types/errors.ts";
import { f16ToF32 } from "../safetensors.ts";

/** Our name → the HF tensor name and whether the matrix is transposed between the two layouts. */
export function hfTensorName(name: string): { hf: string; transpose: boolean } {
  if (name === "tok_embeddings") return { hf: "model.embed_tokens.weight", transpose: false };
  if (name === "norm") return { hf: "model.norm.weight", transpose: false };
  if (name === "lm_head") return { hf: "lm_head.weight", transpose: true };
  const m = /^layers\.(\d+)\.(\w+)$/.exec(name);
  const part = m ? LAYER_NAMES[m[2]] : undefined;
  if (!m || part === undefined) throw new ValidationError(`no Hugging Face name for tensor ${name}`, [name]);
  return { hf: `model.layers.${m[1]}.${part[0]}`, transpose: part[1] };
}

const LAYER_NAMES: Record<string, [string, boolean]> = {
  attn_norm: ["input_layernorm.weight", false],
  wq: ["self_attn.q_proj.weight", true],
  wk: ["self_attn.k_proj.weight", true],
  wv: ["self_attn.v_proj.weight", true],
  bq: ["self_attn.q_proj.bias", false],
  bk: ["self_attn.k_proj.bias", false],
  bv: ["self_attn.v_proj.bias", false],
  q_norm: ["self_attn.q_norm.weight", false],
  k_norm: ["self_attn.k_norm.weight", false],
  wo: ["self_attn.o_proj.weight", true],
  ffn_norm: ["post_attention_layernorm.weight", false],
  w_gate: ["mlp.gate_proj.weight", true],
  w_up: ["mlp.up_proj.weight", true],
  w_down: ["mlp.down_proj.weight", true],
};

export type HfDtype = "F32" | "F16" | "BF16";

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
let f16Table: Float32Array | null = null;

/** float32 value of every f16 bit pattern (built once, 256 KiB). */
function f16Values(): Float32Array {
  if (f16Table) return f16Table;
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) t[h] = f16ToF32(h);
  f16Table = t;
  return t;
}

const BLOCK = 64;

// One small function per dtype and direction with the tile loops inlined, so each inner loop sees one
// array type and V8 keeps it specialised (one walker for all dtypes would see three).

function bf16Plain(src: Uint16Array, dst: Uint16Array, n: number): void {
  for (let i = 0; i < n; i++) dst[2 * i + 1] = src[i];
}

function bf16Transposed(src: Uint16Array, dst: Uint16Array, rows: number, cols: number): void {
  for (let i0 = 0; i0 < rows; i0 += BLOCK) {
    const i1 = Math.min(rows, i0 + BLOCK);
    for (let j0 = 0; j0 < cols; j0 += BLOCK) {
      const j1 = Math.min(cols, j0 + BLOCK);
      for (let j = j0; j < j1; j++) {
        const o = 2 * j * rows + 1;
        for (let i = i0; i < i1; i++) dst[o + 2 * i] = src[i * cols + j];
      }
    }
  }
}

function f16Plain(src: Uint16Array, table: Float32Array, out: Float32Array, n: number): void {
  for (let i = 0; i < n; i++) out[i] = table[src[i]];
}

function f16Transposed(src: Uint16Array, table: Float32Array, out: Float32Array, rows: number, cols: number): void {
  for (let i0 = 0; i0 < rows; i0 += BLOCK) {
    const i1 = Math.min(rows, i0 + BLOCK);
    for (let j0 = 0; j0 < cols; j0 += BLOCK) {
      const j1 = Math.min(cols, j0 + BLOCK);
      for (let j = j0; j < j1; j++) {
        const o = j * rows;
        for (let i = i0; i < i1; i++) out[o + i] = table[src[i * cols + j]];
      }
    }
  }
}

function f32Transposed(src: Float32Array, out: Float32Array, rows: number, cols: number): void {
  for (let i0 = 0; i0 < rows; i0 += BLOCK) {
    const i1 = Math.min(rows, i0 + BLOCK);
    for (let j0 = 0; j0 < cols; j0 += BLOCK) {
      const j1 = Math.min(cols, j0 + BLOCK);
      for (let j = j0; j < j1; j++) {
        const o = j * rows;
        for (let i = i0; i < i1; i++) out[o + i] = src[i * cols + j];
      }
    }
  }
}

/**
 * float32 values of `bytes` (a tensor of `rows` x `cols` in `dtype`, row-major), transposed to
 * [cols, rows] when `transpose`. `bytes` must start at an offset aligned to its element size.
 * bf16 is the high half of a float32, so it is written into the odd 16-bit words of the output (the
 * low halves stay 0); tiles walk the destination contiguously, reads strided (measured faster in V8).
 */
export function convertTensor(bytes: Uint8Array, dtype: HfDtype, rows: number, cols: number, transpose: boolean): Float32Array {
  const n = rows * cols;
  const out = new Float32Array(n);
  if (!LITTLE_ENDIAN) throw new ValidationError("loading safetensors needs a little-endian host", ["dtype"]);
  if (dtype === "BF16") {
    const src = new Uint16Array(bytes.buffer, bytes.byteOffset, n);
    const dst = new Uint16Array(out.buffer);
    if (transpose) bf16Transposed(src, dst, rows, cols);
    else bf16Plain(src, dst, n);
  } else if (dtype === "F16") {
    const src = new Uint16Array(bytes.buffer, bytes.byteOffset, n);
    if (transpose) f16Transposed(src, f16Values(), out, rows, cols);
    else f16Plain(src, f16Values(), out, n);
  } else {
    const src = new Float32Array(bytes.buffer, bytes.byteOffset, n);
    if (transpose) f32Transposed(src, out, rows, cols);
    else out.set(src);
  }
  return out;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** bf16 bits of a float32, rounded to nearest even (NaN stays NaN). */
export function toBf16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  if ((u & 0x7fffffff) > 0x7f800000) return (u >>> 16) | 0x40;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

/** f16 bits of a float32, rounded to nearest even (overflow → ±Inf, tiny values → subnormals or ±0). */
export function toF16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  const mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = mant | 0x800000;
    const shift = 14 - e;
    let h = m >>> shift;
    const rem = m & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}

/** Bytes of float32 `data` ([rows, cols], our layout) in `dtype`, transposed to [cols, rows] when asked. */
export function encodeTensor(data: Float32Array, dtype: HfDtype, rows: number, cols: number, transpose: boolean): Uint8Array {
  const n = rows * cols;
  const at = (k: number): number => (transpose ? data[(k % rows) * cols + Math.floor(k / rows)] : data[k]);
  if (dtype === "F32") {
    const out = new Float32Array(n);
    for (let k = 0; k < n; k++) out[k] = at(k);
    return new Uint8Array(out.buffer);
  }
  const out = new Uint16Array(n);
  const conv = dtype === "BF16" ? toBf16 : toF16;
  for (let k = 0; k < n; k++) out[k] = conv(at(k));
  return new Uint8Array(out.buffer);
}

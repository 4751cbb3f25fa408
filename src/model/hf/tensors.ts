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

/** Bytes per element of each dtype the loader reads. */
export const HF_DTYPE_BYTES: Record<HfDtype, number> = { F32: 4, F16: 2, BF16: 2 };

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

function littleEndianHost(): void {
  if (!LITTLE_ENDIAN) throw new ValidationError("loading safetensors needs a little-endian host", ["dtype"]);
}

// One monomorphic function per dtype, loops inlined: a shared walker taking closures measured 5x
// slower (captured arrays are not optimised like locals). bf16 is the high half of a float32, so a
// bf16 word shifted left by 16 is the float32's bits.

/**
 * Widens elements [from, to) of a 16-bit tensor of `n` elements whose raw words sit in the upper half
 * of `out`'s buffer (16-bit words n..2n-1) into float32 in place. Walking forward is safe: element i
 * writes words 2i and 2i+1, which hold only elements <= i, already read.
 */
export function widenInPlace(out: Float32Array, dtype: "F16" | "BF16", from: number, to: number): void {
  const n = out.length;
  const src = new Uint16Array(out.buffer, out.byteOffset, 2 * n);
  if (dtype === "BF16") {
    const dst = new Uint32Array(out.buffer, out.byteOffset, n);
    for (let i = from; i < to; i++) dst[i] = src[n + i] << 16;
  } else {
    const table = f16Values();
    for (let i = from; i < to; i++) out[i] = table[src[n + i]];
  }
}

// Transposing kernels: a band of `band` source rows (starting at source row r0, `cols` wide) goes to
// columns r0.. of the [cols, rows] output. Tiles of 256 x 256; inside, eight source rows at a time so
// each output row gets eight contiguous stores (measured ~1.6x the plain 64 x 64 tile walk).
const TILE = 256;

function bf16Band(src: Uint16Array, out: Uint32Array, r0: number, band: number, rows: number, cols: number): void {
  for (let i0 = 0; i0 < band; i0 += TILE) {
    const i1 = Math.min(band, i0 + TILE);
    for (let j0 = 0; j0 < cols; j0 += TILE) {
      const j1 = Math.min(cols, j0 + TILE);
      let i = i0;
      for (; i + 8 <= i1; i += 8) {
        const c = cols;
        for (let j = j0; j < j1; j++) {
          const s = i * c + j;
          const o = j * rows + r0 + i;
          out[o] = src[s] << 16;
          out[o + 1] = src[s + c] << 16;
          out[o + 2] = src[s + 2 * c] << 16;
          out[o + 3] = src[s + 3 * c] << 16;
          out[o + 4] = src[s + 4 * c] << 16;
          out[o + 5] = src[s + 5 * c] << 16;
          out[o + 6] = src[s + 6 * c] << 16;
          out[o + 7] = src[s + 7 * c] << 16;
        }
      }
      for (; i < i1; i++) for (let j = j0; j < j1; j++) out[j * rows + r0 + i] = src[i * cols + j] << 16;
    }
  }
}

function f16Band(src: Uint16Array, table: Float32Array, out: Float32Array, r0: number, band: number, rows: number, cols: number): void {
  for (let i0 = 0; i0 < band; i0 += TILE) {
    const i1 = Math.min(band, i0 + TILE);
    for (let j0 = 0; j0 < cols; j0 += TILE) {
      const j1 = Math.min(cols, j0 + TILE);
      let i = i0;
      for (; i + 8 <= i1; i += 8) {
        const c = cols;
        for (let j = j0; j < j1; j++) {
          const s = i * c + j;
          const o = j * rows + r0 + i;
          out[o] = table[src[s]];
          out[o + 1] = table[src[s + c]];
          out[o + 2] = table[src[s + 2 * c]];
          out[o + 3] = table[src[s + 3 * c]];
          out[o + 4] = table[src[s + 4 * c]];
          out[o + 5] = table[src[s + 5 * c]];
          out[o + 6] = table[src[s + 6 * c]];
          out[o + 7] = table[src[s + 7 * c]];
        }
      }
      for (; i < i1; i++) for (let j = j0; j < j1; j++) out[j * rows + r0 + i] = table[src[i * cols + j]];
    }
  }
}

// float32 moved as 32-bit words (no float conversion: NaN payloads kept).
function f32Band(src: Uint32Array, out: Uint32Array, r0: number, band: number, rows: number, cols: number): void {
  for (let i0 = 0; i0 < band; i0 += TILE) {
    const i1 = Math.min(band, i0 + TILE);
    for (let j0 = 0; j0 < cols; j0 += TILE) {
      const j1 = Math.min(cols, j0 + TILE);
      let i = i0;
      for (; i + 8 <= i1; i += 8) {
        const c = cols;
        for (let j = j0; j < j1; j++) {
          const s = i * c + j;
          const o = j * rows + r0 + i;
          out[o] = src[s];
          out[o + 1] = src[s + c];
          out[o + 2] = src[s + 2 * c];
          out[o + 3] = src[s + 3 * c];
          out[o + 4] = src[s + 4 * c];
          out[o + 5] = src[s + 5 * c];
          out[o + 6] = src[s + 6 * c];
          out[o + 7] = src[s + 7 * c];
        }
      }
      for (; i < i1; i++) for (let j = j0; j < j1; j++) out[j * rows + r0 + i] = src[i * cols + j];
    }
  }
}

/**
 * Converts `band` source rows starting at row `r0` of a [rows, cols] tensor (their raw bytes in `bytes`,
 * aligned to the element size) into columns r0..r0+band of `out`, the [cols, rows] float32 transpose.
 */
export function transposeBand(
  bytes: Uint8Array,
  dtype: HfDtype,
  out: Float32Array,
  r0: number,
  band: number,
  rows: number,
  cols: number,
): void {
  littleEndianHost();
  const n = band * cols;
  if (dtype === "BF16")
    bf16Band(
      new Uint16Array(bytes.buffer, bytes.byteOffset, n),
      new Uint32Array(out.buffer, out.byteOffset, out.length),
      r0,
      band,
      rows,
      cols,
    );
  else if (dtype === "F16") f16Band(new Uint16Array(bytes.buffer, bytes.byteOffset, n), f16Values(), out, r0, band, rows, cols);
  else
    f32Band(
      new Uint32Array(bytes.buffer, bytes.byteOffset, n),
      new Uint32Array(out.buffer, out.byteOffset, out.length),
      r0,
      band,
      rows,
      cols,
    );
}

/**
 * float32 values of `bytes` (a tensor of `rows` x `cols` in `dtype`, row-major), transposed to
 * [cols, rows] when `transpose`. `bytes` must start at an offset aligned to its element size.
 * (The loader reads large tensors in pieces straight into their output instead: see loader.ts.)
 */
export function convertTensor(bytes: Uint8Array, dtype: HfDtype, rows: number, cols: number, transpose: boolean): Float32Array {
  littleEndianHost();
  const n = rows * cols;
  const out = new Float32Array(n);
  if (transpose) transposeBand(bytes, dtype, out, 0, rows, rows, cols);
  else if (dtype === "F32") new Uint8Array(out.buffer).set(bytes.subarray(0, 4 * n));
  else {
    new Uint8Array(out.buffer, 2 * n, 2 * n).set(bytes.subarray(0, 2 * n));
    widenInPlace(out, dtype, 0, n);
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
  let values = data.subarray(0, n);
  if (transpose) {
    values = new Float32Array(n);
    transposeBand(new Uint8Array(data.buffer, data.byteOffset, 4 * n), "F32", values, 0, rows, rows, cols);
  }
  if (dtype === "F32") return new Uint8Array(transpose ? values.buffer : values.slice().buffer);
  const out = new Uint16Array(n);
  if (dtype === "BF16") for (let k = 0; k < n; k++) out[k] = toBf16(values[k]);
  else for (let k = 0; k < n; k++) out[k] = toF16(values[k]);
  return new Uint8Array(out.buffer);
}

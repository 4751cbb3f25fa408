/**
 * How a kernel reads a weight matrix stored in float32 or, for frozen weights, in 16 bits: two values
 * packed per u32 (element 2i in the low half, 2i+1 in the high half). bf16 is the high half of a
 * float32 (a shift); f16 goes through WGSL's core `unpack2x16float`, so neither needs the `shader-f16`
 * feature. Values are upcast to f32 as they are read; every sum stays in f32.
 */
import { toBf16, toF16 } from "../../model/hf/tensors.ts";
import { f16ToF32 } from "../../model/safetensors.ts";
import type { StorageBinding } from "../kernel-source.ts";

export type WeightFormat = "f32" | "bf16" | "f16";

/** How a kernel binds a weight array of `format` (16-bit values are read as packed u32 pairs). */
export function weightBinding(format: WeightFormat): StorageBinding {
  return format === "f32" ? "read f32" : "read u32";
}

/** A WGSL function `${name}_at(i: u32) -> f32` giving element i of weight array `name`. */
export function weightAt(name: string, format: WeightFormat): string {
  if (format === "f32") return `fn ${name}_at(i: u32) -> f32 { return ${name}[i]; }`;
  if (format === "bf16")
    return `fn ${name}_at(i: u32) -> f32 { let w = ${name}[i >> 1u]; return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u)); }`;
  return `fn ${name}_at(i: u32) -> f32 { return unpack2x16float(${name}[i >> 1u])[i & 1u]; }`;
}

/** Packs float32 values into the 16-bit format (rounded to nearest even), two per u32. */
export function packWeights(data: Float32Array, format: Exclude<WeightFormat, "f32">): Uint32Array {
  const conv = format === "bf16" ? toBf16 : toF16;
  const out = new Uint32Array(Math.ceil(data.length / 2));
  for (let i = 0; i < data.length; i += 2) out[i >> 1] = (conv(data[i]) | ((i + 1 < data.length ? conv(data[i + 1]) : 0) << 16)) >>> 0;
  return out;
}

/** The values a 16-bit format stores for float32 `data` (the CPU twin of what the GPU reads). */
export function roundWeights(data: Float32Array, format: WeightFormat): Float32Array {
  if (format === "f32") return data;
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  const h = new Uint16Array(1);
  return data.map((x) => {
    if (format === "bf16") {
      u[0] = toBf16(x) << 16;
      return f[0];
    }
    h[0] = toF16(x);
    return f16ToF32(h[0]);
  });
}

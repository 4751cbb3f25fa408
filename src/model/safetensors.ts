/**
 * The safetensors format: 8-byte little-endian header length N, N bytes of JSON header
 * (`{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {string: string}}`, offsets
 * relative to the end of the header, padded with spaces to a multiple of 8), then the raw
 * little-endian tensor bytes. We write F32; we read F32, F64, F16 and BF16 (converted to float32).
 */
import { ValidationError } from "../types/errors.ts";

export type SafetensorsDtype = "F32" | "F64" | "F16" | "BF16";

export interface NamedTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

export interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

export interface SafetensorsHeader {
  tensors: Record<string, HeaderEntry>;
  metadata: Record<string, string>;
  /** Byte offset of the data section in the file. */
  dataStart: number;
}

export const DTYPE_BYTES: Record<SafetensorsDtype, number> = { F32: 4, F64: 8, F16: 2, BF16: 2 };
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** One tensor already in its stored bytes (little-endian `dtype`). */
export interface RawTensor {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  bytes: Uint8Array;
}

/** Serialises tensors already encoded (in the given order) and string metadata. */
export function encodeSafetensorsRaw(tensors: RawTensor[], metadata: Record<string, string> = {}): Uint8Array {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    const size = t.shape.reduce((a, b) => a * b, 1);
    if (size * DTYPE_BYTES[t.dtype] !== t.bytes.length)
      throw new ValidationError(
        `tensor ${t.name}: shape ${JSON.stringify(t.shape)} in ${t.dtype} needs ${size * DTYPE_BYTES[t.dtype]} bytes, got ${t.bytes.length}`,
        [t.name],
      );
    if (t.name === "__metadata__" || t.name in header) throw new ValidationError(`duplicate or reserved tensor name ${t.name}`, [t.name]);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.bytes.length] };
    offset += t.bytes.length;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded !== json.length) {
    const p = new Uint8Array(padded).fill(0x20);
    p.set(json);
    json = p;
  }
  const out = new Uint8Array(8 + json.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  let at = 8 + json.length;
  for (const t of tensors) {
    out.set(t.bytes, at);
    at += t.bytes.length;
  }
  return out;
}

/** Serialises F32 tensors (in the given order) and string metadata. */
export function encodeSafetensors(tensors: NamedTensor[], metadata: Record<string, string> = {}): Uint8Array {
  for (const t of tensors) {
    const size = t.shape.reduce((a, b) => a * b, 1);
    if (size !== t.data.length)
      throw new ValidationError(`tensor ${t.name}: shape ${JSON.stringify(t.shape)} needs ${size} elements, got ${t.data.length}`, [
        t.name,
      ]);
  }
  return encodeSafetensorsRaw(
    tensors.map((t) => ({ name: t.name, dtype: "F32", shape: t.shape, bytes: f32Bytes(t.data) })),
    metadata,
  );
}

/** Little-endian bytes of float32 data (a view when the host is little-endian). */
function f32Bytes(data: Float32Array): Uint8Array {
  if (LITTLE_ENDIAN) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(data.byteLength);
  const view = new DataView(out.buffer);
  for (let i = 0; i < data.length; i++) view.setFloat32(4 * i, data[i], true);
  return out;
}

/** Parses and checks the header (offsets inside the file, sizes matching shapes and dtypes). */
export function readSafetensorsHeader(bytes: Uint8Array): SafetensorsHeader {
  const n = safetensorsHeaderLength(bytes, bytes.length);
  if (n > bytes.length - 8) throw new ValidationError(`safetensors header length ${n} exceeds the file`, ["header"]);
  return parseSafetensorsHeader(bytes.subarray(8, 8 + n), bytes.length);
}

/** The header's byte length from the file's first 8 bytes (checked against the file's size). */
export function safetensorsHeaderLength(first8: Uint8Array, fileSize: number): number {
  if (fileSize < 8 || first8.length < 8) throw new ValidationError("not a safetensors file: shorter than 8 bytes", ["header"]);
  const n = Number(new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true));
  if (n > fileSize - 8) throw new ValidationError(`safetensors header length ${n} exceeds the file`, ["header"]);
  return n;
}

/** Parses the JSON header (`json`: the n header bytes) of a file of `fileSize` bytes and checks every entry. */
export function parseSafetensorsHeader(json: Uint8Array, fileSize: number): SafetensorsHeader {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(json));
  } catch (e) {
    throw new ValidationError(`safetensors header is not JSON: ${(e as Error).message}`, ["header"]);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw new ValidationError("safetensors header is not a JSON object", ["header"]);
  const dataStart = 8 + json.length;
  const dataLength = fileSize - dataStart;
  const tensors: Record<string, HeaderEntry> = {};
  let metadata: Record<string, string> = {};
  for (const [name, entry] of Object.entries(raw as Record<string, unknown>)) {
    if (name === "__metadata__") {
      metadata = entry as Record<string, string>;
      continue;
    }
    const e = entry as HeaderEntry;
    const width = DTYPE_BYTES[e?.dtype as SafetensorsDtype];
    if (width === undefined) throw new ValidationError(`tensor ${name}: unsupported dtype ${e?.dtype}`, [name, "dtype"]);
    const [begin, end] = e.data_offsets ?? [];
    const size = (e.shape ?? []).reduce((a: number, b: number) => a * b, 1);
    if (!(Number.isInteger(begin) && Number.isInteger(end) && begin >= 0 && end <= dataLength && end - begin === size * width))
      throw new ValidationError(
        `tensor ${name}: data_offsets ${JSON.stringify(e.data_offsets)} do not fit shape ${JSON.stringify(e.shape)} and the file`,
        [name, "data_offsets"],
      );
    tensors[name] = e;
  }
  return { tensors, metadata, dataStart };
}

const bits = new Uint32Array(1);
const bitsAsF32 = new Float32Array(bits.buffer);

/** The value of f16 bits `h` (subnormals, infinities and NaN included). */
export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** One tensor's values as float32 (a copy). */
export function readTensor(bytes: Uint8Array, header: SafetensorsHeader, name: string): Float32Array {
  const e = header.tensors[name];
  if (!e) throw new ValidationError(`tensor ${name} is not in the file`, [name]);
  const [begin, end] = e.data_offsets;
  const at = header.dataStart + begin;
  const view = new DataView(bytes.buffer, bytes.byteOffset + at, end - begin);
  const dtype = e.dtype as SafetensorsDtype;
  const out = new Float32Array((end - begin) / DTYPE_BYTES[dtype]);
  if (dtype === "F32" && LITTLE_ENDIAN) {
    new Uint8Array(out.buffer).set(bytes.subarray(at, header.dataStart + end));
    return out;
  }
  for (let i = 0; i < out.length; i++) {
    if (dtype === "F32") out[i] = view.getFloat32(4 * i, true);
    else if (dtype === "F64") out[i] = view.getFloat64(8 * i, true);
    else if (dtype === "BF16") {
      bits[0] = view.getUint16(2 * i, true) << 16;
      out[i] = bitsAsF32[0];
    } else out[i] = f16ToF32(view.getUint16(2 * i, true));
  }
  return out;
}

/** Every tensor of a file, in header order, plus its metadata. */
export function decodeSafetensors(bytes: Uint8Array): { tensors: NamedTensor[]; metadata: Record<string, string> } {
  const header = readSafetensorsHeader(bytes);
  const tensors = Object.entries(header.tensors).map(([name, e]) => ({ name, shape: e.shape, data: readTensor(bytes, header, name) }));
  return { tensors, metadata: header.metadata };
}

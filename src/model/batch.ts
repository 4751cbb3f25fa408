/** Batch validation and slicing shared by the CPU and WebGPU trainers. */
import { ValidationError } from "../types/errors.ts";
import type { TokenBatch } from "./train-types.ts";

/** Row width T = P + R. */
export function rowWidth(batch: TokenBatch): number {
  return batch.P + batch.R;
}

/** Throws ValidationError unless every tensor has the documented shape and the masks are 0/1. */
export function validateBatch(batch: TokenBatch): void {
  const { n, P, R } = batch;
  if (!(Number.isInteger(n) && n >= 1)) throw new ValidationError(`batch needs n >= 1 rows, got ${n}`, ["n"]);
  if (!(Number.isInteger(P) && P >= 1)) throw new ValidationError(`batch needs P >= 1 prompt columns, got ${P}`, ["P"]);
  if (!(Number.isInteger(R) && R >= 1)) throw new ValidationError(`batch needs R >= 1 response columns, got ${R}`, ["R"]);
  const T = P + R;
  for (const key of ["inputIds", "attentionMask", "positionIds"] as const) {
    if (batch[key].length !== n * T)
      throw new ValidationError(`${key} has ${batch[key].length} elements, expected n * (P + R) = ${n * T}`, [key]);
  }
  if (batch.responseMask !== undefined && batch.responseMask.length !== n * R)
    throw new ValidationError(`responseMask has ${batch.responseMask.length} elements, expected n * R = ${n * R}`, ["responseMask"]);
  for (const key of ["attentionMask", "responseMask"] as const) {
    const m = batch[key];
    if (m === undefined) continue;
    for (let i = 0; i < m.length; i++)
      if (m[i] !== 0 && m[i] !== 1) throw new ValidationError(`${key} must hold 0 or 1, got ${m[i]}`, [key, i]);
  }
}

/** The temperature the logits are divided by (`LogProbOptions.temperature`): 1 when not given; a
 * ValidationError unless a finite number > 0. */
export function logitTemperature(temperature: number | undefined): number {
  if (temperature === undefined) return 1;
  if (!(Number.isFinite(temperature) && temperature > 0))
    throw new ValidationError(`temperature must be a finite number > 0, got ${temperature}`, ["temperature"]);
  return temperature;
}

/** Throws unless a per-response-token tensor has n * R elements. */
export function checkResponseTensor(name: string, a: ArrayLike<number>, batch: TokenBatch): void {
  if (a.length !== batch.n * batch.R)
    throw new ValidationError(`${name} has ${a.length} elements, expected n * R = ${batch.n * batch.R}`, [name]);
}

/** The [n, R] response mask as floats: `responseMask`, or the last R columns of `attentionMask`. */
export function resolveResponseMask(batch: TokenBatch): Float32Array {
  const { n, P, R } = batch;
  if (batch.responseMask !== undefined) return Float32Array.from(batch.responseMask);
  const out = new Float32Array(n * R);
  for (let i = 0; i < n; i++) for (let t = 0; t < R; t++) out[i * R + t] = batch.attentionMask[i * (P + R) + P + t];
  return out;
}

/** Rows [r0, r1) of a batch, as views (no copies). */
export function sliceRows(batch: TokenBatch, r0: number, r1: number): TokenBatch {
  const T = rowWidth(batch);
  return {
    n: r1 - r0,
    P: batch.P,
    R: batch.R,
    inputIds: batch.inputIds.subarray(r0 * T, r1 * T),
    attentionMask: batch.attentionMask.subarray(r0 * T, r1 * T),
    positionIds: batch.positionIds.subarray(r0 * T, r1 * T),
    responseMask: batch.responseMask?.subarray(r0 * batch.R, r1 * batch.R),
  };
}

/** [r0, r1) row ranges of at most `size` rows covering n rows. */
export function microBatches(n: number, size: number | undefined): Array<[number, number]> {
  const step = size === undefined ? n : size;
  if (!(Number.isInteger(step) && step >= 1))
    throw new ValidationError(`microBatchSize must be a positive integer, got ${size}`, ["microBatchSize"]);
  const out: Array<[number, number]> = [];
  for (let r = 0; r < n; r += step) out.push([r, Math.min(n, r + step)]);
  return out;
}

/**
 * A batch from token lists (tests, demos, SFT data): prompts left-padded to P (keeping the last P),
 * responses right-padded to R (keeping the first R), positions `max(cumsum(mask) - 1, 0)`.
 * The GRPO loop uses the Wasm core's layout, which does the same plus rewards and drop marks.
 */
export function batchFromTokens(
  rows: Array<{ prompt: number[]; response: number[] }>,
  options: { P?: number; R?: number; padId: number },
): TokenBatch {
  const P = options.P ?? Math.max(1, ...rows.map((r) => r.prompt.length));
  const R = options.R ?? Math.max(1, ...rows.map((r) => r.response.length));
  const T = P + R;
  const n = rows.length;
  const inputIds = new Int32Array(n * T).fill(options.padId);
  const attentionMask = new Int32Array(n * T);
  const positionIds = new Int32Array(n * T);
  rows.forEach((row, i) => {
    const prompt = row.prompt.slice(Math.max(0, row.prompt.length - P));
    const response = row.response.slice(0, R);
    const o = i * T;
    prompt.forEach((id, j) => {
      inputIds[o + P - prompt.length + j] = id;
      attentionMask[o + P - prompt.length + j] = 1;
    });
    response.forEach((id, j) => {
      inputIds[o + P + j] = id;
      attentionMask[o + P + j] = 1;
    });
    let c = 0;
    for (let t = 0; t < T; t++) {
      c += attentionMask[o + t];
      positionIds[o + t] = Math.max(c - 1, 0);
    }
  });
  return { n, P, R, inputIds, attentionMask, positionIds };
}

/**
 * The critic's value head (verl's `score` layer: a linear map from the hidden size to one output, with a
 * bias) on final-norm rows, and its backward. Plain TypeScript on every backend: it costs O(rows · d),
 * nothing next to the decoder under it.
 */
import { alloc, type Arr } from "./ops.ts";

/** v[i] = h[i] · w + b for each of the `rows` rows of h [rows, dim]; result of w's element type. */
export function valueHeadForward(h: ArrayLike<number>, w: Arr, b: number, rows: number, dim: number): Arr {
  const v = alloc(w, rows);
  for (let i = 0; i < rows; i++) {
    let s = b;
    for (let j = 0; j < dim; j++) s += h[i * dim + j] * w[j];
    v[i] = s;
  }
  return v;
}

/** Given dL/dv per row: dL/dh [rows, dim] = dv ⊗ w, dL/dw = Σ dv_i h_i, dL/db = Σ dv_i. */
export function valueHeadBackward(
  h: ArrayLike<number>,
  w: Arr,
  dv: ArrayLike<number>,
  rows: number,
  dim: number,
): { dh: Arr; dw: Arr; db: number } {
  const dh = alloc(w, rows * dim);
  const dw = alloc(w, dim);
  const acc = new Float64Array(dim);
  let db = 0;
  for (let i = 0; i < rows; i++) {
    const g = dv[i];
    if (g === 0) continue;
    db += g;
    for (let j = 0; j < dim; j++) {
      dh[i * dim + j] = g * w[j];
      acc[j] += g * h[i * dim + j];
    }
  }
  dw.set(acc);
  return { dh, dw, db };
}

// The model's light elementwise ops, so that activations kept in Wasm memory (src/cpu/wasm-ops.ts scopes)
// need not go out to TypeScript for a residual add or a bias: the same bits as the reference (an f32 add
// is exact in f64 before its one rounding; column sums add in f64 in row order, as the reference does).

/** y = a + b over n f32 (y may alias a or b). */
export function addF32(a: usize, b: usize, y: usize, n: i32): void {
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const o = <usize>i << 2;
    v128.store(y + o, f32x4.add(v128.load(a + o), v128.load(b + o)));
  }
  for (; i < n; i++) {
    const o = <usize>i << 2;
    store<f32>(y + o, load<f32>(a + o) + load<f32>(b + o));
  }
}

/** x[r, j] += bias[j] for rows r of x [rows, cols], in place. */
export function addBias(x: usize, bias: usize, rows: i32, cols: i32): void {
  for (let r = 0; r < rows; r++) addF32(x + (<usize>r * <usize>cols << 2), bias, x + (<usize>r * <usize>cols << 2), cols);
}

/** y[j] = Σ_r x[r, j] of x [rows, cols], summed in f64 in row order (acc: cols f64 of scratch), rounded once. */
export function columnSums(x: usize, y: usize, acc: usize, rows: i32, cols: i32): void {
  memory.fill(acc, 0, <usize>cols << 3);
  for (let r = 0; r < rows; r++) {
    const row = x + (<usize>r * <usize>cols << 2);
    for (let j = 0; j < cols; j++) {
      const p = acc + (<usize>j << 3);
      store<f64>(p, load<f64>(p) + <f64>load<f32>(row + (<usize>j << 2)));
    }
  }
  for (let j = 0; j < cols; j++) store<f32>(y + (<usize>j << 2), <f32>load<f64>(acc + (<usize>j << 3)));
}

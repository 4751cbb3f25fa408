// Batch layout (trace-train.md §8.3-8.5): ragged prompt/response ids -> the padded training tensors, one pass.

@inline function row(ptr: usize, i: i32, width: i32): usize {
  return ptr + ((<usize>i * <usize>width) << 2);
}

/** Writes `count` copies of the i32 `value` at `dst`, four at a time. */
@inline function fillI32(dst: usize, count: i32, value: i32): void {
  const v = i32x4.splat(value);
  let k = 0;
  for (; k + 4 <= count; k += 4) v128.store(dst + (<usize>k << 2), v);
  for (; k < count; k++) store<i32>(dst + (<usize>k << 2), value);
}

/**
 * Lays out `n` rows. Offsets are i32 arrays of length n+1 into the flat i32 id arrays; `maskOff == 0`
 * means "no explicit response mask" (transition level: the response mask is the response attention).
 * A prompt longer than P keeps its FIRST P tokens and is marked dropped (§8.3 step 2); a response longer
 * than R keeps its first R tokens and counts as truncated. Returns the number of truncated responses.
 */
export function batchLayout(
  n: i32, P: i32, R: i32, pad: i32,
  promptOff: usize, promptIds: usize, respOff: usize, respIds: usize,
  maskOff: usize, maskVals: usize, rewards: usize,
  outPrompts: usize, outResponses: usize, outInputIds: usize, outAttn: usize, outPos: usize,
  outRespMask: usize, outScores: usize, outDrop: usize,
): i32 {
  const W = P + R;
  let truncated = 0;
  for (let i = 0; i < n; i++) {
    const p0 = load<i32>(promptOff + (<usize>i << 2));
    const plen = load<i32>(promptOff + (<usize>(i + 1) << 2)) - p0;
    const r0 = load<i32>(respOff + (<usize>i << 2));
    const rlen = load<i32>(respOff + (<usize>(i + 1) << 2)) - r0;
    const keepP = min(plen, P);
    const keepR = min(rlen, R);
    if (rlen > R) truncated++;
    store<u8>(outDrop + <usize>i, plen > P ? 1 : 0);
    const padP = P - keepP;
    const src = promptIds + (<usize>p0 << 2);
    const rsrc = respIds + (<usize>r0 << 2);

    const prow = row(outPrompts, i, P);
    fillI32(prow, padP, pad);
    memory.copy(prow + (<usize>padP << 2), src, <usize>keepP << 2);
    const rrow = row(outResponses, i, R);
    memory.copy(rrow, rsrc, <usize>keepR << 2);
    fillI32(rrow + (<usize>keepR << 2), R - keepR, pad);

    const irow = row(outInputIds, i, W);
    memory.copy(irow, prow, <usize>P << 2);
    memory.copy(irow + (<usize>P << 2), rrow, <usize>R << 2);

    const arow = row(outAttn, i, W);
    fillI32(arow, padP, 0);
    fillI32(arow + (<usize>padP << 2), keepP + keepR, 1);
    fillI32(arow + (<usize>(P + keepR) << 2), R - keepR, 0);

    // position_ids = max(cumsum(mask) - 1, 0): zeros over the left padding, 0..c-1, then c-1 held.
    const c = keepP + keepR;
    const posrow = row(outPos, i, W);
    fillI32(posrow, padP, 0);
    for (let k = 0; k < c; k++) store<i32>(posrow + (<usize>(padP + k) << 2), k);
    fillI32(posrow + (<usize>(P + keepR) << 2), R - keepR, c > 0 ? c - 1 : 0);

    const mrow = row(outRespMask, i, R);
    if (maskOff == 0) {
      fillI32(mrow, keepR, 1);
      fillI32(mrow + (<usize>keepR << 2), R - keepR, 0);
    } else {
      const m0 = load<i32>(maskOff + (<usize>i << 2));
      const mlen = min(load<i32>(maskOff + (<usize>(i + 1) << 2)) - m0, R);
      memory.copy(mrow, maskVals + (<usize>m0 << 2), <usize>mlen << 2);
      fillI32(mrow + (<usize>mlen << 2), R - mlen, 0);
    }

    // Reward at argmax(position_ids * attention_mask) of the full row (first maximal index), then keep the
    // last R columns: the last attended token when c >= 2, else column 0 of the full row.
    const srow = row(outScores, i, R);
    fillI32(srow, R, 0); // +0.0f bit pattern
    const at = c >= 2 ? padP + c - 1 : 0;
    if (at >= P && at < W) store<f32>(srow + (<usize>(at - P) << 2), load<f32>(rewards + (<usize>i << 2)));
  }
  return truncated;
}

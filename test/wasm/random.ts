/** Seeded random inputs for kernel tests and the cross-runtime check (no dependency, no test framework). */

/** mulberry32: a tiny, well-mixed 32-bit PRNG. */
export function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1)), // inclusive
    float: (lo: number, hi: number) => lo + next() * (hi - lo),
    bool: (p = 0.5) => next() < p,
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)],
  };
}
export type Rng = ReturnType<typeof rng>;

/** A response mask: each row is ones then zeros (length 0..T), sometimes a random 0/1 pattern. */
export function randomMask(r: Rng, B: number, T: number): Float32Array {
  const m = new Float32Array(B * T);
  for (let i = 0; i < B; i++) {
    if (r.bool(0.2)) {
      for (let t = 0; t < T; t++) m[i * T + t] = r.bool() ? 1 : 0;
      continue;
    }
    const len = r.bool(0.1) ? 0 : r.int(0, T);
    for (let t = 0; t < len; t++) m[i * T + t] = 1;
  }
  return m;
}

/** Token rewards: outcome style (one value on the last token), dense, or tied across rows. */
export function randomRewards(r: Rng, B: number, T: number, mask: Float32Array): Float32Array {
  const x = new Float32Array(B * T);
  const style = r.pick(["outcome", "dense", "tied"] as const);
  const tied = r.pick([0, 1, 0.5]);
  for (let i = 0; i < B; i++) {
    if (style === "dense") {
      for (let t = 0; t < T; t++) x[i * T + t] = r.float(-2, 2);
      continue;
    }
    let last = -1;
    for (let t = 0; t < T; t++) if (mask[i * T + t]) last = t;
    if (last >= 0) x[i * T + last] = style === "tied" ? tied : r.pick([0, 1, r.float(-1, 1)]);
  }
  return x;
}

export function randomFloats(r: Rng, n: number, lo: number, hi: number): Float32Array {
  return Float32Array.from({ length: n }, () => r.float(lo, hi));
}

/** Group ids in [0, G): some singletons, some big groups. */
export function randomGroups(r: Rng, B: number): Int32Array {
  const G = Math.max(1, r.int(1, Math.max(1, B)));
  return Int32Array.from({ length: B }, () => r.int(0, G - 1));
}

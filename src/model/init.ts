import { paramLayout, type ModelConfig } from "./config.ts";

/** splitmix32's increment (the golden ratio in 32 bits). */
export const SPLITMIX32_GAMMA = 0x9e3779b9;

/** splitmix32's output function: a 32-bit avalanche of `z` (also used to mix seeds, src/proxy/sampling-seed.ts). */
export function splitmix32Finalize(z: number): number {
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return (z ^ (z >>> 16)) >>> 0;
}

/**
 * Deterministic PRNG: splitmix32 seeding a xorshift128 state; uniforms in (0, 1) with 32-bit
 * resolution, normals by Box-Muller (both outputs used). Same seed, same sequence; Node, Deno and Bun
 * give the same bits (test/model/runtimes.test.ts).
 */
export class Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  private spare: number | null = null;

  constructor(seed: number) {
    let x = seed >>> 0;
    const next = (): number => {
      // splitmix32
      x = (x + SPLITMIX32_GAMMA) >>> 0;
      return splitmix32Finalize(x);
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next() | 1; // never the all-zero state
  }

  /** Next 32 random bits (xorshift128). */
  nextU32(): number {
    let t = this.s3;
    const s = this.s0;
    this.s3 = this.s2;
    this.s2 = this.s1;
    this.s1 = s;
    t ^= t << 11;
    t ^= t >>> 8;
    this.s0 = (t ^ s ^ (s >>> 19)) >>> 0;
    return this.s0;
  }

  /** Uniform in (0, 1), never 0 (safe for log). */
  uniform(): number {
    return (this.nextU32() + 0.5) / 4294967296;
  }

  /** Standard normal (Box-Muller). */
  normal(): number {
    if (this.spare !== null) {
      const s = this.spare;
      this.spare = null;
      return s;
    }
    const r = Math.sqrt(-2 * Math.log(this.uniform()));
    const a = 2 * Math.PI * this.uniform();
    this.spare = r * Math.sin(a);
    return r * Math.cos(a);
  }
}

export const INIT_STD = 0.02;

/**
 * Seeded initial parameters in the flat layout of `paramLayout(config)`: N(0, 0.02) for matrices,
 * ones for norms, `wo` and `w_down` additionally scaled by 1/sqrt(2 n_layers). Drawn in layout order,
 * so the same seed gives bit-identical parameters.
 */
export function initParams(config: ModelConfig, seed: number): Float32Array {
  const rng = new Rng(seed);
  const layout = paramLayout(config);
  const last = layout[layout.length - 1];
  const flat = new Float32Array(last.offset + last.size);
  const outScale = 1 / Math.sqrt(2 * config.n_layers);
  for (const spec of layout) {
    const view = flat.subarray(spec.offset, spec.offset + spec.size);
    if (spec.shape.length === 1) {
      view.fill(1);
      continue;
    }
    const isOutput = spec.name.endsWith(".wo") || spec.name.endsWith(".w_down");
    const std = INIT_STD * (isOutput ? outScale : 1);
    for (let i = 0; i < view.length; i++) view[i] = rng.normal() * std;
  }
  return flat;
}

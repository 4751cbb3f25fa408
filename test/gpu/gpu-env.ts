/** Shared by the GPU tests: one probe per test file; tests skip with a printed reason when there is no adapter. */
import { probeGpu, describeAdapter } from "../../src/gpu/device.ts";
import type { Rng } from "../../src/model/init.ts";

export const probe = await probeGpu();
export const noGpu = !probe.ok;
if (probe.ok) console.log(`[gpu tests] adapter: ${describeAdapter(probe.report)}`);
else console.warn(`[gpu tests] SKIPPED: no WebGPU adapter: ${probe.reason}`);

export function randn(rng: Rng, n: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = rng.normal() * scale;
  return a;
}

export function randInt(rng: Rng, n: number, max: number): Uint32Array {
  const a = new Uint32Array(n);
  for (let i = 0; i < n; i++) a[i] = rng.nextU32() % max;
  return a;
}

/** Largest |a - b| relative to max(1, |b|max): one number that reads the same for small and large tensors. */
export function maxRelError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let scale = 1;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
  let err = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= err)) err = Number.isNaN(d) ? Infinity : d;
  }
  return err / scale;
}

/**
 * How one call's work is cut over a pool's threads: fixed ranges chosen from the shapes alone, never by
 * the scheduler, so results do not depend on timing; and, since no element's arithmetic depends on the
 * split, not on the thread count either (src/cpu/README.md, "Threads").
 */
import { GEMM_FORM, type CpuCore } from "./kernels/index.ts";
import type { CpuPool, Task } from "./pool.ts";

/** GEMMs smaller than this many multiply-adds stay on one thread (waking workers costs microseconds). */
export const PARALLEL_MIN_WORK = 1 << 18;

/**
 * Column ranges of n for `parts` threads: fixed by (n, parts) alone, boundaries on multiples of 8 (the
 * kernel's panel width). Any split gives the same bits: an element's arithmetic does not depend on it.
 */
export function columnRanges(n: number, parts: number): [number, number][] {
  return splitRanges(n, parts, 8);
}

/** [i0, i1) ranges of [0, count) in `parts`, boundaries on multiples of `align`, fixed by the arguments. */
export function splitRanges(count: number, parts: number, align = 1): [number, number][] {
  const units = Math.ceil(count / align);
  const out: [number, number][] = [];
  for (let t = 0; t < parts; t++) {
    const i0 = Math.min(count, Math.floor((units * t) / parts) * align);
    const i1 = Math.min(count, Math.floor((units * (t + 1)) / parts) * align);
    if (i1 > i0) out.push([i0, i1]);
  }
  return out;
}

/**
 * The tasks of one GEMM over `scratch.length` threads (one scratch region each), in fixed ranges: columns
 * on multiples of 8, or — few columns, many rows (the demo's d = 64 projections), so that no thread packs
 * all of A for a sliver of B — rows on multiples of 4 (not A^T B, whose A row stride is m). Every split gives
 * the same bits.
 */
export function gemmTasks(form: number, pa: number, pb: number, pc: number, m: number, k: number, n: number, scratch: number[]): Task[] {
  const threads = scratch.length;
  if (threads > 1 && form !== GEMM_FORM.ATB && n < 64 * threads && m >= 16 * threads)
    return splitRanges(m, threads, 4).map(([i0, i1], t) => ({
      name: "gemm",
      args: [form, pa + i0 * k * 4, pb, pc + i0 * n * 4, i1 - i0, k, n, 0, n, scratch[t]],
    }));
  return columnRanges(n, threads).map(([j0, j1], t) => ({ name: "gemm", args: [form, pa, pb, pc, m, k, n, j0, j1, scratch[t]] }));
}

/**
 * Runs task(i0, i1) over [0, count): in fixed ranges on the pool when `work` is large enough to pay for
 * waking the workers, else once on `core` (the calling thread).
 */
export function runSplit(
  core: CpuCore,
  pool: CpuPool | null,
  count: number,
  work: number,
  task: (i0: number, i1: number) => Task,
  align = 1,
): void {
  const ranges = pool && work >= PARALLEL_MIN_WORK ? splitRanges(count, pool.threads, align) : [];
  if (ranges.length > 1) {
    pool!.run(ranges.map(([i0, i1]) => task(i0, i1)));
    return;
  }
  const t = task(0, count);
  (core.exports[t.name] as unknown as (...a: number[]) => void)(...t.args);
}

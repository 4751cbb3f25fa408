import type { GpuContext } from "../context.ts";
import { kernelBindings, memoKernel } from "../kernel-source.ts";
import { elementwiseMain, launch1d } from "./grid.ts";

const FWD = kernelBindings({ uniforms: { n: "u32" }, buffers: { gate: "read f32", up: "read f32", y: "read_write f32" } });
const BWD = kernelBindings({
  uniforms: { n: "u32" },
  buffers: { gate: "read f32", up: "read f32", dy: "read f32", dgate: "read_write f32", dup: "read_write f32" },
});

/** y = silu(gate) * up. */
export function swiglu(ctx: GpuContext, gate: GPUBuffer, up: GPUBuffer, y: GPUBuffer, n: number): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "swiglu_fwd", FWD, () =>
    elementwiseMain(
      wg,
      "P.n",
      `  let z = gate[i];
  y[i] = z / (1.0 + exp(-z)) * up[i];`,
    ),
  );
  ctx.dispatch(k, { n }, { gate, up, y }, launch1d(ctx, n));
}

/** dgate = dy * up * s (1 + g (1 - s)), dup = dy * silu(g); written over gate and up's gradient buffers. */
export function swigluBackward(
  ctx: GpuContext,
  gate: GPUBuffer,
  up: GPUBuffer,
  dy: GPUBuffer,
  dgate: GPUBuffer,
  dup: GPUBuffer,
  n: number,
): void {
  const wg = ctx.tuning.elementwise;
  const k = memoKernel(ctx.tuning, "swiglu_bwd", BWD, () =>
    elementwiseMain(
      wg,
      "P.n",
      `  let z = gate[i];
  let s = 1.0 / (1.0 + exp(-z));
  dgate[i] = dy[i] * up[i] * s * (1.0 + z * (1.0 - s));
  dup[i] = dy[i] * z * s;`,
    ),
  );
  ctx.dispatch(k, { n }, { gate, up, dy, dgate, dup }, launch1d(ctx, n));
}

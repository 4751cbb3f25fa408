import { groupsFor, type GpuContext } from "../context.ts";

/** Splits a 1-D workgroup count over x and y when it exceeds the per-dimension limit. */
export function split2d(groups: number, maxPerDim = 65535): [number, number] {
  return groups <= maxPerDim ? [groups, 1] : [maxPerDim, Math.ceil(groups / maxPerDim)];
}

/** WGSL expression for the flat index of a 1-D kernel launched with {@link launch1d}; needs builtin `g`. */
function flatIndex(wg: number): string {
  return `g.x + g.y * ${wg}u * 65535u`;
}

/** WGSL entry point of a 1-D kernel of `wg` threads per workgroup launched with {@link launch1d}: `body`
 * runs once for each flat index `index` below the WGSL expression `count`. */
export function elementwiseMain(wg: number, count: string, body: string, index = "i"): string {
  return `@compute @workgroup_size(${wg})
fn main(@builtin(global_invocation_id) g: vec3u) {
  let ${index} = ${flatIndex(wg)};
  if (${index} >= ${count}) { return; }
${body}
}
`;
}

/** Workgroup grid covering n elements with the elementwise workgroup size. */
export function launch1d(ctx: GpuContext, n: number): [number, number] {
  return split2d(groupsFor(n, ctx.tuning.elementwise));
}

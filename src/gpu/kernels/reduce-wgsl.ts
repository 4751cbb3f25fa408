/** WGSL for a deterministic workgroup tree-sum: `red` holds one partial per thread; after the call red[0]
 * holds the total. Shared by every row-reduction kernel. Needs `lid` (local index) and THREADS. */
export function treeSumWgsl(threads: number): string {
  return `
const THREADS = ${threads}u;
var<workgroup> red: array<f32, ${threads}>;
fn treeSum(lid: u32, v: f32) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  for (var s = THREADS / 2u; s > 0u; s = s / 2u) {
    if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}
fn treeMax(lid: u32, v: f32) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  for (var s = THREADS / 2u; s > 0u; s = s / 2u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}
`;
}

/** WGSL of a row kernel launched with split2d over `P.rows`: one workgroup of `threads` per row, the tree
 * sums above, and an entry point whose `body` sees `row`, `lid`, `wg`, THREADS, treeSum and treeMax. */
export function rowMain(threads: number, body: string): string {
  return `${treeSumWgsl(threads)}
@compute @workgroup_size(${threads})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wg.x + wg.y * 65535u;
  if (row >= P.rows) { return; }
${body}
}
`;
}

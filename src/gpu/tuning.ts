/** Work sizes every kernel derives from the device limits, computed once here so no kernel hard-codes them. */
export interface GpuTuning {
  /** Threads of 1-D elementwise kernels. */
  elementwise: number;
  /** Threads cooperating on one row reduction (power of two). */
  rowThreads: number;
  /** Matmul: the workgroup is side x side threads, each computing micro x micro outputs; k-tile depth. */
  matmulSide: number;
  /** Outputs per thread per dimension in the matmul (fixed by the kernel at 4). */
  matmulMicro: number;
  matmulDepth: number;
  /** Attention: queries per workgroup (one thread each); K/V rows held in workgroup memory per head dim. */
  attentionQueries: number;
  workgroupStorageBytes: number;
  maxWorkgroupsPerDim: number;
}

function floorPow2(n: number): number {
  return 2 ** Math.floor(Math.log2(Math.max(1, n)));
}

export function tuningFromLimits(limits: GPUSupportedLimits): GpuTuning {
  const maxThreads = Math.min(limits.maxComputeInvocationsPerWorkgroup, limits.maxComputeWorkgroupSizeX);
  const storage = limits.maxComputeWorkgroupStorageSize;
  const elementwise = floorPow2(Math.min(256, maxThreads));
  const rowThreads = floorPow2(Math.min(256, maxThreads));
  let matmulSide = floorPow2(
    Math.min(16, Math.floor(Math.sqrt(limits.maxComputeInvocationsPerWorkgroup)), limits.maxComputeWorkgroupSizeY),
  );
  const matmulMicro = 4;
  let matmulDepth = 16;
  // Two tiles (A: tile x depth, B: depth x tile) of f32 must fit in workgroup memory.
  while (2 * matmulSide * matmulMicro * matmulDepth * 4 > storage && matmulDepth > 4) matmulDepth /= 2;
  while (2 * matmulSide * matmulMicro * matmulDepth * 4 > storage && matmulSide > 1) matmulSide /= 2;
  return {
    elementwise,
    rowThreads,
    matmulSide,
    matmulMicro,
    matmulDepth,
    attentionQueries: floorPow2(Math.min(64, maxThreads)),
    workgroupStorageBytes: storage,
    maxWorkgroupsPerDim: limits.maxComputeWorkgroupsPerDimension,
  };
}

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { describeAdapter, requestGpuDevice, INTERESTING_FEATURES, type GpuDeviceHandle } from "../../src/gpu/device.ts";
import { detectRuntime } from "../../src/gpu/navigator.ts";
import { GpuContext } from "../../src/gpu/context.ts";
import { tuningFromLimits } from "../../src/gpu/tuning.ts";
import { matmul } from "../../src/gpu/kernels/matmul.ts";
import { attention } from "../../src/gpu/kernels/attention.ts";
import { createPolicyTrainer } from "../../src/engine/factory.ts";
import { CpuTrainer } from "../../src/cpu/trainer.ts";
import * as ops from "../../src/model/reference/ops.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { batchFromTokens } from "../../src/model/batch.ts";
import { paramViews } from "../../src/model/params.ts";
import { maxRelError, noGpu, randn } from "./gpu-env.ts";

/** A GPUSupportedLimits-like object with the fields tuningFromLimits reads. */
function limits(threads: number, storage: number): GPUSupportedLimits {
  return {
    maxComputeInvocationsPerWorkgroup: threads,
    maxComputeWorkgroupSizeX: threads,
    maxComputeWorkgroupSizeY: threads,
    maxComputeWorkgroupStorageSize: storage,
    maxComputeWorkgroupsPerDimension: 65535,
  } as GPUSupportedLimits;
}

describe("tuning from device limits", () => {
  it("fits workgroups and tiles into small limits and grows with big ones", () => {
    const small = tuningFromLimits(limits(64, 4096));
    expect(small.matmulSide ** 2).toBeLessThanOrEqual(64);
    expect(2 * small.matmulSide * small.matmulMicro * small.matmulDepth * 4).toBeLessThanOrEqual(4096);
    expect(small.elementwise).toBeLessThanOrEqual(64);
    expect(small.attentionQueries).toBeLessThanOrEqual(64);
    const big = tuningFromLimits(limits(1024, 32768));
    expect(big.matmulSide).toBeGreaterThan(small.matmulSide);
    expect(big.rowThreads).toBe(256);
  });
});

describe("runtime detection", () => {
  it("says node under vitest", () => {
    expect(detectRuntime()).toBe("node");
  });
});

describe.skipIf(noGpu)("device acquisition and small-limit kernels", { timeout: 180_000 }, () => {
  let handle: GpuDeviceHandle;
  beforeAll(async () => {
    handle = await requestGpuDevice();
  });
  afterAll(() => handle?.device.destroy());

  it("reports the adapter, its features and the raised limits", () => {
    const r = handle.report;
    expect(r.runtime).toBe("node");
    expect(r.features.every((f) => (INTERESTING_FEATURES as readonly string[]).includes(f))).toBe(true);
    for (const f of r.features) expect(handle.device.features.has(f)).toBe(true);
    expect(r.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 * 1024 * 1024);
    expect(r.limits.maxComputeInvocationsPerWorkgroup).toBe(handle.device.limits.maxComputeInvocationsPerWorkgroup);
    expect(describeAdapter(r)).toContain(r.software ? "(software)" : "(hardware)");
    if (/llvmpipe/i.test(r.description)) expect(r.software).toBe(true);
  });

  it("matmul and attention stay correct with tiles derived from small limits", async () => {
    const ctx = new GpuContext(handle.device, handle, tuningFromLimits(limits(64, 4096)));
    const rng = new Rng(3);
    const [M, K, N] = [45, 33, 27];
    const a = randn(rng, M * K);
    const b = randn(rng, K * N);
    const C = ctx.alloc(M * N);
    matmul(ctx, ctx.upload(a), ctx.upload(b), C, { M, N, K });
    expect(maxRelError(await ctx.read(C), ops.matmul(a, b, { m: M, k: K, n: N }))).toBeLessThan(2e-5);
    const dims = { batch: 1, seq: 70, heads: 2, kvHeads: 1, headDim: 32 };
    const q = randn(rng, 70 * 2 * 32);
    const k = randn(rng, 70 * 32);
    const v = randn(rng, 70 * 32);
    const mask = new Uint32Array(70).fill(1);
    const out = ctx.alloc(q.length);
    attention(ctx, ctx.upload(q), ctx.upload(k), ctx.upload(v), ctx.upload(mask), out, ctx.alloc(140), dims);
    expect(maxRelError(await ctx.read(out), ops.attention(q, k, v, mask, dims).out)).toBeLessThan(1e-5);
  });

  it("the factory picks WebGPU here, and the CPU trainer when asked", async () => {
    const config = {
      vocab_size: 20,
      d_model: 8,
      n_layers: 1,
      n_heads: 2,
      n_kv_heads: 1,
      d_ff: 12,
      max_seq_len: 16,
      rope_theta: 10000,
      norm_eps: 1e-5,
      tie_embeddings: true,
    };
    const auto = await createPolicyTrainer({ config });
    expect(auto.backend).toBe("webgpu");
    (auto as { destroy?: () => void }).destroy?.();
    expect(await createPolicyTrainer({ config, backend: "cpu" })).toBeInstanceOf(CpuTrainer);
    // tensors by name reach either backend as the same weights
    const flat = initParams(config, 3);
    const byName = paramViews(config, flat);
    const batch = batchFromTokens([{ prompt: [1, 2, 3], response: [4, 5] }], { padId: 0 });
    const want = await new CpuTrainer({ config, params: flat }).logProbs(batch);
    expect((await (await createPolicyTrainer({ config, backend: "cpu", params: byName })).logProbs(batch)).log_probs).toEqual(
      want.log_probs,
    );
    const gpu = await createPolicyTrainer({ config, backend: "webgpu", params: byName });
    expect(maxRelError((await gpu.logProbs(batch)).log_probs, want.log_probs)).toBeLessThan(2e-5);
    (gpu as { destroy?: () => void }).destroy?.();
  });
});

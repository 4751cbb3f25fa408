/**
 * The batching wrapper: concurrent calls run as one batch of the inner engine and each gets exactly its
 * own answers; calls for other weights wait for their own batch; bad input fails only its own call; an
 * engine error fails the calls of that batch. On the GPU, batched answers equal the answers of separate calls.
 */
import { afterAll, describe, expect, it } from "vitest";
import { initParams, presetConfig } from "../../src/model/index.ts";
import type { GenerationEngine, GenerationRequest } from "../../src/model/generation.ts";
import { BatchingEngine } from "../../src/engine/index.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { noGpu } from "../gpu/gpu-env.ts";

const config = { ...presetConfig("tiny"), n_layers: 1, max_seq_len: 32 };
const params = initParams(config, 4);
const other = initParams(config, 5);
const req = (prompt: number[], seed: number, maxTokens = 4): GenerationRequest => ({
  prompt,
  maxTokens,
  temperature: 1,
  seed,
  stopTokenIds: [],
});

/** The CPU engine, counting the calls and the sequences of each. */
function counting(): GenerationEngine & { calls: number[] } {
  const calls: number[] = [];
  return {
    backend: "cpu",
    calls,
    generate(c, p, rs) {
      calls.push(rs.length);
      return cpuGenerationEngine.generate(c, p, rs);
    },
  };
}

describe("BatchingEngine", () => {
  it("joins concurrent calls for the same weights into one inner call, answers each with its own", async () => {
    const inner = counting();
    const engine = new BatchingEngine(inner);
    const calls = [[req([1, 2, 3], 1), req([1, 2, 3], 2)], [req([7], 3)], [req([9, 9, 9, 9, 9], 4, 2)]];
    const answers = await Promise.all(calls.map((rs) => engine.generate(config, params, rs)));
    expect(inner.calls).toEqual([4]);
    for (const [i, rs] of calls.entries()) expect(answers[i]).toEqual(await cpuGenerationEngine.generate(config, params, rs));
  });

  it("keeps other weights for a later batch, respects the sequence cap, and fails only bad callers", async () => {
    const inner = counting();
    const engine = new BatchingEngine(inner, 3);
    const a = engine.generate(config, params, [req([1], 1), req([2], 2)]);
    const b = engine.generate(config, other, [req([3], 3)]);
    const c = engine.generate(config, params, [req([4], 4)]);
    const d = engine.generate(config, params, [req([5], 5)]); // over the cap of 3: next batch
    expect(() => engine.generate(config, params, [req([], 6)])).toThrow(/at least one token/);
    const [ra, rb, rc, rd] = await Promise.all([a, b, c, d]);
    expect(inner.calls).toEqual([3, 1, 1]);
    expect(rb).toEqual(await cpuGenerationEngine.generate(config, other, [req([3], 3)]));
    expect([...ra, ...rc, ...rd]).toEqual(
      await cpuGenerationEngine.generate(config, params, [req([1], 1), req([2], 2), req([4], 4), req([5], 5)]),
    );
  });

  it("rejects every call of a batch whose inner call fails, then serves the next", async () => {
    let fail = true;
    const engine = new BatchingEngine({
      backend: "cpu",
      async generate(c, p, rs) {
        if (fail) throw new Error("device lost");
        return cpuGenerationEngine.generate(c, p, rs);
      },
    });
    const results = await Promise.allSettled([
      engine.generate(config, params, [req([1], 1)]),
      engine.generate(config, params, [req([2], 2)]),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    fail = false;
    expect(await engine.generate(config, params, [req([2], 2)])).toEqual(await cpuGenerationEngine.generate(config, params, [req([2], 2)]));
  });

  describe.skipIf(noGpu)("on the GPU engine", () => {
    let gpu: GpuGenerationEngine | null = null;
    afterAll(() => {
      gpu?.destroy();
      gpu?.ctx.destroy();
    });

    it("batched answers equal the answers of separate calls, bit for bit", { timeout: 240_000 }, async () => {
      gpu = await GpuGenerationEngine.create();
      const engine = new BatchingEngine(gpu);
      const calls = [
        [req([256, 260, 104, 105, 257, 261], 1, 6)],
        [req([72], 2, 6), req([72], 3, 6)],
        [
          req(
            Array.from({ length: 12 }, (_, j) => 40 + j),
            4,
            6,
          ),
        ],
      ];
      const joined = await Promise.all(calls.map((rs) => engine.generate(config, params, rs)));
      for (const [i, rs] of calls.entries()) expect(joined[i]).toEqual(await gpu.generate(config, params, rs));
    });
  });
});

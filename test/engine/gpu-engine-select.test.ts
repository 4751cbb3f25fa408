/**
 * Engine selection for the policy server: "cpu" gives the CPU engine; "webgpu" the KV-cached GPU engine
 * (sharing a given device, behind the batching wrapper); "auto" the GPU engine only on a hardware adapter. And the policy server,
 * on the GPU engine, answers the `openai` client with the CPU engine's greedy tokens.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuContext } from "../../src/gpu/context.ts";
import { applyChatTemplate, generate, initParams, presetConfig } from "../../src/model/index.ts";
import { ModelPolicy, PolicyServer } from "../../src/proxy/index.ts";
import { BatchingEngine, createGenerationEngine } from "../../src/engine/index.ts";
import { GpuGenerationEngine } from "../../src/gpu/generation.ts";
import { CpuGenerationEngine, cpuGenerationEngine } from "../../src/cpu/generation.ts";
import { noGpu, probe } from "../gpu/gpu-env.ts";

describe("generation engine selection", () => {
  it("cpu is a CPU engine of its own, on the Wasm ops unless told otherwise", async () => {
    const wasm = await createGenerationEngine({ backend: "cpu" });
    expect(wasm).toBeInstanceOf(CpuGenerationEngine);
    expect(wasm).not.toBe(cpuGenerationEngine);
    expect((wasm as CpuGenerationEngine).opsChoice).toBe("wasm");
    const plain = await createGenerationEngine({ backend: "cpu", ops: "reference" });
    expect((plain as CpuGenerationEngine).opsChoice).toBe("reference");
    await expect(createGenerationEngine({ backend: "cpu", ops: "gpu" as "wasm" })).rejects.toThrow(/ops must be/);
    await expect(createGenerationEngine({ backend: "cpu", threads: 0 })).rejects.toThrow(/threads must be/);
    (wasm as CpuGenerationEngine).close();
  });

  describe.skipIf(noGpu)("with a WebGPU adapter", { timeout: 240_000 }, () => {
    let ctx: GpuContext;
    beforeAll(async () => {
      ctx = await GpuContext.create();
    });
    afterAll(() => ctx?.destroy());

    it("webgpu shares the given device and caches keys and values; auto follows the adapter kind", async () => {
      const gpu = await createGenerationEngine({ backend: "webgpu", context: ctx });
      expect(gpu).toBeInstanceOf(BatchingEngine);
      const inner = (gpu as BatchingEngine).inner as GpuGenerationEngine;
      expect(inner).toBeInstanceOf(GpuGenerationEngine);
      expect(inner.ctx).toBe(ctx);
      expect(inner.kvCache).toBe(true);
      const logs: string[] = [];
      const auto = await createGenerationEngine({ context: ctx, log: (m) => logs.push(m) });
      expect(auto.backend).toBe(probe.ok && probe.report.software ? "cpu" : "webgpu");
      if (auto.backend === "cpu") expect(logs.join()).toMatch(/software/);
    });

    it("the policy server on the GPU engine answers the openai client with the CPU engine's greedy tokens", async () => {
      const config = { ...presetConfig("tiny"), max_seq_len: 64 };
      const params = initParams(config, 3);
      const engine = await createGenerationEngine({ backend: "webgpu", context: ctx });
      const server = new PolicyServer({ policy: new ModelPolicy({ model: "tiny-gpu", config, params, engine }) });
      await server.start();
      try {
        const client = new OpenAI({ baseURL: server.asResource().endpoint, apiKey: "unused", maxRetries: 0 });
        const messages = [{ role: "user" as const, content: "7*6=" }];
        const res = await client.chat.completions.create({ model: "tiny-gpu", messages, max_tokens: 6, temperature: 0, n: 2 });
        const want = generate(config, params, applyChatTemplate(messages, { addGenerationPrompt: true }), { maxTokens: 6, temperature: 0 });
        const raw = res as unknown as { choices: { token_ids: number[] }[] };
        expect(raw.choices.map((c) => c.token_ids)).toEqual([want.tokens, want.tokens]);
      } finally {
        await server.stop();
      }
    });
  });
});

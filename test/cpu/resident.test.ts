/**
 * Activations resident in Wasm memory (`Residency.scoped`, src/cpu/residency.ts): inside a scope the ops'
 * results are views over the backend's shared memory and go back in without a copy. Whole policy steps
 * (forward, PPO loss, backward, clip, AdamW) on random small configs agree with the plain-TS reference
 * within the kernels' tolerances (src/cpu/README.md) and give the same bits on 1 and 2 threads; the
 * lifetime rules hold (edits in place are seen by later ops, everything is freed when the scope ends, even
 * on a throw, memory stays flat over many steps); without shared memory results are copied as before.
 */
import { afterAll, describe, expect, it } from "vitest";
import { batchFromTokens } from "../../src/model/batch.ts";
import { parseModelConfig, type ModelConfig } from "../../src/model/config.ts";
import { CpuPool } from "../../src/cpu/pool.ts";
import { CpuTrainer, type CpuTrainerOptions } from "../../src/cpu/trainer.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { parseLoraConfig } from "../../src/model/lora.ts";
import { referenceOps as refOps, withActivations } from "../../src/model/model-ops.ts";
import { backward, forward } from "../../src/model/reference/model.ts";
import { newOptimizerState, resolveOptimizerOptions } from "../../src/model/reference/optim.ts";
import type { TokenBatch } from "../../src/model/train-types.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { LightningError } from "../../src/types/errors.ts";
import { instantiateCpuCore } from "../../src/cpu/kernels/index.ts";
import { randInt } from "../model/helpers.ts";

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** A small random config: GQA always (kv heads < heads), the optional features as `features` says. */
function randomConfig(rng: Rng, features: { qkvBias: boolean; qkNorm: boolean; tied: boolean }): ModelConfig {
  const kv = randInt(rng, 1, 2);
  const heads = kv * randInt(rng, 2, 3);
  const hd = 4 * randInt(rng, 1, 3);
  return parseModelConfig({
    vocab_size: randInt(rng, 40, 90),
    d_model: heads * hd + 4 * randInt(rng, 0, 2),
    n_layers: 2,
    n_heads: heads,
    n_kv_heads: kv,
    head_dim: hd,
    d_ff: randInt(rng, 20, 70),
    max_seq_len: 32,
    rope_theta: 10000,
    norm_eps: 1e-6,
    tie_embeddings: features.tied,
    qkv_bias: features.qkvBias,
    qk_norm: features.qkNorm,
  });
}

function randomBatch(rng: Rng, config: ModelConfig, rows: number): TokenBatch {
  const tok = () => randInt(rng, 1, config.vocab_size - 1);
  return batchFromTokens(
    Array.from({ length: rows }, () => ({
      prompt: Array.from({ length: randInt(rng, 2, 6) }, tok),
      response: Array.from({ length: randInt(rng, 3, 9) }, tok),
    })),
    { padId: 0 },
  );
}

const open: { close(): void }[] = [];
afterAll(() => {
  for (const e of open) e.close();
});

/** Two policy steps (micro-batches of 2 rows: several scopes per step), then the state and log-probs. */
async function steps(o: CpuTrainerOptions, batch: TokenBatch) {
  const t = new CpuTrainer(o);
  open.push(t);
  const rng = new Rng(11);
  const adv = Float32Array.from({ length: batch.n * batch.R }, () => rng.normal());
  const old = (await t.logProbs(batch)).log_probs.map((x) => x - 0.02);
  const metrics = [];
  for (let i = 0; i < 2; i++) metrics.push(await t.policyStep(batch, adv, old, { microBatchSize: 2, entropyCoeff: 0.01 }));
  return { metrics, state: await t.getState(), after: await t.logProbs(batch, { microBatchSize: 3 }) };
}

describe("policy steps with activations resident in Wasm memory", () => {
  const cases = [
    { name: "GQA, tied head", qkvBias: false, qkNorm: false, tied: true, lora: false },
    { name: "GQA, qkv bias, qk-norm, untied head", qkvBias: true, qkNorm: true, tied: false, lora: false },
    { name: "GQA, qkv bias, LoRA adapter", qkvBias: true, qkNorm: false, tied: true, lora: true },
  ];
  for (const [i, c] of cases.entries()) {
    it(`${c.name}: agrees with the reference; 1 and 2 threads give the same bits`, { timeout: 120_000 }, async () => {
      const rng = new Rng(100 + i);
      const config = randomConfig(rng, c);
      const batch = randomBatch(rng, config, 5);
      const lora = c.lora
        ? {
            lora: {
              config: parseLoraConfig({ r: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "down_proj"] }),
              base: initParams(config, 2),
              seed: 3,
            },
          }
        : {};
      const o: CpuTrainerOptions = { config, seed: 1, lr: 1e-3, ...lora };
      const ref = await steps({ ...o, ops: "reference" }, batch);
      const one = await steps({ ...o, threads: 1 }, batch);
      const two = await steps({ ...o, threads: 2 }, batch);
      for (const [k, m] of one.metrics.entries()) {
        expect(Math.abs(m.loss - ref.metrics[k].loss)).toBeLessThan(1e-5);
        expect(Math.abs(m.grad_norm - ref.metrics[k].grad_norm)).toBeLessThan(1e-4 * ref.metrics[k].grad_norm);
      }
      // AdamW moves every element by at most about lr: f32 noise in a gradient moves it by far less
      expect(maxAbsDiff(one.state.params, ref.state.params)).toBeLessThan(1e-4);
      expect(maxAbsDiff(one.after.log_probs, ref.after.log_probs)).toBeLessThan(1e-4);
      expect(two.metrics).toEqual(one.metrics.map((m, k) => ({ ...m, tokens_per_second: two.metrics[k].tokens_per_second })));
      expect(Array.from(two.state.params)).toEqual(Array.from(one.state.params));
      expect(Array.from(two.state.optimizer.m)).toEqual(Array.from(one.state.optimizer.m));
      expect(Array.from(two.after.log_probs)).toEqual(Array.from(one.after.log_probs));
    });
  }
});

describe("activation scopes", () => {
  const config = randomConfig(new Rng(7), { qkvBias: true, qkNorm: true, tied: false });
  const batch = randomBatch(new Rng(8), config, 3);
  const dl = Float32Array.from({ length: batch.inputIds.length }, (_, i) => Math.sin(i));

  it("keep results in Wasm memory, free them when the scope ends (a throw too), and leak nothing over many steps", async () => {
    const pool = await CpuPool.create(2);
    open.push(pool);
    const K = new WasmOps(pool);
    const core = pool.core;
    const params = initParams(config, 1);
    const state = newOptimizerState(params.length);
    const optim = resolveOptimizerOptions({ lr: 1e-3 });
    const start = core.mark;
    const sizes: number[] = [];
    for (let s = 0; s < 12; s++) {
      const g = withActivations(K, () => {
        const out = forward(config, params, batch, { ops: K });
        expect(out.logits.buffer).toBeInstanceOf(SharedArrayBuffer);
        expect(out.cache.layers[0].probs.buffer).toBeInstanceOf(SharedArrayBuffer);
        expect(core.mark).toBeGreaterThan(start);
        return backward(config, params, out.cache, dl, dl);
      });
      expect(g.buffer).toBeInstanceOf(ArrayBuffer);
      expect(core.mark).toBe(start);
      K.adamwStep(params, g, state, optim);
      sizes.push(core.memory.buffer.byteLength);
    }
    expect(sizes.slice(2)).toEqual(sizes.slice(2).map(() => sizes[2]));
    expect(() =>
      K.resident.scoped(() => {
        forward(config, params, batch, { ops: K });
        throw new Error("boom");
      }),
    ).toThrow("boom");
    expect(core.mark).toBe(start);
  });

  it("see an in-place edit of a kept result, nest, and refuse pin and release inside", async () => {
    const pool = await CpuPool.create(1);
    open.push(pool);
    const K = new WasmOps(pool);
    const rng = new Rng(3);
    const a = Float32Array.from({ length: 8 * 12 }, () => rng.normal());
    const b = Float32Array.from({ length: 12 * 8 }, () => rng.normal());
    const dims = { m: 8, k: 12, n: 8 };
    // outside a scope: fresh arrays, the edit made on a copy
    const y0 = K.matmul(a, b, dims) as Float32Array;
    y0[5] += 3;
    const want = Array.from(K.matmul(y0, b.subarray(0, 64), { m: 8, k: 8, n: 8 }));
    expect(K.resident.pin([b])).toBe(true);
    const got = K.resident.scoped(() => {
      const y = K.matmul(a, b, dims);
      expect(y.buffer).toBeInstanceOf(SharedArrayBuffer);
      y[5] += 3; // read in place by the next op: the edit must be seen
      const inner = K.resident.scoped(() => Array.from(K.matmul(y, b.subarray(0, 64), { m: 8, k: 8, n: 8 })));
      expect(() => K.resident.pin([a])).toThrow(LightningError);
      expect(() => K.resident.release()).toThrow(LightningError);
      return inner;
    });
    expect(got).toEqual(want);
    K.resident.release();
  });

  it("free each backward layer's temporaries as it ends: the backward adds far less memory than the forward", async () => {
    const pool = await CpuPool.create(1);
    open.push(pool);
    const K = new WasmOps(pool);
    const big = parseModelConfig({ ...randomConfig(new Rng(12), { qkvBias: false, qkNorm: false, tied: true }), n_layers: 6 });
    const rows = randomBatch(new Rng(13), big, 96);
    const grad = Float32Array.from({ length: rows.inputIds.length }, (_, i) => Math.cos(i));
    const params = initParams(big, 1);
    const start = pool.core.mark;
    const { fwd, grads } = K.resident.scoped(() => {
      const out = forward(big, params, rows, { ops: K });
      const fwd = pool.core.mark - start;
      return { fwd, grads: backward(big, params, out.cache, grad, grad) };
    });
    // memory grew to the peak and stays there: the forward's activations plus one layer's backward (and a
    // call's GEMM scratch); without the nested scopes the backward's temporaries add about the forward's size
    const scratch = pool.core.exports.gemmScratchBytes();
    expect(pool.core.memory.buffer.byteLength - start).toBeLessThan(1.4 * fwd + scratch + 65536);
    const plain = forward(big, params, rows, { ops: K });
    expect(Array.from(grads)).toEqual(Array.from(backward(big, params, plain.cache, grad, grad)));
  });

  it("keep the one result of a nested scopedKeep, moved into the enclosing scope; outside one, a copy", async () => {
    const pool = await CpuPool.create(1);
    open.push(pool);
    const K = new WasmOps(pool);
    const rng = new Rng(4);
    const a = Float32Array.from({ length: 16 * 8 }, () => rng.normal());
    const b = Float32Array.from({ length: 8 * 8 }, () => rng.normal());
    const dims = { m: 16, k: 8, n: 8 };
    const want = Array.from(K.matmul(K.matmul(K.matmul(a, b, dims), b, dims), b, dims));
    const start = pool.core.mark;
    K.resident.scoped(() => {
      const y = K.matmul(a, b, dims);
      const inner = pool.core.mark;
      // two products inside; only the second survives, moved down to where the nested scope began
      const z = K.resident.scopedKeep(() => K.matmul(K.matmul(y, b, dims), b, dims));
      expect(z.buffer).toBeInstanceOf(SharedArrayBuffer);
      expect(pool.core.mark).toBe(inner + z.byteLength);
      expect(Array.from(z)).toEqual(want);
      // it is the enclosing scope's: read in place by the next op
      expect(Array.from(K.add(z, z))).toEqual(want.map((x) => Math.fround(x + x)));
    });
    expect(pool.core.mark).toBe(start);
    const outside = K.resident.scopedKeep(() => K.matmul(K.matmul(a, b, dims), b, dims));
    expect(outside.buffer).toBeInstanceOf(ArrayBuffer);
    expect(pool.core.mark).toBe(start);
  });

  it("copy results out past their budget, with the same results", async () => {
    const pool = await CpuPool.create(1);
    open.push(pool);
    const params = initParams(config, 1);
    const run = (scopeMaxBytes?: number) => {
      const K = new WasmOps(pool, { scopeMaxBytes });
      const start = pool.core.mark;
      return K.resident.scoped(() => {
        const out = forward(config, params, batch, { ops: K });
        const kept = out.cache.layers.map((l) => [l.h1, l.probs, l.xOut].map((x) => x.buffer instanceof SharedArrayBuffer));
        const bytes = pool.core.mark - start;
        return { kept, bytes, logits: Array.from(out.logits), grads: backward(config, params, out.cache, dl, dl) };
      });
    };
    const all = run();
    expect(all.kept.flat().every((x) => x)).toBe(true);
    // room for about half the forward's activations: the first layer's are kept, the last layer's output copied
    const some = run(all.bytes / 2);
    expect(some.kept[0]).toEqual([true, true, true]);
    expect(some.kept[config.n_layers - 1][2]).toBe(false);
    expect(some.logits).toEqual(all.logits);
    expect(Array.from(some.grads)).toEqual(Array.from(all.grads));
  });

  it("copy results out as before where the memory is not shared", () => {
    const K = new WasmOps(instantiateCpuCore());
    const params = initParams(config, 1);
    const logits = K.resident.scoped(() => forward(config, params, batch, { ops: K }).logits);
    expect(logits.buffer).toBeInstanceOf(ArrayBuffer);
    expect(logits.buffer.byteLength).toBe(logits.byteLength);
  });
});

describe("the light ops inside a scope", () => {
  it("add, addInPlace, addBiasInPlace and columnSums run in Wasm and give the reference's bits", async () => {
    const pool = await CpuPool.create(1);
    open.push(pool);
    const K = new WasmOps(pool);
    const rng = new Rng(9);
    const rand = (n: number) => Float32Array.from({ length: n }, () => rng.normal() * 10 ** randInt(rng, -3, 3));
    for (const [rows, cols] of [
      [7, 13],
      [16, 64],
      [3, 1],
    ]) {
      const n = rows * cols;
      const [a, b, c, bias] = [rand(n), rand(n), rand(n), rand(cols)];
      const want = refOps.add(a, b);
      refOps.addInPlace(want, c);
      refOps.addBiasInPlace(want, bias);
      const wantSums = refOps.columnSums(want, rows, cols);
      const [got, sums] = K.resident.scoped(() => {
        // a kept result (the identity matmul's) is what the in-place ops work on in Wasm memory
        const eye = new Float32Array(cols * cols);
        for (let j = 0; j < cols; j++) eye[j * cols + j] = 1;
        const y = K.add(K.matmul(a, eye, { m: rows, k: cols, n: cols }), b);
        expect(y.buffer).toBeInstanceOf(SharedArrayBuffer);
        K.addInPlace(y, c);
        K.addBiasInPlace(y, bias);
        const s = K.columnSums(y, rows, cols);
        expect(s.buffer).toBeInstanceOf(SharedArrayBuffer);
        return [Array.from(y), Array.from(s)];
      });
      expect(got).toEqual(Array.from(want));
      expect(sums).toEqual(Array.from(wantSums));
    }
  });
});

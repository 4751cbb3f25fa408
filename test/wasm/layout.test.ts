import { describe, expect, it } from "vitest";
import { loadWasmCoreSync, referenceKernels as ref, toRagged, wasmKernels } from "../../src/wasm/index.ts";
import type { BatchTensors, LayoutInput } from "../../src/wasm/index.ts";
import { expectEqualInts, rng } from "./helpers.ts";

const wasm = wasmKernels(loadWasmCoreSync());

function randomLayout(seed: number): LayoutInput {
  const r = rng(seed);
  const n = r.pick([0, 1, r.int(1, 30)]);
  const P = r.pick([0, 1, r.int(1, 12)]),
    R = r.pick([0, 1, r.int(1, 12)]);
  const row = (max: number) => Array.from({ length: r.pick([0, 1, r.int(0, max + 4)]) }, () => r.int(1, 50000));
  const prompts = Array.from({ length: n }, () => row(P));
  const responses = Array.from({ length: n }, () => row(R));
  const masks = r.bool() ? responses.map((x) => Array.from({ length: r.int(0, x.length + 3) }, () => r.int(0, 1))) : null;
  return {
    prompts: toRagged(prompts),
    responses: toRagged(responses),
    responseMasks: masks && toRagged(masks),
    rewards: Float32Array.from({ length: n }, () => r.pick([0, 1, r.float(-1, 1)])),
    maxPromptLength: P,
    maxResponseLength: R,
    padTokenId: r.pick([0, -1, 151643]),
  };
}

function expectSameTensors(a: BatchTensors, b: BatchTensors): void {
  for (const key of ["prompts", "responses", "inputIds", "attentionMask", "positionIds", "responseMask", "isDrop"] as const) {
    expectEqualInts(a[key], b[key], key);
  }
  expect(Array.from(a.tokenLevelScores)).toEqual(Array.from(b.tokenLevelScores)); // a copy: exact
  expect(a.nTruncated).toBe(b.nTruncated);
}

describe("batch layout", () => {
  it("Wasm equals the reference on random ragged batches (empty rows, rows past the limits)", () => {
    for (let s = 0; s < 400; s++) expectSameTensors(wasm.batchLayout(randomLayout(s)), ref.batchLayout(randomLayout(s)));
  });

  for (const k of [ref, wasm]) {
    it(`${k.name}: one row laid out as docs/adapters.md#the-training-batch says`, () => {
      const out = k.batchLayout({
        prompts: toRagged([[11, 12, 13]]),
        responses: toRagged([[21, 22]]),
        rewards: Float32Array.from([0.7]),
        maxPromptLength: 5,
        maxResponseLength: 4,
        padTokenId: 0,
      });
      expect(Array.from(out.prompts)).toEqual([0, 0, 11, 12, 13]);
      expect(Array.from(out.responses)).toEqual([21, 22, 0, 0]);
      expect(Array.from(out.attentionMask)).toEqual([0, 0, 1, 1, 1, 1, 1, 0, 0]);
      expect(Array.from(out.positionIds)).toEqual([0, 0, 0, 1, 2, 3, 4, 4, 4]);
      expect(Array.from(out.tokenLevelScores)).toEqual([0, Math.fround(0.7), 0, 0]);
      expect(Array.from(out.responseMask)).toEqual([1, 1, 0, 0]);
    });

    it(`${k.name}: over-long prompt is dropped, long response truncated, empty response loses its reward`, () => {
      const out = k.batchLayout({
        prompts: toRagged([[1, 2, 3, 4], [5]]),
        responses: toRagged([[6, 7, 8], []]),
        rewards: Float32Array.from([1, 1]),
        maxPromptLength: 2,
        maxResponseLength: 2,
        padTokenId: 0,
      });
      expect(Array.from(out.isDrop)).toEqual([1, 0]);
      expect(out.nTruncated).toBe(1);
      expect(Array.from(out.prompts)).toEqual([1, 2, 0, 5]);
      expect(Array.from(out.responses)).toEqual([6, 7, 0, 0]);
      expect(Array.from(out.tokenLevelScores)).toEqual([0, 1, 0, 0]);
    });
  }
});

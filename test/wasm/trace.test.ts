import { describe, expect, it } from "vitest";
import { loadWasmCoreSync, referenceKernels as ref, TRACE_FLAG as F, TRACE_OPT as O, wasmKernels } from "../../src/wasm/index.ts";
import type { EncodedTrace } from "../../src/wasm/index.ts";
import { rng } from "./helpers.ts";

const wasm = wasmKernels(loadWasmCoreSync());

/** A random tree (shuffled indices), nested-ish intervals, random flags, duplicated response ids, rewards. */
function randomTrace(seed: number, size?: number): EncodedTrace {
  const r = rng(seed);
  const n = size ?? r.pick([1, 2, 3, r.int(1, 80)]);
  const perm = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = r.int(0, i);
    [perm[i], perm[j]] = [perm[j], perm[i]];
  }
  const parent = new Int32Array(n).fill(-1);
  const start = new Float64Array(n),
    end = new Float64Array(n);
  // build in creation order c = 0..n-1 (c's parent created earlier), store at index perm[c]
  const flat = r.bool(0.3); // many direct children of the root: exercises the repair
  for (let c = 0; c < n; c++) {
    const at = perm[c];
    if (c > 0) {
      const pc = flat && r.bool(0.7) ? 0 : r.int(0, c - 1);
      parent[at] = perm[pc];
      const ps = start[perm[pc]],
        pe = end[perm[pc]];
      const s0 = r.bool(0.2) ? r.int(0, 40) : ps + r.int(0, Math.max(0, pe - ps));
      start[at] = s0;
      end[at] = s0 + r.int(0, 10);
    } else {
      start[at] = 0;
      end[at] = r.int(20, 60);
    }
    if (r.bool(0.03)) start[at] = NaN;
  }
  const flags = Int32Array.from({ length: n }, () => {
    let f = 0;
    if (r.bool(0.4)) f |= F.LLM;
    if (r.bool(0.15)) f |= F.REWARD_SPAN;
    if (r.bool(0.15)) f |= F.HAS_AGENT | (r.bool(0.7) ? F.AGENT_OK : 0);
    if (r.bool(0.1)) f |= F.EMPTY_TOKENS;
    return f;
  });
  const nResponseIds = r.int(0, 6);
  return {
    n,
    root: perm[0],
    parent,
    start,
    end,
    flags,
    agent: Int32Array.from({ length: n }, () => r.int(0, 3)),
    responseId: Int32Array.from({ length: n }, () => (nResponseIds > 0 && r.bool(0.6) ? r.int(0, nResponseIds - 1) : -1)),
    nResponseIds,
    reward: Float64Array.from({ length: n }, () => (r.bool(0.2) ? r.pick([0, 1, r.float(-1, 1)]) : NaN)),
    options: r.int(0, 63),
  };
}

describe("trace-tree kernel", () => {
  it("Wasm equals the reference on random trees, flags and options", () => {
    let calls = 0,
      rewarded = 0;
    for (let s = 0; s < 500; s++) {
      const t = randomTrace(s);
      const a = wasm.extractCalls(t),
        b = ref.extractCalls(t);
      expect(Array.from(a.calls), `seed ${s}`).toEqual(Array.from(b.calls));
      expect(Array.from(a.labels), `seed ${s}`).toEqual(Array.from(b.labels));
      expect(Array.from(a.rewards), `seed ${s}`).toEqual(Array.from(b.rewards));
      calls += b.calls.length;
      rewarded += Array.from(b.rewards).filter((v) => !Number.isNaN(v)).length;
    }
    expect(calls).toBeGreaterThan(500);
    expect(rewarded).toBeGreaterThan(100);
  });

  it("rejects a forest or a bad parent index", () => {
    const t = randomTrace(3, 4);
    const bad = { ...t, parent: Int32Array.from(t.parent, (p) => (p === -1 ? -1 : -1)) };
    expect(() => wasm.extractCalls(bad)).toThrow(/root|parent/);
  });

  for (const k of [ref, wasm]) {
    it(`${k.name}: first_occurrence matching (docs/adapters.md#tracetripletadapter): R1 -> L2, R2 -> L1`, () => {
      // root(0..10) with L1 (1-2), L2 (3-4), R1 (5), R2 (6)
      const t: EncodedTrace = {
        n: 5,
        root: 0,
        parent: Int32Array.from([-1, 0, 0, 0, 0]),
        start: Float64Array.from([0, 1, 3, 5, 6]),
        end: Float64Array.from([10, 2, 4, 5, 6]),
        flags: Int32Array.from([0, F.LLM, F.LLM, F.REWARD_SPAN, F.REWARD_SPAN]),
        agent: new Int32Array(5).fill(-1),
        responseId: new Int32Array(5).fill(-1),
        nResponseIds: 0,
        reward: Float64Array.from([NaN, NaN, NaN, 0.5, 0.9]),
        options: O.EXCLUDE_IN_REWARD | O.DEDUP,
      };
      const out = k.extractCalls(t);
      expect(Array.from(out.calls)).toEqual([1, 2]);
      expect(Array.from(out.rewards)).toEqual([0.9, 0.5]);
      expect(Array.from(out.labels)).toEqual([-1, -1]);
      // a reward starting at 3.5 (before L2 ends) goes to L1
      const early = k.extractCalls({ ...t, start: Float64Array.from([0, 1, 3, 3.5, 6]), end: Float64Array.from([10, 2, 4, 3.5, 6]) });
      expect(Array.from(early.rewards)).toEqual([0.5, 0.9]);
    });
  }
});

/**
 * The Wasm implementation of `Kernels`: each call places its inputs in Wasm memory (in place when they
 * already live there, otherwise one copy), runs one kernel and returns views over Wasm memory.
 */
import { ValidationError } from "../types/errors.ts";
import type { WasmCore } from "./core.ts";
import { GROUP_ESTIMATOR, KL_KIND_CODE, WHITEN_STATUS } from "./exports.ts";
import type {
  AdvantageOutput,
  BatchTensors,
  EncodedTrace,
  ExtractedCalls,
  GroupedInput,
  Kernels,
  KlKind,
  LayoutInput,
  TokenInput,
} from "./types.ts";
import { checkLayout, checkLength, checkTokens, groupCount } from "./validate.ts";

export function wasmKernels(core: WasmCore): Kernels {
  const k = core.exports;

  function whitenAt(x: number, m: number, n: number, out: number, zeroPad: boolean): void {
    const status = k.maskedWhiten(x, m, n, out, zeroPad ? 1 : 0);
    if (status === WHITEN_STATUS.EMPTY_MASK) throw new ValidationError("masked_whiten: the mask is empty");
    if (status === WHITEN_STATUS.SINGLE_TOKEN) {
      throw new ValidationError("masked_whiten: at least two masked tokens are needed for an unbiased variance");
    }
  }

  function group(kind: number, x: GroupedInput, epsilon: number, whiten: boolean): AdvantageOutput {
    const G = groupCount(x);
    const n = x.B * x.T;
    core.begin([x.rewards, x.mask, x.groups]);
    const r = core.place(x.rewards),
      m = core.place(x.mask),
      g = core.place(x.groups);
    const out = core.alloc(n * 4);
    const scratch = core.alloc(k.groupScratchBytes(x.B, G));
    k.groupAdvantage(kind, r, m, g, x.B, x.T, G, epsilon, out, scratch);
    if (whiten) whitenAt(out, m, n, out, true);
    const advantages = core.f32(out, n);
    return { advantages, returns: advantages };
  }

  return {
    name: "wasm",

    maskedWhiten(x, mask, zeroPad = false) {
      checkLength("mask", mask, x.length);
      core.begin([x, mask]);
      const xp = core.place(x),
        mp = core.place(mask),
        out = core.alloc(x.length * 4);
      whitenAt(xp, mp, x.length, out, zeroPad);
      return core.f32(out, x.length);
    },

    grpo: (x, normByStd = true, epsilon = 1e-6) => group(normByStd ? GROUP_ESTIMATOR.GRPO : GROUP_ESTIMATOR.GRPO_NO_STD, x, epsilon, false),
    rloo: (x) => group(GROUP_ESTIMATOR.RLOO, x, 0, false),
    reinforcePlusPlusBaseline: (x) => group(GROUP_ESTIMATOR.RPP_BASELINE, x, 0, true),

    gae(x, gamma, lam) {
      checkTokens(x);
      checkLength("values", x.values, x.B * x.T);
      const n = x.B * x.T;
      core.begin([x.rewards, x.values, x.mask]);
      const r = core.place(x.rewards),
        v = core.place(x.values),
        m = core.place(x.mask);
      const adv = core.alloc(n * 4),
        ret = core.alloc(n * 4);
      k.gae(r, v, m, x.B, x.T, gamma, lam, adv, ret);
      whitenAt(adv, m, n, adv, false);
      return { advantages: core.f32(adv, n), returns: core.f32(ret, n) };
    },

    reinforcePlusPlus(x: TokenInput, gamma: number) {
      checkTokens(x);
      const n = x.B * x.T;
      core.begin([x.rewards, x.mask]);
      const r = core.place(x.rewards),
        m = core.place(x.mask);
      const ret = core.alloc(n * 4),
        adv = core.alloc(n * 4);
      k.discountedReturns(r, m, x.B, x.T, gamma, ret);
      whitenAt(ret, m, n, adv, true);
      return { advantages: core.f32(adv, n), returns: core.f32(ret, n) };
    },

    remax(x) {
      checkTokens(x);
      checkLength("baselines", x.baselines, x.B);
      const n = x.B * x.T;
      core.begin([x.rewards, x.mask, x.baselines]);
      const r = core.place(x.rewards),
        m = core.place(x.mask),
        b = core.place(x.baselines);
      const adv = core.alloc(n * 4),
        ret = core.alloc(n * 4);
      k.remax(r, m, b, x.B, x.T, adv, ret);
      return { advantages: core.f32(adv, n), returns: core.f32(ret, n) };
    },

    klPenalty(logp, ref, kind: KlKind) {
      checkLength("ref", ref, logp.length);
      core.begin([logp, ref]);
      const a = core.place(logp),
        b = core.place(ref),
        out = core.alloc(logp.length * 4);
      k.klPenalty(KL_KIND_CODE[kind], a, b, logp.length, out);
      return core.f32(out, logp.length);
    },

    applyKlPenalty(x, kind, beta) {
      checkTokens({ rewards: x.scores, mask: x.mask, B: x.B, T: x.T });
      checkLength("logp", x.logp, x.B * x.T);
      checkLength("ref", x.ref, x.B * x.T);
      const n = x.B * x.T;
      core.begin([x.scores, x.logp, x.ref, x.mask]);
      const s = core.place(x.scores),
        lp = core.place(x.logp),
        rf = core.place(x.ref),
        m = core.place(x.mask);
      const out = core.alloc(n * 4);
      const currentKl = k.applyKlPenalty(KL_KIND_CODE[kind], s, lp, rf, m, x.B, x.T, beta, out);
      return { rewards: core.f32(out, n), currentKl };
    },

    broadcastScalars(scalars, rowIndex, mask, B, T) {
      checkLength("rowIndex", rowIndex, B);
      checkLength("mask", mask, B * T);
      for (let i = 0; i < B; i++) {
        if (rowIndex[i] < 0 || rowIndex[i] >= scalars.length) throw new ValidationError(`rowIndex[${i}] out of range`, ["rowIndex", i]);
      }
      core.begin([scalars, rowIndex, mask]);
      const s = core.place(scalars),
        ri = core.place(rowIndex),
        m = core.place(mask);
      const out = core.alloc(B * T * 4),
        scratch = core.alloc(B * 8);
      k.broadcastScalars(s, ri, m, B, T, out, scratch);
      return core.f32(out, B * T);
    },

    rowScalars(x, mask, B, T, rtol = 1e-5, atol = 1e-8) {
      checkLength("x", x, B * T);
      checkLength("mask", mask, B * T);
      core.begin([x, mask]);
      const xp = core.place(x),
        m = core.place(mask),
        first = core.alloc(B * 4),
        ok = core.alloc(B);
      k.rowScalars(xp, m, B, T, rtol, atol, first, ok);
      return { first: core.f32(first, B), status: core.u8(ok, B) };
    },

    rowSums(x, B, T) {
      checkLength("x", x, B * T);
      core.begin([x]);
      const xp = core.place(x),
        out = core.alloc(B * 4);
      k.rowSumsF32(xp, B, T, out);
      return core.f32(out, B);
    },

    batchLayout(x: LayoutInput): BatchTensors {
      const n = checkLayout(x);
      const P = x.maxPromptLength,
        R = x.maxResponseLength,
        W = P + R;
      const masks = x.responseMasks ?? null;
      core.begin([x.prompts.offsets, x.prompts.values, x.responses.offsets, x.responses.values, masks?.offsets, masks?.values, x.rewards]);
      const po = core.place(x.prompts.offsets),
        pv = core.place(x.prompts.values);
      const ro = core.place(x.responses.offsets),
        rv = core.place(x.responses.values);
      const mo = masks ? core.place(masks.offsets) : 0,
        mv = masks ? core.place(masks.values) : 0;
      const rw = core.place(x.rewards);
      const prompts = core.alloc(n * P * 4),
        responses = core.alloc(n * R * 4),
        inputIds = core.alloc(n * W * 4);
      const attn = core.alloc(n * W * 4),
        pos = core.alloc(n * W * 4),
        respMask = core.alloc(n * R * 4);
      const scores = core.alloc(n * R * 4),
        drop = core.alloc(n);
      const nTruncated = k.batchLayout(
        n,
        P,
        R,
        x.padTokenId,
        po,
        pv,
        ro,
        rv,
        mo,
        mv,
        rw,
        prompts,
        responses,
        inputIds,
        attn,
        pos,
        respMask,
        scores,
        drop,
      );
      return {
        n,
        P,
        R,
        nTruncated,
        prompts: core.i32(prompts, n * P),
        responses: core.i32(responses, n * R),
        inputIds: core.i32(inputIds, n * W),
        attentionMask: core.i32(attn, n * W),
        positionIds: core.i32(pos, n * W),
        responseMask: core.i32(respMask, n * R),
        tokenLevelScores: core.f32(scores, n * R),
        isDrop: core.u8(drop, n),
      };
    },

    extractCalls(t: EncodedTrace): ExtractedCalls {
      const n = t.n;
      for (const [name, a] of [
        ["parent", t.parent],
        ["start", t.start],
        ["end", t.end],
        ["flags", t.flags],
        ["agent", t.agent],
        ["responseId", t.responseId],
        ["reward", t.reward],
      ] as const)
        checkLength(name, a, n);
      if (n === 0 || t.root < 0 || t.root >= n || t.parent[t.root] !== -1) throw new ValidationError("trace needs exactly one root");
      for (let i = 0; i < n; i++) {
        const p = t.parent[i];
        if (p >= n || p < -1 || (p === -1 && i !== t.root)) throw new ValidationError(`bad parent index at node ${i}`, ["parent", i]);
        if (t.responseId[i] >= t.nResponseIds) throw new ValidationError(`response id out of range at node ${i}`, ["responseId", i]);
      }
      core.begin([t.parent, t.start, t.end, t.flags, t.agent, t.responseId, t.reward]);
      const parent = core.place(t.parent),
        start = core.place(t.start),
        end = core.place(t.end);
      const flags = core.place(t.flags),
        agent = core.place(t.agent),
        rid = core.place(t.responseId);
      const reward = core.place(t.reward);
      const scratch = core.alloc(k.traceScratchBytes(n, t.nResponseIds));
      const calls = core.alloc(n * 4),
        labels = core.alloc(n * 4),
        rewards = core.alloc(n * 8);
      const count = k.extractCalls(
        n,
        t.root,
        parent,
        start,
        end,
        flags,
        agent,
        rid,
        t.nResponseIds,
        reward,
        t.options,
        scratch,
        calls,
        labels,
        rewards,
      );
      const callIdx = core.i32(calls, count);
      const byNode = core.f64(rewards, n);
      return { calls: callIdx, labels: core.i32(labels, count), rewards: Float64Array.from(callIdx, (c) => byNode[c]) };
    },
  };
}

/**
 * The Wasm implementation of `Kernels`: each call places its inputs in Wasm memory (in place when they
 * already live there, otherwise one copy), runs one kernel and returns views over Wasm memory.
 */
import { ValidationError } from "../types/errors.ts";
import type { WasmCore } from "./core.ts";
import { GROUP_ESTIMATOR, GROUP_OK, KL_KIND_CODE, WHITEN_STATUS, type KernelExports } from "./exports.ts";
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
import { checkLayout, checkLength, checkTokens, groupCount, passkSingleton } from "./validate.ts";

/** The RL kernels on one instance of the Wasm core (`loadWasmCore`, `instantiateWasmCore`). */
export class WasmKernels implements Kernels {
  readonly name = "wasm";
  private readonly k: KernelExports;

  constructor(private readonly core: WasmCore) {
    this.k = core.exports;
  }

  maskedWhiten(x: Float32Array, mask: Float32Array, zeroPad = false): Float32Array {
    checkLength("mask", mask, x.length);
    this.core.begin([x, mask]);
    const xp = this.core.place(x),
      mp = this.core.place(mask),
      out = this.core.alloc(x.length * 4);
    this.whitenAt(xp, mp, x.length, out, zeroPad);
    return this.core.f32(out, x.length);
  }

  grpo(x: GroupedInput, normByStd = true, epsilon = 1e-6): AdvantageOutput {
    return this.group(normByStd ? GROUP_ESTIMATOR.GRPO : GROUP_ESTIMATOR.GRPO_NO_STD, x, epsilon, false);
  }

  rloo(x: GroupedInput): AdvantageOutput {
    return this.group(GROUP_ESTIMATOR.RLOO, x, 0, false);
  }

  grpoPassk(x: GroupedInput, normByStd = true, epsilon = 1e-6): AdvantageOutput {
    return this.group(normByStd ? GROUP_ESTIMATOR.PASSK : GROUP_ESTIMATOR.PASSK_NO_STD, x, epsilon, false);
  }

  opo(x: GroupedInput): AdvantageOutput {
    return this.group(GROUP_ESTIMATOR.OPO, x, 0, false);
  }

  gpg(x: GroupedInput): AdvantageOutput {
    return this.group(GROUP_ESTIMATOR.GPG, x, 0, false);
  }

  reinforcePlusPlusBaseline(x: GroupedInput): AdvantageOutput {
    return this.group(GROUP_ESTIMATOR.RPP_BASELINE, x, 0, true);
  }

  gae(x: TokenInput & { values: Float32Array }, gamma: number, lam: number): AdvantageOutput {
    checkTokens(x);
    checkLength("values", x.values, x.B * x.T);
    const n = x.B * x.T;
    this.core.begin([x.rewards, x.values, x.mask]);
    const r = this.core.place(x.rewards),
      v = this.core.place(x.values),
      m = this.core.place(x.mask);
    const adv = this.core.alloc(n * 4),
      ret = this.core.alloc(n * 4);
    this.k.gae(r, v, m, x.B, x.T, gamma, lam, adv, ret);
    this.whitenAt(adv, m, n, adv, false);
    return { advantages: this.core.f32(adv, n), returns: this.core.f32(ret, n) };
  }

  reinforcePlusPlus(x: TokenInput, gamma: number): AdvantageOutput {
    checkTokens(x);
    const n = x.B * x.T;
    this.core.begin([x.rewards, x.mask]);
    const r = this.core.place(x.rewards),
      m = this.core.place(x.mask);
    const ret = this.core.alloc(n * 4),
      adv = this.core.alloc(n * 4);
    this.k.discountedReturns(r, m, x.B, x.T, gamma, ret);
    this.whitenAt(ret, m, n, adv, true);
    return { advantages: this.core.f32(adv, n), returns: this.core.f32(ret, n) };
  }

  remax(x: TokenInput & { baselines: Float32Array }): AdvantageOutput {
    checkTokens(x);
    checkLength("baselines", x.baselines, x.B);
    const n = x.B * x.T;
    this.core.begin([x.rewards, x.mask, x.baselines]);
    const r = this.core.place(x.rewards),
      m = this.core.place(x.mask),
      b = this.core.place(x.baselines);
    const adv = this.core.alloc(n * 4),
      ret = this.core.alloc(n * 4);
    this.k.remax(r, m, b, x.B, x.T, adv, ret);
    return { advantages: this.core.f32(adv, n), returns: this.core.f32(ret, n) };
  }

  klPenalty(logp: Float32Array, ref: Float32Array, kind: KlKind): Float32Array {
    checkLength("ref", ref, logp.length);
    this.core.begin([logp, ref]);
    const a = this.core.place(logp),
      b = this.core.place(ref),
      out = this.core.alloc(logp.length * 4);
    this.k.klPenalty(KL_KIND_CODE[kind], a, b, logp.length, out);
    return this.core.f32(out, logp.length);
  }

  applyKlPenalty(x: Parameters<Kernels["applyKlPenalty"]>[0], kind: KlKind, beta: number): { rewards: Float32Array; currentKl: number } {
    checkTokens({ rewards: x.scores, mask: x.mask, B: x.B, T: x.T });
    checkLength("logp", x.logp, x.B * x.T);
    checkLength("ref", x.ref, x.B * x.T);
    const n = x.B * x.T;
    this.core.begin([x.scores, x.logp, x.ref, x.mask]);
    const s = this.core.place(x.scores),
      lp = this.core.place(x.logp),
      rf = this.core.place(x.ref),
      m = this.core.place(x.mask);
    const out = this.core.alloc(n * 4);
    const currentKl = this.k.applyKlPenalty(KL_KIND_CODE[kind], s, lp, rf, m, x.B, x.T, beta, out);
    return { rewards: this.core.f32(out, n), currentKl };
  }

  broadcastScalars(scalars: Float32Array, rowIndex: Int32Array, mask: Float32Array, B: number, T: number): Float32Array {
    checkLength("rowIndex", rowIndex, B);
    checkLength("mask", mask, B * T);
    for (let i = 0; i < B; i++) {
      if (rowIndex[i] < 0 || rowIndex[i] >= scalars.length) throw new ValidationError(`rowIndex[${i}] out of range`, ["rowIndex", i]);
    }
    this.core.begin([scalars, rowIndex, mask]);
    const s = this.core.place(scalars),
      ri = this.core.place(rowIndex),
      m = this.core.place(mask);
    const out = this.core.alloc(B * T * 4),
      scratch = this.core.alloc(B * 8);
    this.k.broadcastScalars(s, ri, m, B, T, out, scratch);
    return this.core.f32(out, B * T);
  }

  rowScalars(
    x: Float32Array,
    mask: Float32Array,
    B: number,
    T: number,
    rtol = 1e-5,
    atol = 1e-8,
  ): { first: Float32Array; status: Uint8Array } {
    checkLength("x", x, B * T);
    checkLength("mask", mask, B * T);
    this.core.begin([x, mask]);
    const xp = this.core.place(x),
      m = this.core.place(mask),
      first = this.core.alloc(B * 4),
      ok = this.core.alloc(B);
    this.k.rowScalars(xp, m, B, T, rtol, atol, first, ok);
    return { first: this.core.f32(first, B), status: this.core.u8(ok, B) };
  }

  rowSums(x: Float32Array, B: number, T: number): Float32Array {
    checkLength("x", x, B * T);
    this.core.begin([x]);
    const xp = this.core.place(x),
      out = this.core.alloc(B * 4);
    this.k.rowSumsF32(xp, B, T, out);
    return this.core.f32(out, B);
  }

  batchLayout(x: LayoutInput): BatchTensors {
    const n = checkLayout(x);
    const P = x.maxPromptLength,
      R = x.maxResponseLength,
      W = P + R;
    const masks = x.responseMasks ?? null;
    this.core.begin([
      x.prompts.offsets,
      x.prompts.values,
      x.responses.offsets,
      x.responses.values,
      masks?.offsets,
      masks?.values,
      x.rewards,
    ]);
    const po = this.core.place(x.prompts.offsets),
      pv = this.core.place(x.prompts.values);
    const ro = this.core.place(x.responses.offsets),
      rv = this.core.place(x.responses.values);
    const mo = masks ? this.core.place(masks.offsets) : 0,
      mv = masks ? this.core.place(masks.values) : 0;
    const rw = this.core.place(x.rewards);
    const prompts = this.core.alloc(n * P * 4),
      responses = this.core.alloc(n * R * 4),
      inputIds = this.core.alloc(n * W * 4);
    const attn = this.core.alloc(n * W * 4),
      pos = this.core.alloc(n * W * 4),
      respMask = this.core.alloc(n * R * 4);
    const scores = this.core.alloc(n * R * 4),
      drop = this.core.alloc(n);
    const nTruncated = this.k.batchLayout(
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
      prompts: this.core.i32(prompts, n * P),
      responses: this.core.i32(responses, n * R),
      inputIds: this.core.i32(inputIds, n * W),
      attentionMask: this.core.i32(attn, n * W),
      positionIds: this.core.i32(pos, n * W),
      responseMask: this.core.i32(respMask, n * R),
      tokenLevelScores: this.core.f32(scores, n * R),
      isDrop: this.core.u8(drop, n),
    };
  }

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
    this.core.begin([t.parent, t.start, t.end, t.flags, t.agent, t.responseId, t.reward]);
    const parent = this.core.place(t.parent),
      start = this.core.place(t.start),
      end = this.core.place(t.end);
    const flags = this.core.place(t.flags),
      agent = this.core.place(t.agent),
      rid = this.core.place(t.responseId);
    const reward = this.core.place(t.reward);
    const scratch = this.core.alloc(this.k.traceScratchBytes(n, t.nResponseIds));
    const calls = this.core.alloc(n * 4),
      labels = this.core.alloc(n * 4),
      rewards = this.core.alloc(n * 8);
    const count = this.k.extractCalls(
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
    const callIdx = this.core.i32(calls, count);
    const byNode = this.core.f64(rewards, n);
    return { calls: callIdx, labels: this.core.i32(labels, count), rewards: Float64Array.from(callIdx, (c) => byNode[c]) };
  }

  private whitenAt(x: number, m: number, n: number, out: number, zeroPad: boolean): void {
    const status = this.k.maskedWhiten(x, m, n, out, zeroPad ? 1 : 0);
    if (status === WHITEN_STATUS.EMPTY_MASK) throw new ValidationError("masked_whiten: the mask is empty");
    if (status === WHITEN_STATUS.SINGLE_TOKEN) {
      throw new ValidationError("masked_whiten: at least two masked tokens are needed for an unbiased variance");
    }
  }

  private group(kind: number, x: GroupedInput, epsilon: number, whiten: boolean): AdvantageOutput {
    const G = groupCount(x);
    const n = x.B * x.T;
    this.core.begin([x.rewards, x.mask, x.groups]);
    const r = this.core.place(x.rewards),
      m = this.core.place(x.mask),
      g = this.core.place(x.groups);
    const out = this.core.alloc(n * 4);
    const scratch = this.core.alloc(this.k.groupScratchBytes(x.B, G));
    const bad = this.k.groupAdvantage(kind, r, m, g, x.B, x.T, G, epsilon, out, scratch);
    if (bad !== GROUP_OK) throw passkSingleton(bad);
    if (whiten) this.whitenAt(out, m, n, out, true);
    const advantages = this.core.f32(out, n);
    return { advantages, returns: advantages };
  }
}

/** `new WasmKernels(core)`, the factory `lightning-ts/wasm` has always exported. */
export function wasmKernels(core: WasmCore): WasmKernels {
  return new WasmKernels(core);
}

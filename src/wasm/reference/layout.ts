/**
 * Plain-TS reference of the batch layout (docs/adapters.md#the-training-batch), written the way upstream's
 * Python reads: truncate, left_pad / right_pad, concatenate, cumulative-sum positions, argmax for the reward column.
 */
import { checkLayout } from "../validate.ts";
import type { BatchTensors, LayoutInput, RaggedI32 } from "../types.ts";

export function leftPad(ids: number[], L: number, pad: number): { ids: number[]; mask: number[] } {
  if (ids.length >= L) return { ids: ids.slice(ids.length - L), mask: new Array(L).fill(1) };
  return {
    ids: [...new Array(L - ids.length).fill(pad), ...ids],
    mask: [...new Array(L - ids.length).fill(0), ...new Array(ids.length).fill(1)],
  };
}

export function rightPad(ids: number[], L: number, pad: number): { ids: number[]; mask: number[] } {
  if (ids.length >= L) return { ids: ids.slice(0, L), mask: new Array(L).fill(1) };
  return {
    ids: [...ids, ...new Array(L - ids.length).fill(pad)],
    mask: [...new Array(ids.length).fill(1), ...new Array(L - ids.length).fill(0)],
  };
}

const rowOf = (r: RaggedI32, i: number): number[] => Array.from(r.values.subarray(r.offsets[i], r.offsets[i + 1]));

export function batchLayout(x: LayoutInput): BatchTensors {
  const n = checkLayout(x);
  const P = x.maxPromptLength,
    R = x.maxResponseLength,
    W = P + R,
    pad = x.padTokenId;
  const out: BatchTensors = {
    n,
    P,
    R,
    prompts: new Int32Array(n * P),
    responses: new Int32Array(n * R),
    inputIds: new Int32Array(n * W),
    attentionMask: new Int32Array(n * W),
    positionIds: new Int32Array(n * W),
    responseMask: new Int32Array(n * R),
    tokenLevelScores: new Float32Array(n * R),
    isDrop: new Uint8Array(n),
    nTruncated: 0,
  };
  for (let i = 0; i < n; i++) {
    let prompt = rowOf(x.prompts, i);
    let response = rowOf(x.responses, i);
    if (prompt.length > P) {
      prompt = prompt.slice(0, P);
      out.isDrop[i] = 1;
    }
    if (response.length > R) {
      response = response.slice(0, R);
      out.nTruncated++;
    }
    const p = leftPad(prompt, P, pad);
    const r = rightPad(response, R, pad);
    const ids = [...p.ids, ...r.ids];
    const attn = [...p.mask, ...r.mask];
    let cum = 0;
    const pos = attn.map((a) => {
      cum += a;
      return Math.max(cum - 1, 0);
    });
    const respMask = x.responseMasks ? rightPad(rowOf(x.responseMasks, i), R, 0).ids : r.mask;
    // the reward goes to argmax(position_ids * attention_mask), first maximal index, then the last R columns
    let at = 0;
    for (let j = 1; j < W; j++) if (pos[j] * attn[j] > pos[at] * attn[at]) at = j;
    out.prompts.set(p.ids, i * P);
    out.responses.set(r.ids, i * R);
    out.inputIds.set(ids, i * W);
    out.attentionMask.set(attn, i * W);
    out.positionIds.set(pos, i * W);
    out.responseMask.set(respMask, i * R);
    if (W > 0 && at >= P) out.tokenLevelScores[i * R + (at - P)] = x.rewards[i];
  }
  return out;
}

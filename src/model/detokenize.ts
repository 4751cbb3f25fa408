/**
 * Text of generated tokens, one token at a time, in time linear in the number of tokens. Stop strings
 * and streamed deltas need the text of every prefix of the output; decoding each prefix whole costs
 * O(n²) (seconds at a few thousand tokens with an HF tokenizer, docs/serving.md). As vLLM does, each new
 * token is decoded together with a few tokens before it (the "prefix" window, so that decoders that
 * treat a sequence's first token specially see the same start twice) and the new text is what that
 * window gained; a token whose bytes end inside a character gives no text until the character is whole.
 */
import type { Tokenizer } from "./tokenizer-api.ts";

const INCOMPLETE = "\uFFFD";

/** `tokenizer.decode`, "" for no ids (HF's tokenizers library refuses an empty array). */
export function decodeIds(tokenizer: Tokenizer, ids: readonly number[]): string {
  return ids.length === 0 ? "" : tokenizer.decode(ids);
}

/** Decodes a growing token sequence. `text` is the text of the tokens pushed so far. */
export class IncrementalDecoder {
  private readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;
  /** Characters of the window's text already given out while its last character was incomplete. */
  private early = 0;
  text = "";

  constructor(private readonly tokenizer: Tokenizer) {}

  /** Appends a token; returns the text it completes (a character split across tokens comes whole). */
  push(id: number): string {
    this.ids.push(id);
    const prefix = decodeIds(this.tokenizer, this.ids.slice(this.prefixOffset, this.readOffset));
    const whole = decodeIds(this.tokenizer, this.ids.slice(this.prefixOffset));
    const from = prefix.length + this.early;
    if (whole.endsWith(INCOMPLETE)) {
      // The text before an incomplete character is final (e.g. the space of " \xF0\x9F"): give it now.
      let stable = whole.length;
      while (stable > 0 && whole[stable - 1] === INCOMPLETE) stable--;
      return stable > from ? this.take(whole.slice(from, stable), stable - prefix.length) : "";
    }
    if (whole.length <= from) return "";
    const delta = this.take(whole.slice(from), 0);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    return delta;
  }

  /** Text still held back (a character whose bytes never completed), as the full decode renders it. */
  flush(): string {
    const prefix = decodeIds(this.tokenizer, this.ids.slice(this.prefixOffset, this.readOffset));
    const whole = decodeIds(this.tokenizer, this.ids.slice(this.prefixOffset));
    const from = prefix.length + this.early;
    const rest = this.take(whole.length > from ? whole.slice(from) : "", 0);
    this.readOffset = this.ids.length;
    this.prefixOffset = this.readOffset;
    return rest;
  }

  private take(delta: string, early: number): string {
    this.text += delta;
    this.early = early;
    return delta;
  }
}

export interface DecodedTokens {
  /** `tokenizer.decode(ids)`. */
  text: string;
  /** `ends[k]`: how much of `text` is known once tokens 0..k are in (non-decreasing, the last is `text.length`). */
  ends: number[];
}

/**
 * The text of `ids` with each token's end offset. The incremental result is checked against one full
 * decode; a tokenizer whose pieces do not add up to the whole (none of the byte-level BPE ones we load)
 * gets the exact, quadratic computation instead.
 */
export function decodeWithOffsets(tokenizer: Tokenizer, ids: readonly number[]): DecodedTokens {
  const text = decodeIds(tokenizer, ids);
  const decoder = new IncrementalDecoder(tokenizer);
  const ends: number[] = [];
  for (const id of ids) {
    decoder.push(id);
    ends.push(decoder.text.length);
  }
  decoder.flush();
  if (ends.length > 0) ends[ends.length - 1] = decoder.text.length;
  if (decoder.text === text) return { text, ends };
  return { text, ends: exactEnds(tokenizer, ids, text) };
}

/** Each prefix decoded whole (a trailing incomplete character does not count yet). */
function exactEnds(tokenizer: Tokenizer, ids: readonly number[], text: string): number[] {
  const ends: number[] = [];
  let last = 0;
  for (let k = 1; k <= ids.length; k++) {
    let t = tokenizer.decode(ids.slice(0, k));
    if (k < ids.length) while (t.endsWith(INCOMPLETE)) t = t.slice(0, -1);
    last = Math.max(last, Math.min(t.length, text.length));
    ends.push(k === ids.length ? text.length : last);
  }
  return ends;
}

/** The first stop string in `decoded`: keep the tokens up to the one that completed it, the text before it. */
export function findStopString(decoded: DecodedTokens, stop: readonly string[]): { keep: number; text: string } | null {
  let best: { keep: number; at: number } | null = null;
  for (const s of stop) {
    if (s.length === 0) continue;
    const at = decoded.text.indexOf(s);
    if (at < 0) continue;
    const keep = firstAtLeast(decoded.ends, at + s.length) + 1;
    if (best === null || keep < best.keep || (keep === best.keep && at < best.at)) best = { keep, at };
  }
  return best === null ? null : { keep: best.keep, text: decoded.text.slice(0, best.at) };
}

/** Smallest k with ends[k] >= v (ends is non-decreasing and its last entry is the text's length). */
function firstAtLeast(ends: readonly number[], v: number): number {
  let lo = 0;
  let hi = ends.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ends[mid] >= v) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

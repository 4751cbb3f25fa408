import { ValidationError } from "../types/errors.ts";
import type { GroupedInput, LayoutInput, RaggedI32, TokenInput } from "./types.ts";

/** Shape checks shared by both kernel implementations; returns the number of groups for grouped input. */
export function checkLength(name: string, a: ArrayLike<number>, n: number): void {
  if (a.length === n) return;
  // a view over Wasm memory that growth detached reads as empty
  const hint = a.length === 0 ? " (if it was a Wasm input view, memory growth detached it: call reserve() first)" : "";
  throw new ValidationError(`${name} has length ${a.length}, expected ${n}${hint}`, [name]);
}

export function checkTokens(x: TokenInput): void {
  if (!Number.isInteger(x.B) || x.B < 0 || !Number.isInteger(x.T) || x.T < 0) {
    throw new ValidationError(`invalid batch shape [${x.B}, ${x.T}]`, ["B"]);
  }
  checkLength("rewards", x.rewards, x.B * x.T);
  checkLength("mask", x.mask, x.B * x.T);
}

export function groupCount(x: GroupedInput): number {
  checkTokens(x);
  checkLength("groups", x.groups, x.B);
  let g = 0;
  for (let i = 0; i < x.B; i++) {
    const v = x.groups[i];
    if (v < 0) throw new ValidationError(`group id ${v} at row ${i} is negative`, ["groups", i]);
    if (v >= g) g = v + 1;
  }
  return g;
}

/** Pass@k compares each group's best row with its second best: a group of one row is an error (as upstream). */
export function passkSingleton(group: number): ValidationError {
  return new ValidationError(`grpo_passk needs at least 2 rows per group; group ${group} has 1`, ["groups"]);
}

function checkRagged(name: string, r: RaggedI32, n: number): void {
  checkLength(`${name}.offsets`, r.offsets, n + 1);
  let prev = 0;
  for (let i = 0; i <= n; i++) {
    const o = r.offsets[i];
    if (o < prev || (i === 0 && o !== 0)) throw new ValidationError(`${name}.offsets must start at 0 and not decrease`, [name, i]);
    prev = o;
  }
  if (prev > r.values.length) throw new ValidationError(`${name}.offsets run past the values`, [name]);
}

export function checkLayout(x: LayoutInput): number {
  const n = x.rewards.length;
  for (const [k, v] of [
    ["maxPromptLength", x.maxPromptLength],
    ["maxResponseLength", x.maxResponseLength],
  ] as const) {
    if (!Number.isInteger(v) || v < 0) throw new ValidationError(`${k} must be a non-negative integer`, [k]);
  }
  checkRagged("prompts", x.prompts, n);
  checkRagged("responses", x.responses, n);
  if (x.responseMasks) checkRagged("responseMasks", x.responseMasks, n);
  return n;
}

/** Rows of integers as one ragged array. */
export function toRagged(rows: readonly ArrayLike<number>[]): RaggedI32 {
  const offsets = new Int32Array(rows.length + 1);
  let total = 0;
  for (let i = 0; i < rows.length; i++) {
    total += rows[i].length;
    offsets[i + 1] = total;
  }
  const values = new Int32Array(total);
  for (let i = 0; i < rows.length; i++) values.set(rows[i], offsets[i]);
  return { offsets, values };
}

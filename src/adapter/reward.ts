/** Reward extraction shared by every adapter; the order of the rules is in docs/adapters.md#the-reward-of-a-span. */
import { filterAndUnflatten } from "../types/attributes.ts";
import { ValidationError } from "../types/errors.ts";
import { AGL_ANNOTATION, AGL_OPERATION, AGL_REWARD, LightningSpanAttributes as A } from "../types/semconv.ts";
import type { Span } from "../types/span.ts";

const AGENTOPS_KEYS = ["agentops.task.output", "agentops.entity.output"] as const;

function asNumber(v: unknown, path: (string | number)[]): number {
  if (typeof v === "number") return v;
  if (typeof v === "boolean") return v ? 1 : 0;
  if (typeof v === "string" && v.trim() !== "" && Number.isFinite(Number(v))) return Number(v);
  throw new ValidationError(`reward value must be a number, got ${JSON.stringify(v)}`, path);
}

/** The rewards written with emit_reward: `agentlightning.reward.<i>.{name,value}`. */
export function rewardDimensions(span: Span): { name: string; value: number }[] {
  const nested = filterAndUnflatten(span.attributes, A.REWARD);
  if (!Array.isArray(nested)) {
    if (typeof nested === "object" && nested !== null && Object.keys(nested).length === 0) return [];
    throw new ValidationError(`'${A.REWARD}.*' attributes must form a list of {name, value}`, ["attributes", A.REWARD]);
  }
  return nested.map((d, i) => {
    if (typeof d !== "object" || d === null) throw new ValidationError("reward entry must be an object", ["attributes", A.REWARD, i]);
    const { name, value } = d as Record<string, unknown>;
    if (typeof name !== "string") throw new ValidationError("reward name must be a string", ["attributes", A.REWARD, i, "name"]);
    return { name, value: asNumber(value, ["attributes", A.REWARD, i, "value"]) };
  });
}

function hasKeyWithPrefix(attrs: Record<string, unknown>, prefix: string): boolean {
  for (const k in attrs) if (k.startsWith(prefix)) return true;
  return false;
}

/** get_reward_value: the primary reward of a span, or null. 0 is a real reward. */
export function getRewardValue(span: Span): number | null {
  const attrs = span.attributes;
  if (hasKeyWithPrefix(attrs, A.REWARD)) {
    const dims = rewardDimensions(span);
    if (dims.length > 0) return dims[0].value;
  }
  for (const key of AGENTOPS_KEYS) {
    let v: unknown = (attrs as Record<string, unknown>)[key];
    if (v === undefined) continue;
    if (typeof v === "string") {
      try {
        v = JSON.parse(v);
      } catch {
        continue;
      }
    }
    if (typeof v === "object" && v !== null && (v as Record<string, unknown>).type === "reward") {
      const value = (v as Record<string, unknown>).value;
      return value === null || value === undefined ? null : asNumber(value, ["attributes", key, "value"]);
    }
  }
  if (span.name === AGL_ANNOTATION && "reward" in attrs) {
    const v = attrs.reward;
    return v === null || v === undefined ? null : asNumber(v, ["attributes", "reward"]);
  }
  return null;
}

export const isRewardValueSpan = (span: Span): boolean => getRewardValue(span) !== null;

/** An AGL operation span named agentlightning.reward (a reward subtree, with or without a value). */
export const isRewardOperation = (span: Span): boolean => span.name === AGL_OPERATION && span.attributes[A.OPERATION_NAME] === AGL_REWARD;

/** A reward span for scoping: carries a value, or is a reward operation. */
export function isRewardSpan(span: Span): boolean {
  return isRewardOperation(span) || getRewardValue(span) !== null;
}

export const findRewardSpans = (spans: Span[]): Span[] => spans.filter(isRewardValueSpan);

/** The value of the last span that carries one, or null. */
export function findFinalReward(spans: Span[]): number | null {
  for (let i = spans.length - 1; i >= 0; i--) {
    const v = getRewardValue(spans[i]);
    if (v !== null) return v;
  }
  return null;
}

/**
 * Sampler seeds that do not depend on the order in which calls reach the server. An algorithm puts a
 * `sampling_seed` (an unsigned 32-bit integer) in a rollout's metadata; the policy server seeds each routed
 * call that names no `seed` of its own from it, the attempt's number and the call's number among the
 * attempt's model calls. Without it, concurrent runners' calls would draw seeds from one shared stream in
 * arrival order, so the same seed gave other samples to other rollouts from run to run. The number counts
 * model calls only: a span sequence id would also count the tool and annotation spans the agent writes
 * concurrently, so the same conversation could get another seed from run to run.
 */
import { SPLITMIX32_GAMMA, splitmix32Finalize } from "../model/init.ts";
import type { LightningStore } from "../store/base.ts";
import { ValidationError } from "../types/errors.ts";
import { LLM_CALL_SPAN_NAME } from "./llm-span.ts";

/** The rollout metadata key the policy server reads. */
export const SAMPLING_SEED_KEY = "sampling_seed";

/** One 32-bit seed from several (each word through splitmix32's finalizer, chained). */
export function mixSeeds(...words: number[]): number {
  let h = SPLITMIX32_GAMMA;
  for (const w of words) h = (splitmix32Finalize((h ^ (w >>> 0)) >>> 0) + SPLITMIX32_GAMMA) >>> 0;
  return h;
}

/** A 32-bit hash of a string (FNV-1a over its UTF-16 code units). */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** The `sampling_seed` of the `index`-th rollout an algorithm seeded with `seed` enqueues under `tag`. */
export function rolloutSamplingSeed(seed: number, tag: string, index: number): number {
  return mixSeeds(seed, hashString(tag), index);
}

/** How many model calls of the attempt the store has recorded (each call's span is stored before it answers). */
export async function recordedLlmCalls(store: LightningStore, rolloutId: string, attemptId: string): Promise<number> {
  return (await store.querySpans(rolloutId, { attempt_id: attemptId, name: LLM_CALL_SPAN_NAME, limit: 0 })).total;
}

/**
 * The seed of a routed call from its rollout's `sampling_seed`, the attempt's number (a retry samples
 * anew) and the call's number among the attempt's model calls (from 1, as attempts and span sequence ids
 * count: a one-call agent's seed is the one a sequence id gave it), asked for only when the rollout
 * carries a seed; null when it carries none.
 */
export async function routedCallSeed(
  store: LightningStore,
  rolloutId: string,
  attemptId: string,
  callNumber: () => Promise<number>,
): Promise<number | null> {
  const rollout = await store.getRolloutById(rolloutId);
  const seed = (rollout?.metadata as Record<string, unknown> | null | undefined)?.[SAMPLING_SEED_KEY];
  if (seed === undefined || seed === null) return null;
  if (!(typeof seed === "number" && Number.isInteger(seed) && seed >= 0 && seed <= 0xffffffff))
    throw new ValidationError(`rollout metadata ${SAMPLING_SEED_KEY} must be an unsigned 32-bit integer, got ${JSON.stringify(seed)}`, [
      "metadata",
      SAMPLING_SEED_KEY,
    ]);
  const attempt = rollout && "attempt" in rollout && rollout.attempt.attempt_id === attemptId ? rollout.attempt : null;
  const attemptNumber =
    attempt?.sequence_id ?? (await store.queryAttempts(rolloutId)).items.find((a) => a.attempt_id === attemptId)?.sequence_id ?? 0;
  return mixSeeds(seed, attemptNumber, await callNumber());
}

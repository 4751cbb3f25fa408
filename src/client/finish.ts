/**
 * The end of an attempt as one call: store its remaining spans, apply its final update (status...), and
 * optionally claim the next rollout for a worker — in that order, as `addManySpans`, `updateAttempt` and
 * `dequeueRollout` would. Over HTTP it is one request (`POST /v1/agl/attempts/finish`, a Lightning
 * extension); on any other store it is those three calls. Either way a failing part stops the rest and
 * throws its own typed error, and `finishFailure(err)` tells which part failed and which were stored.
 */
import type { AttemptPatch, LightningStore } from "../store/base.ts";
import { finishParts, type FinishPart } from "../store/finish-parts.ts";
import type { Attempt, AttemptedRollout, Span } from "../types/index.ts";

export type { FinishPart };

export interface FinishAttemptRequest {
  rollout_id: string;
  attempt_id: string;
  /** Spans to store first. Over HTTP they may leave `sequence_id` null (the server numbers them, as `/spans/batch`). */
  spans?: Span[];
  /** The attempt's final update, as `updateAttempt`. */
  attempt: AttemptPatch;
  /** Claim the next rollout for this worker afterwards (as `dequeueRollout`); null or absent: no claim. */
  claim?: { worker_id?: string | null } | null;
}

export interface FinishAttemptResult {
  /** Sequence ids of the stored spans, in request order (duplicates the store skipped are left out). */
  sequence_ids: number[];
  attempt: Attempt;
  /** The claimed rollout, or null (no claim asked for, or the queue was empty). */
  next: AttemptedRollout | null;
}

/** Which part of a finish call failed, and which parts had already been stored. */
export interface FinishFailure {
  failed: FinishPart;
  completed: FinishPart[];
}

const failures = new WeakMap<object, FinishFailure>();

/** Records on a thrown error which part failed (the error itself stays the part's own typed error). */
export function markFinishFailure<E>(err: E, info: FinishFailure): E {
  if (typeof err === "object" && err !== null) failures.set(err, info);
  return err;
}

/** For an error thrown by `finishAttempt`: the part that failed and those stored before it; null for other errors. */
export const finishFailure = (err: unknown): FinishFailure | null =>
  typeof err === "object" && err !== null ? (failures.get(err) ?? null) : null;

interface FinishesAttempts {
  finishAttempt(request: FinishAttemptRequest): Promise<FinishAttemptResult>;
}

const hasFinishRoute = (store: LightningStore): store is LightningStore & FinishesAttempts =>
  typeof (store as Partial<FinishesAttempts>).finishAttempt === "function";

/** One code path for any store: the one-request route when the store has it, the three calls otherwise. */
export async function finishAttempt(store: LightningStore, request: FinishAttemptRequest): Promise<FinishAttemptResult> {
  if (hasFinishRoute(store)) return store.finishAttempt(request);
  return finishWithCalls(store, request);
}

/** The three calls a finish stands for: `addManySpans`, `updateAttempt`, then `dequeueRollout` when it claims. */
export async function finishWithCalls(store: LightningStore, request: FinishAttemptRequest): Promise<FinishAttemptResult> {
  const part = finishParts((err, failed, completed) => markFinishFailure(err, { failed, completed }));
  const spans = request.spans;
  const stored = spans && spans.length > 0 ? await part("spans", () => store.addManySpans(spans)) : [];
  const attempt = await part("attempt", () => store.updateAttempt(request.rollout_id, request.attempt_id, request.attempt));
  const claim = request.claim;
  const next = claim ? await part("claim", () => store.dequeueRollout({ worker_id: claim.worker_id ?? null })) : null;
  return { sequence_ids: stored.map((s) => s.sequence_id), attempt, next };
}

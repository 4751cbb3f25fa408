/**
 * `POST /v1/agl/attempts/finish`: what a runner sends at the end of an attempt, in one request instead of
 * three — (1) the attempt's remaining spans (as `/spans/batch`), (2) the attempt's final update (as
 * `POST /rollouts/:rid/attempts/:aid`), (3) optionally the claim of the next rollout for a worker (as
 * `POST /queues/rollouts/dequeue` with limit 1). The parts run in that order, each through the same store
 * method as its own route, so each keeps its own validation and typed errors. A part that fails stops the
 * rest, and what the earlier parts stored stays stored: the error answer names them in `completed`.
 */
import type { LightningStore } from "../store/base.ts";
import { finishParts, type FinishPart } from "../store/finish-parts.ts";
import type { Attempt, AttemptedRollout, Span } from "../types/index.ts";
import { ValidationError } from "../types/index.ts";
import { addSpansAssigningSequence, type SpanWithOptionalSequence } from "./spans.ts";
import type { z } from "zod";
import type { FinishAttemptBody } from "./schemas.ts";

export type { FinishPart };

export interface FinishResult {
  /** The stored spans (duplicates left out), in request order. */
  spans: Span[];
  attempt: Attempt;
  /** The claimed rollout; null when no claim was asked for or the queue was empty. */
  next: AttemptedRollout | null;
}

/** A part's error, with the parts that had already been stored before it failed. */
export class FinishPartError extends Error {
  constructor(
    readonly reason: unknown,
    readonly failed: FinishPart,
    readonly completed: FinishPart[],
  ) {
    super(reason instanceof Error ? reason.message : String(reason));
  }
}

/** Checks that every span is an object (the store checks the rest), with the `/spans/batch` message and path. */
export function checkSpanObjects(spans: readonly unknown[]): SpanWithOptionalSequence[] {
  spans.forEach((s, i) => {
    if (s === null || typeof s !== "object" || Array.isArray(s))
      throw new ValidationError(`span #${i} must be an object`, [{ path: ["spans", i], message: "expected an object" }]);
  });
  return spans as SpanWithOptionalSequence[];
}

export async function finishAttempt(store: LightningStore, b: z.infer<typeof FinishAttemptBody>): Promise<FinishResult> {
  const part = finishParts((err, failed, completed) => new FinishPartError(err, failed, completed));
  const sent = b.spans && b.spans.length > 0 ? b.spans : null;
  const spans = sent ? await part("spans", () => addSpansAssigningSequence(store, checkSpanObjects(sent))) : [];
  const attempt = await part("attempt", () => store.updateAttempt(b.rollout_id, b.attempt_id, b.attempt));
  const next = b.claim ? await part("claim", () => store.dequeueRollout({ worker_id: b.claim!.worker_id ?? null })) : null;
  return { spans, attempt, next };
}

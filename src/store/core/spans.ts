/** Transaction bodies of spans: the write of a batch of span requests, sequence ids, queries. */
import type { Attempt, FilterLogic, PaginatedResult, Rollout, Span } from "../../types/index.ts";
import { NotFoundError } from "../../types/index.ts";
import type { SpanQuery } from "../base.ts";
import { heartbeatPatch, rolloutStatusAfterSpan } from "../decisions.ts";
import type { Page } from "../inputs.ts";
import type { FieldOps } from "../query.ts";
import type { StorageTx } from "../storage.ts";
import type { Effects, TxBody, TxContext } from "./driver.ts";
import { found, setRolloutStatus } from "./steps.ts";

/** Spans of one add-span call; `allocate`: give its single span the next sequence id. */
export interface SpanRequest {
  spans: Span[];
  allocate: boolean;
}

/** A (rollout, attempt) that spans of one write name, and whether it got a span. */
interface SpanTarget {
  attempt: Attempt;
  beat: boolean;
}

/**
 * The span targets of one write, in first-seen order. Nearly every write names a single (rollout,
 * attempt): that one is found without building a key string or a map.
 */
class SpanTargets {
  readonly list: SpanTarget[] = [];
  private index: Map<string, SpanTarget> | null = null;

  private static key(rolloutId: string, attemptId: string): string {
    return `${rolloutId}\u0000${attemptId}`;
  }

  get(rolloutId: string, attemptId: string): SpanTarget | undefined {
    if (this.index !== null) return this.index.get(SpanTargets.key(rolloutId, attemptId));
    const only = this.list[0];
    return only !== undefined && only.attempt.attempt_id === attemptId && only.attempt.rollout_id === rolloutId ? only : undefined;
  }

  add(attempt: Attempt): void {
    const target: SpanTarget = { attempt, beat: false };
    this.list.push(target);
    if (this.list.length === 1) return;
    this.index ??= new Map(this.list.slice(0, -1).map((x) => [SpanTargets.key(x.attempt.rollout_id, x.attempt.attempt_id), x]));
    this.index.set(SpanTargets.key(attempt.rollout_id, attempt.attempt_id), target);
  }

  /** Marks the targets that really got one of `inserted`. */
  noteBeats(inserted: readonly Span[]): void {
    for (let i = 0; i < inserted.length; i++) this.get(inserted[i]!.rollout_id, inserted[i]!.attempt_id)!.beat = true;
  }
}

/** The spans of every request that did not fail, in order. */
function acceptedSpans(results: readonly (Span[] | Error)[]): Span[] {
  if (results.length === 1) {
    const only = results[0]!;
    return only instanceof Error ? [] : only;
  }
  const all: Span[] = [];
  for (const r of results) if (!(r instanceof Error)) for (const s of r) all.push(s);
  return all;
}

/** Leaves each request only its spans that went in (insertSpans returns the very objects it was given). */
function keepInserted(results: (Span[] | Error)[], inserted: readonly Span[]): (Span[] | Error)[] {
  const kept = new Set(inserted);
  for (let i = 0; i < results.length; i++) {
    const r = results[i]!;
    if (!(r instanceof Error)) results[i] = r.filter((s) => kept.has(s));
  }
  return results;
}

/** The spans of the only request of a write, or its error. */
export function onlyResult(results: (Span[] | Error)[]): Span[] {
  const r = results[0]!;
  if (r instanceof Error) throw r;
  return r;
}

export function* sequenceIdsTx(
  this: TxContext,
  t: StorageTx,
  perRollout: Map<string, number>,
  pairs: readonly (readonly [string, string])[],
): TxBody<number[]> {
  const next = new Map<string, number>();
  for (const [rid, n] of perRollout) next.set(rid, ((yield t.incSequence(rid, n)) as number) - n + 1);
  return pairs.map(([rid]) => {
    const v = next.get(rid)!;
    next.set(rid, v + 1);
    return v;
  });
}

/**
 * Writes span requests in one transaction: check every rollout and attempt (a request naming a
 * missing one fails alone, before anything is written for it), raise the sequence counters, insert,
 * then one heartbeat per (rollout, attempt) that really got a span. A request with `allocate` has one
 * span, which gets the next sequence id of its rollout inside the transaction.
 * Returns, per request, the spans it inserted or the error it failed with.
 */
export function* writeSpansTx(this: TxContext, t: StorageTx, requests: readonly SpanRequest[], fx: Effects): TxBody<(Span[] | Error)[]> {
  const targets = new SpanTargets();
  const out: (Span[] | Error)[] = [];
  for (let r = 0; r < requests.length; r++) {
    const req = requests[r]!;
    try {
      // Every (rollout, attempt) of the request must exist before anything is written.
      for (let i = 0; i < req.spans.length; i++) {
        const s = req.spans[i]!;
        if (targets.get(s.rollout_id, s.attempt_id) !== undefined) continue;
        found(yield t.getRollout(s.rollout_id), s.rollout_id);
        const attempt: Attempt | null = yield t.getAttempt(s.rollout_id, s.attempt_id);
        if (!attempt) throw new NotFoundError(`Attempt ${s.attempt_id} not found for rollout ${s.rollout_id}`, "attempt", s.attempt_id);
        targets.add(attempt);
      }
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
      out.push(e);
      continue;
    }
    const first = req.spans[0]!;
    out.push(req.allocate ? [Object.freeze({ ...first, sequence_id: (yield t.incSequence(first.rollout_id, 1)) as number })] : req.spans);
  }
  const all = acceptedSpans(out);
  if (all.length === 0) return out;
  // Also raises each rollout's sequence counter to its spans' largest sequence_id, as a max, so a counter never moves back.
  const done: Span[] = yield t.insertSpans(all);
  if (done.length === 0) return keepInserted(out, done);
  const now = this.clock.now();
  targets.noteBeats(done);
  // A span is its attempt's heartbeat (docs/departures.md#4), once per (rollout, attempt) that got a span. Rollouts are re-read per heartbeat: an earlier
  // heartbeat of this batch may have changed one.
  for (let i = 0; i < targets.list.length; i++) {
    const { attempt, beat } = targets.list[i]!;
    if (!beat) continue;
    const rollout: Rollout = yield t.getRollout(attempt.rollout_id);
    const updated: Attempt = yield t.updateAttempt(attempt.rollout_id, attempt.attempt_id, heartbeatPatch(attempt, now));
    const latest: Attempt | null = yield t.getLatestAttempt(attempt.rollout_id);
    const next = rolloutStatusAfterSpan(rollout.status, updated.status, latest?.attempt_id === attempt.attempt_id);
    if (next !== null) yield* setRolloutStatus(t, rollout, next, now, fx);
  }
  return done.length === all.length ? out : keepInserted(out, done);
}

export function* querySpansTx(
  this: TxContext,
  t: StorageTx,
  rolloutId: string,
  query: SpanQuery,
  page: Page,
  where: Record<string, FieldOps>,
  logic: FilterLogic,
): TxBody<PaginatedResult<Span>> {
  let attemptId = query.attempt_id ?? null;
  if (attemptId === "latest") {
    const latest: Attempt | null = yield t.getLatestAttempt(rolloutId);
    if (!latest) return { items: [], limit: page.limit, offset: page.offset, total: 0 };
    attemptId = latest.attempt_id;
  }
  const must: Record<string, FieldOps> = { rollout_id: { exact: rolloutId }, attempt_id: { exact: attemptId } };
  return (yield t.query("spans", { must, where, logic, ...page })) as PaginatedResult<Span>;
}

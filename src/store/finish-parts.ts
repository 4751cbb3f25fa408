/**
 * The parts of an attempt's finish (Lightning's `POST /v1/agl/attempts/finish` and the client's
 * `finishAttempt`): spans, then the attempt's final update, then the claim of the next rollout. Server and
 * client run them the same way and differ only in how a failing part is reported.
 */
export type FinishPart = "spans" | "attempt" | "claim";

/**
 * A runner for the parts, in call order: each part that succeeds is recorded; a failing one throws what
 * `onFailure` makes of its error, the part's name and the parts stored before it.
 */
export function finishParts(onFailure: (err: unknown, failed: FinishPart, completed: FinishPart[]) => unknown) {
  const completed: FinishPart[] = [];
  return async <T>(name: FinishPart, run: () => Promise<T>): Promise<T> => {
    try {
      const out = await run();
      completed.push(name);
      return out;
    } catch (err) {
      throw onFailure(err, name, [...completed]);
    }
  };
}

import type { z } from "zod";

/** One problem with an input, with the path to the offending field. */
export interface InputIssue {
  path: (string | number)[];
  message: string;
  code?: string;
}

/** Base of every error the library throws on purpose. `errorType` travels over HTTP as `error_type`. */
export class LightningError extends Error {
  readonly errorType: string = "LightningError";
  /** The HTTP status the server answers with. */
  readonly status: number = 500;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Bad input: a schema failure or a value the operation cannot accept (HTTP 400). */
export class ValidationError extends LightningError {
  override readonly errorType = "ValidationError";
  override readonly status = 400;
  readonly issues: InputIssue[];
  constructor(message: string, issuesOrPath: InputIssue[] | (string | number)[] = []) {
    super(message);
    this.issues =
      issuesOrPath.length > 0 && typeof issuesOrPath[0] === "object"
        ? (issuesOrPath as InputIssue[])
        : issuesOrPath.length > 0
          ? [{ path: issuesOrPath as (string | number)[], message }]
          : [];
  }

  static fromZod(error: z.ZodError, what = "input"): ValidationError {
    const issues: InputIssue[] = error.issues.map((i) => ({
      path: i.path.map((p) => (typeof p === "symbol" ? String(p) : p)),
      message: i.message,
      code: i.code,
    }));
    const first = issues[0];
    const where = first && first.path.length ? ` at ${first.path.join(".")}` : "";
    return new ValidationError(`Invalid ${what}${where}: ${first?.message ?? "validation failed"}`, issues);
  }
}

/** An id that does not exist (HTTP 404). */
export class NotFoundError extends LightningError {
  override readonly errorType = "NotFoundError";
  override readonly status = 404;
  constructor(
    message: string,
    readonly resource?: string,
    readonly id?: string,
  ) {
    super(message);
  }
}

/** A state change the current state does not allow (HTTP 409). */
export class ConflictError extends LightningError {
  override readonly errorType = "ConflictError";
  override readonly status = 409;
}

/** Spans of a rollout were dropped by the in-memory store's memory limit. */
export class EvictedError extends LightningError {
  override readonly errorType = "EvictedError";
  override readonly status = 410;
}

/** Parses with a zod schema and turns a failure into a ValidationError carrying the issue paths. */
export function parseOrThrow<T extends z.ZodType>(schema: T, value: unknown, what = "input"): z.infer<T> {
  const r = schema.safeParse(value);
  if (!r.success) throw ValidationError.fromZod(r.error, what);
  return r.data;
}

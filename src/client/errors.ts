/**
 * The server's JSON errors (`{"detail", "error_type", "issues"}`, DECISIONS row 1) turned back into
 * the typed errors the store itself throws, so code behaves the same against a local or remote store.
 */
import type { InputIssue } from "../types/index.ts";
import { ConflictError, EvictedError, LightningError, NotFoundError, ValidationError } from "../types/index.ts";
import { markFinishFailure, type FinishPart } from "./finish.ts";

/** An HTTP error without a more specific class (401, 413, 5xx, an unknown route...). */
export class StoreHttpError extends LightningError {
  constructor(
    override readonly status: number,
    override readonly errorType: string,
    message: string,
  ) {
    super(message);
  }
}

/** The server could not be reached (connection refused or reset, timeout) after the retries. */
export class StoreConnectionError extends LightningError {
  override readonly errorType = "StoreConnectionError";
  override readonly status = 503;
}

interface ErrorBody {
  detail?: unknown;
  error_type?: unknown;
  issues?: unknown;
  /** `POST /attempts/finish` only: the part that failed and those stored before it. */
  failed_part?: unknown;
  completed?: unknown;
}

/** The typed error for a non-2xx answer, from its status and (possibly non-JSON) body. */
export function errorFromResponse(status: number, text: string, what: string): LightningError {
  let body: ErrorBody = {};
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed !== null && typeof parsed === "object") body = parsed as ErrorBody;
  } catch {
    // Not our JSON (a proxy's HTML page, a plain-text crash): keep the text as the detail.
  }
  const detail = typeof body.detail === "string" ? body.detail : text.trim() || `HTTP ${status}`;
  const type = typeof body.error_type === "string" ? body.error_type : `HTTP${status}`;
  const message = `${what}: ${detail}`;
  const err = typedError(status, type, message, body);
  if (typeof body.failed_part === "string" && Array.isArray(body.completed)) {
    markFinishFailure(err, { failed: body.failed_part as FinishPart, completed: body.completed as FinishPart[] });
  }
  return err;
}

function typedError(status: number, type: string, message: string, body: ErrorBody): LightningError {
  switch (type) {
    case "ValidationError":
      return new ValidationError(message, Array.isArray(body.issues) ? (body.issues as InputIssue[]) : []);
    case "NotFoundError":
      return new NotFoundError(message);
    case "ConflictError":
      return new ConflictError(message);
    case "EvictedError":
      return new EvictedError(message);
    default:
      return new StoreHttpError(status, type, message);
  }
}

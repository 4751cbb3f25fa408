/**
 * The server's JSON errors (`{"detail", "error_type", "issues"}`, docs/departures.md#1) turned back into
 * the typed errors the store itself throws, so code behaves the same against a local or remote store.
 */
import { rootCause } from "../platform/log.ts";
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

/** Why a request got no answer, in a few words: a fetch's own message ("fetch failed") and the reason behind it. */
export function unansweredReason(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const why = rootCause(e);
  return why === null || e.message.includes(why) ? e.message : `${e.message} (${why})`;
}

interface ErrorBody {
  detail?: unknown;
  error_type?: unknown;
  issues?: unknown;
  /** Agent Lightning's 500 answers: the Python traceback. */
  traceback?: unknown;
  /** `POST /attempts/finish` only: the part that failed and those stored before it. */
  failed_part?: unknown;
  completed?: unknown;
}

function parseErrorBody(text: string): ErrorBody {
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) return parsed as ErrorBody;
  } catch {
    // Not JSON (a proxy's HTML page, a plain-text crash): the caller keeps the text as the detail.
  }
  return {};
}

/** The `error_type` of an error answer's JSON body, or null. */
export function errorTypeOf(text: string): string | null {
  const type = parseErrorBody(text).error_type;
  return typeof type === "string" ? type : null;
}

/** FastAPI's 422 detail (pydantic errors: `loc` starting with "body", "query" or "path", and `msg`) as issues. */
function pydanticIssues(detail: unknown[]): InputIssue[] {
  return detail.map((d) => {
    const { loc, msg, type } = (d ?? {}) as { loc?: unknown; msg?: unknown; type?: unknown };
    const path = Array.isArray(loc) ? (loc.filter((p) => typeof p === "string" || typeof p === "number") as (string | number)[]) : [];
    return {
      path: ["body", "query", "path"].includes(String(path[0])) ? path.slice(1) : path,
      message: String(msg ?? "invalid"),
      ...(typeof type === "string" ? { code: type } : {}),
    };
  });
}

/** The last line of a Python traceback (`ValueError: Rollout ro-... not found`), which upstream's 500s carry. */
const pythonException = (traceback: unknown): string | null =>
  typeof traceback === "string" ? traceback.trim().split("\n").at(-1)?.trim() || null : null;

/**
 * The typed error for a non-2xx answer, from its status and (possibly non-JSON) body. Agent Lightning's
 * own server answers too: its 422 (pydantic errors in `detail`) and its 400 (a `detail` string, no
 * `error_type`) are invalid input, so a ValidationError; its 500 names the Python exception, whose
 * message (the traceback's last line) goes into ours.
 */
export function errorFromResponse(status: number, text: string, what: string): LightningError {
  const body = parseErrorBody(text);
  const upstreamIssues = status === 422 && Array.isArray(body.detail) ? pydanticIssues(body.detail) : null;
  const exception = pythonException(body.traceback);
  let detail =
    typeof body.detail === "string"
      ? body.detail
      : upstreamIssues
        ? upstreamIssues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")
        : text.trim() || `HTTP ${status}`;
  if (exception !== null && !detail.includes(exception)) detail = `${detail} (${exception})`;
  const upstreamInput = upstreamIssues !== null || (status === 400 && body.error_type === undefined && typeof body.detail === "string");
  const type = typeof body.error_type === "string" ? body.error_type : upstreamInput ? "ValidationError" : `HTTP${status}`;
  const message = `${what}: ${detail}`;
  const err = typedError(status, type, message, upstreamIssues ? { ...body, issues: upstreamIssues } : body);
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

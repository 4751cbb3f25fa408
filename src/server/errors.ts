/**
 * The one JSON error shape of the HTTP API (docs/departures.md#1):
 * `{"detail": "...", "error_type": "...", "issues": [...]}` with `issues` only for validation errors.
 * Typed store errors carry their own status (400/404/409/410); anything else is a real crash (500).
 */
import { HTTPException } from "hono/http-exception";
import type { InputIssue } from "../types/index.ts";
import { LightningError, ValidationError } from "../types/index.ts";

export interface ErrorBody {
  detail: string;
  error_type: string;
  issues?: InputIssue[];
}

/** An HTTP-level refusal that is not a store error: 401, 413, unknown routes. */
export class HttpProblem extends LightningError {
  constructor(
    override readonly status: number,
    override readonly errorType: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export const routeNotFound = (method: string, path: string): HttpProblem =>
  new HttpProblem(404, "RouteNotFound", `No route for ${method} ${path}`);

/** Maps anything thrown while serving a request to a status and the JSON error body. */
export function errorResponse(err: unknown): { status: number; body: ErrorBody } {
  if (err instanceof ValidationError) {
    return { status: 400, body: { detail: err.message, error_type: err.errorType, issues: err.issues } };
  }
  if (err instanceof LightningError) {
    return { status: err.status, body: { detail: err.message, error_type: err.errorType } };
  }
  if (err instanceof HTTPException) {
    const type = err.status === 413 ? "PayloadTooLarge" : err.status === 401 ? "Unauthorized" : "HttpError";
    return { status: err.status, body: { detail: err.message || `HTTP ${err.status}`, error_type: type } };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { status: 500, body: { detail: `Internal server error: ${message}`, error_type: err instanceof Error ? err.name : "Error" } };
}

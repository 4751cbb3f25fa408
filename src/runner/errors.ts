import { LightningError } from "../types/index.ts";

/** Upstream's RuntimeError: a failure of the machinery rather than of the caller's input. */
export class RuntimeError extends LightningError {
  override readonly errorType: string = "RuntimeError";
}

/** A method that must be implemented (upstream's NotImplementedError is a RuntimeError subclass). */
export class NotImplementedError extends RuntimeError {
  override readonly errorType: string = "NotImplementedError";
}

/** A rollout or bundle stopped by an AbortSignal. */
export class AbortError extends LightningError {
  override readonly errorType: string = "AbortError";
}

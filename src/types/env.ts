/**
 * `LightningEnvVar`, Agent Lightning's environment variables, and how they are read: an explicit
 * (constructor) value wins over the environment, which wins over the fallback. Here rather than in the
 * trainer, which reads most of them, because the tracer's emitters read AGL_EMITTER_DEBUG.
 */
import { platform } from "../platform/index.ts";
import { ValidationError } from "./errors.ts";

export const LightningEnvVar = {
  AGL_MANAGED_STORE: "AGL_MANAGED_STORE",
  AGL_CURRENT_ROLE: "AGL_CURRENT_ROLE",
  AGL_SERVER_HOST: "AGL_SERVER_HOST",
  AGL_SERVER_PORT: "AGL_SERVER_PORT",
  /** Emitters log each span they emit at debug level (unset: when debug records go anywhere). */
  AGL_EMITTER_DEBUG: "AGL_EMITTER_DEBUG",
  /** TS only: set by the client-server strategy in a runner child, the one worker id it runs. */
  AGL_WORKER_ID: "AGL_WORKER_ID",
  /** TS only: how much lower runner children's CPU priority is (ClientServerOptions.runnerNiceness). */
  AGL_RUNNER_NICENESS: "AGL_RUNNER_NICENESS",
} as const;
export type LightningEnvVarName = keyof typeof LightningEnvVar;

const TRUTHY = ["1", "true", "yes", "on"];
const FALSY = ["0", "false", "no", "off"];

export function readEnv(name: string): string | undefined {
  return platform.env(name);
}

export function resolveBoolEnv(name: string, explicit: boolean | null | undefined, fallback: boolean): boolean;
/** With a null fallback: null when neither is given. */
export function resolveBoolEnv(name: string, explicit: boolean | null | undefined, fallback: null): boolean | null;
export function resolveBoolEnv(name: string, explicit: boolean | null | undefined, fallback: boolean | null): boolean | null {
  if (explicit !== null && explicit !== undefined) return explicit;
  const raw = readEnv(name);
  if (raw === undefined) return fallback;
  const v = raw.trim().toLowerCase();
  if (TRUTHY.includes(v)) return true;
  if (FALSY.includes(v)) return false;
  throw new ValidationError(`${name} must be one of {${TRUTHY.join(", ")}} or {${FALSY.join(", ")}}, got '${raw}'`, [name]);
}

export function resolveIntEnv(name: string, explicit: number | null | undefined, fallback: number): number {
  if (explicit !== null && explicit !== undefined) return explicit;
  const raw = readEnv(name);
  if (raw === undefined) return fallback;
  const v = raw.trim();
  if (!/^[+-]?\d+$/.test(v)) throw new ValidationError(`${name} must be an integer, got '${raw}'`, [name]);
  return Number.parseInt(v, 10);
}

export function resolveStrEnv(name: string, explicit: string | null | undefined, fallback: string): string {
  if (explicit !== null && explicit !== undefined) return explicit;
  return readEnv(name) ?? fallback;
}

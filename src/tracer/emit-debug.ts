/**
 * `AGL_EMITTER_DEBUG`: the emitters log each span they emit, at debug level, through the
 * `agentlightning.emitter` logger. Upstream's rule: on when the variable says so, off when it says so,
 * and when it is unset, on when debug records go anywhere (the console at `AGL_LOG_LEVEL=debug`, or a
 * sink). On while nothing listens at debug, it warns once that nothing will show.
 */
import { context } from "@opentelemetry/api";
import { getLogger } from "../platform/log.ts";
import { LightningEnvVar, resolveBoolEnv } from "../types/env.ts";
import type { SpanCoreFields } from "../types/index.ts";
import type { Tracer } from "./base.ts";
import { ROLLOUT_SCOPE_KEY } from "./context.ts";
import type { RolloutScope } from "./scope.ts";

const log = getLogger("agentlightning.emitter");
/** Characters of a span's attributes shown in one log line. */
const SHOWN_CHARS = 1_000;
let warned = false;

function emitterDebug(): boolean {
  const asked = resolveBoolEnv(LightningEnvVar.AGL_EMITTER_DEBUG, null, null);
  const listening = log.isEnabled("debug");
  if (asked === true && !listening && !warned) {
    warned = true;
    log.warning("AGL_EMITTER_DEBUG is on but debug logging is not: nothing the emitters log will show (set AGL_LOG_LEVEL=debug)");
  }
  return (asked ?? listening) && listening;
}

/**
 * Logs `span` when AGL_EMITTER_DEBUG says so: its name, where it goes (the active tracer and its
 * rollout, or nowhere for `propagate: false`) and its attributes, cut to SHOWN_CHARS.
 */
export function logEmitted(span: SpanCoreFields, tracer: Tracer, propagated: boolean): void {
  if (!emitterDebug()) return;
  const scope = context.active().getValue(ROLLOUT_SCOPE_KEY) as RolloutScope | undefined;
  const ids = scope?.rolloutId != null ? ` (rollout ${scope.rolloutId}, attempt ${scope.attemptId})` : "";
  const target = propagated ? `to ${tracer.constructor.name}${ids}` : "locally (propagate: false)";
  const attributes = JSON.stringify(span.attributes);
  const shown = attributes.length <= SHOWN_CHARS ? attributes : `${attributes.slice(0, SHOWN_CHARS)}… (${attributes.length} characters)`;
  log.debug(`Emitting ${span.name} span ${target}: ${shown}`);
}

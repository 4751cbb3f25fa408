/**
 * Context propagation. The active rollout scope and the active tracer live in the OpenTelemetry
 * context, carried by the platform's context manager (src/platform/): AsyncLocalStorage on Node, Deno
 * and Bun, across `await`, timers and callbacks; a synchronous stack in browsers, where code after an
 * `await` gets its rollout's context explicitly (`Tracer.inTrace`, `Tracer.traceContextValue`; the
 * runner calls the agent inside it). Keeping the scope in the context (not in a global) lets several
 * runners trace concurrent rollouts in one process without mixing their spans.
 */
import { context, createContextKey, type Context } from "@opentelemetry/api";
import { platform } from "../platform/index.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.tracer");

export const ROLLOUT_SCOPE_KEY = createContextKey("agentlightning.rollout_scope");
export const ACTIVE_TRACER_KEY = createContextKey("agentlightning.active_tracer");

let installed = false;

/** Registers the platform's context manager as the global one (once per process). */
export function installContextManager(): void {
  if (installed) return;
  installed = true;
  const ok = context.setGlobalContextManager(platform.contextManager().enable());
  if (!ok || !propagatesInsideWith()) {
    log.warn("A global OpenTelemetry context manager was already registered; rollout scoping relies on it propagating across await");
  }
}

/** A synchronous probe: a value set with `context.with` must be visible inside the callback. */
function propagatesInsideWith(): boolean {
  const key = createContextKey("agentlightning.probe");
  return context.with(context.active().setValue(key, true), () => context.active().getValue(key) === true);
}

export const activeContext = (): Context => context.active();

/** `fn` bound to the context active now: it runs in it whenever it is called (the runner calls its agent so). */
export function bindToActiveContext<F extends (...args: never[]) => unknown>(fn: F): F {
  installContextManager();
  return context.bind(context.active(), fn);
}

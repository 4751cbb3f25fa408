/**
 * Context propagation. The active rollout scope and the active tracer live in the OpenTelemetry
 * context, which an AsyncLocalStorage context manager carries across `await`, timers and callbacks.
 * Node, Deno 2 and Bun all implement `node:async_hooks` AsyncLocalStorage, so one manager serves all
 * three. Keeping the scope in the context (not in a global) lets several runners trace concurrent
 * rollouts in one process without mixing their spans.
 */
import { context, createContextKey, type Context } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.tracer");

export const ROLLOUT_SCOPE_KEY = createContextKey("agentlightning.rollout_scope");
export const ACTIVE_TRACER_KEY = createContextKey("agentlightning.active_tracer");

let installed = false;

/** Registers the AsyncLocalStorage context manager as the global one (once per process). */
export function installContextManager(): void {
  if (installed) return;
  installed = true;
  const ok = context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  if (!ok || !propagatesAcrossAwait()) {
    log.warn("A global OpenTelemetry context manager was already registered; rollout scoping relies on it propagating across await");
  }
}

/** A synchronous probe: a value set with `context.with` must be visible inside the callback. */
function propagatesAcrossAwait(): boolean {
  const key = createContextKey("agentlightning.probe");
  return context.with(context.active().setValue(key, true), () => context.active().getValue(key) === true);
}

export const activeContext = (): Context => context.active();

/**
 * `Hook`: callbacks around each rollout (docs/runner.md#hooks). The runner awaits them in registration
 * order; an exception from a hook is logged and never fails the rollout. Order for one rollout:
 * onRolloutStart → onTraceStart → onTraceEnd (skipped if the agent threw) → onRolloutEnd.
 */
import type { Tracer } from "../tracer/base.ts";
import type { AttemptedRollout, Span } from "../types/index.ts";
import type { LitAgent } from "./litagent.ts";

export interface HookRunnerRef {
  readonly tracer: Tracer;
}

export interface TraceHookArgs {
  agent: LitAgent<unknown>;
  runner: HookRunnerRef;
  tracer: Tracer;
  rollout: AttemptedRollout;
}
export interface RolloutStartArgs {
  agent: LitAgent<unknown>;
  runner: HookRunnerRef;
  rollout: AttemptedRollout;
}
export interface RolloutEndArgs extends RolloutStartArgs {
  spans: Span[];
}

export class Hook {
  async onTraceStart(_args: TraceHookArgs): Promise<void> {}
  /** Runs inside the trace context: a returned reward's span does not exist yet. */
  async onTraceEnd(_args: TraceHookArgs): Promise<void> {}
  async onRolloutStart(_args: RolloutStartArgs): Promise<void> {}
  async onRolloutEnd(_args: RolloutEndArgs): Promise<void> {}
}

export type HookName = "onTraceStart" | "onTraceEnd" | "onRolloutStart" | "onRolloutEnd";

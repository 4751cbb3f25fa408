/**
 * `FunctionalLitAgent` and the `rollout()` helper (docs/runner.md#function-agents): a plain function becomes an
 * agent. The first parameter is the task; an `llm` parameter gets the first LLM resource (a ProxyLLM
 * is bound to the attempt unless `stripProxy: false`), a `prompt_template` (or `promptTemplate`)
 * parameter gets the first PromptTemplate, and a `rollout` parameter gets the attempted rollout.
 *
 * Parameter names are read from the function's source. Minified code loses them: declare
 * `{ kind: "llm" | "prompt" }` and the function is called as `fn(task, resource, rollout)`.
 * The agent object is itself callable and passes straight through to the function.
 */
import { parameterNames } from "../tracer/params.ts";
import { getLogger } from "../platform/log.ts";
import type { AttemptedRollout, LLM, NamedResources, PromptTemplate, ProxyLLM, Resource } from "../types/index.ts";
import { ValidationError, proxyLlmForAttempt } from "../types/index.ts";
import { callableInstance } from "./callable.ts";
import { NotImplementedError } from "./errors.ts";
import type { MaybePromise } from "../store/storage.ts";
import { LitAgent, type RolloutRawResult } from "./litagent.ts";

const log = getLogger("agentlightning.litagent.decorator");

export type AgentKind = "llm" | "prompt";
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type RolloutFunction<T> = (task: T, ...rest: any[]) => unknown;

export interface FunctionalAgentOptions {
  /** Which resource to inject; parsed from parameter names when left out. */
  kind?: AgentKind;
  /** Turn a ProxyLLM into a plain LLM bound to the attempt (default true). */
  stripProxy?: boolean;
}

const PROMPT_PARAMS = ["prompt_template", "promptTemplate"];
const NOT_INJECTABLE = Symbol("not injectable");

function firstOf<R extends Resource>(resources: NamedResources, pick: (r: Resource) => r is R, what: string, errorName: string): R {
  const found = Object.entries(resources).filter(([, r]) => pick(r));
  if (found.length === 0)
    throw new ValidationError(
      `No ${errorName} resource found in the given resources (names: ${Object.keys(resources).join(", ") || "none"})`,
      ["resources"],
    );
  if (found.length > 1) log.warn(`Multiple ${what} resources found; using the first ('${found[0]![0]}'), ignoring '${found[1]![0]}'`);
  return found[0]![1] as R;
}

const isLlm = (r: Resource): r is LLM | ProxyLLM => r.resource_type === "llm" || r.resource_type === "proxy_llm";
const isPrompt = (r: Resource): r is PromptTemplate => r.resource_type === "prompt_template";

/** Upstream's decorator checks, on parameter names read from the source. */
function validate(fn: RolloutFunction<never>, kind: AgentKind, names: string[]): void {
  const label = kind === "llm" ? "llm_rollout" : "prompt_rollout";
  if (names.length < 2)
    throw new ValidationError(`Function ${fn.name || "<anonymous>"} for ${label} must have at least 2 parameters`, ["fn"]);
  if (names[0] !== "task")
    throw new ValidationError(`The first parameter of ${fn.name || "<anonymous>"} must be a positional parameter called 'task'`, ["fn"]);
  if (kind === "llm" && !names.includes("llm"))
    throw new ValidationError(`Function ${fn.name || "<anonymous>"} must have a positional parameter called 'llm'`, ["fn"]);
  if (kind === "prompt" && !names.some((n) => PROMPT_PARAMS.includes(n))) {
    throw new ValidationError(`Function ${fn.name || "<anonymous>"} must have a positional parameter called 'prompt_template'`, ["fn"]);
  }
}

function detectKind(fn: RolloutFunction<never>, names: string[]): AgentKind {
  for (const kind of ["llm", "prompt"] as const) {
    try {
      validate(fn, kind, names);
      return kind;
    } catch {
      // try the next pattern
    }
  }
  throw new NotImplementedError(
    `Function ${fn.name || "<anonymous>"} does not match any known agent patterns (task, llm[, rollout]) or (task, prompt_template[, rollout])`,
  );
}

export interface FunctionalLitAgent<T> {
  /** Calls the wrapped function directly. */
  (task: T, ...rest: unknown[]): unknown;
}

export class FunctionalLitAgent<T = unknown> extends LitAgent<T> {
  readonly fn: RolloutFunction<T>;
  readonly kind: AgentKind;
  readonly stripProxy: boolean;
  /** Parameter names read from the source ([] when unreadable). */
  readonly parameters: string[];

  constructor(fn: RolloutFunction<T>, options: FunctionalAgentOptions & { validated?: boolean } = {}) {
    super();
    const names = parameterNames(fn as RolloutFunction<never>);
    this.fn = fn;
    this.parameters = names;
    this.kind = options.kind ?? detectKind(fn as RolloutFunction<never>, names);
    this.stripProxy = options.stripProxy ?? true;
    // The agent is callable and passes straight through to the function.
    return callableInstance(this, new.target.prototype, fn as (...args: never[]) => unknown);
  }

  /** True when the wrapped function is declared `async`. */
  override isAsync(): boolean {
    return this.fn.constructor?.name === "AsyncFunction";
  }

  private resource(resources: NamedResources, rollout: AttemptedRollout): Resource {
    if (this.kind === "prompt") return firstOf(resources, isPrompt, "prompt template", "prompt template");
    const llm = firstOf(resources, isLlm, "LLM", "LLM");
    if (llm.resource_type !== "proxy_llm" || !this.stripProxy) return llm;
    if (!rollout?.attempt) throw new ValidationError("A ProxyLLM needs an attempted rollout to be bound to", ["rollout"]);
    return proxyLlmForAttempt(llm, rollout.rollout_id, rollout.attempt.attempt_id);
  }

  override rollout(task: T, resources: NamedResources, rollout: AttemptedRollout): MaybePromise<RolloutRawResult> {
    const resource = this.resource(resources, rollout);
    const names = this.parameters;
    // Injection by name when the names are known; otherwise (task, resource, rollout).
    const byName = (n: string): unknown =>
      n === "rollout" ? rollout : n === "resources" ? resources : n === "llm" || PROMPT_PARAMS.includes(n) ? resource : NOT_INJECTABLE;
    const args = names.slice(1).map(byName);
    if (names.length >= 2 && names[0] === "task" && !args.includes(NOT_INJECTABLE))
      return this.fn(task, ...args) as MaybePromise<RolloutRawResult>;
    return this.fn(task, resource, rollout) as MaybePromise<RolloutRawResult>;
  }

  override async rolloutAsync(task: T, resources: NamedResources, rollout: AttemptedRollout): Promise<RolloutRawResult> {
    return await this.rollout(task, resources, rollout);
  }

  override invoke(task: T, resources: NamedResources, rollout: AttemptedRollout): MaybePromise<RolloutRawResult> {
    const train = rollout.mode === "train";
    return train ? this.trainingRollout(task, resources, rollout) : this.validationRollout(task, resources, rollout);
  }
}

/**
 * Wraps a function as an agent. With `kind`, no name parsing happens; without it the function must look
 * like `(task, llm[, rollout])` or `(task, prompt_template[, rollout])`.
 */
export function rollout<T>(fn: RolloutFunction<T>, options: FunctionalAgentOptions = {}): FunctionalLitAgent<T> {
  return new FunctionalLitAgent(fn, options);
}

/** `(task, llm[, rollout])`; the names are checked. */
export function llmRollout<T>(fn: RolloutFunction<T>, options: { stripProxy?: boolean } = {}): FunctionalLitAgent<T> {
  validate(fn as RolloutFunction<never>, "llm", parameterNames(fn as RolloutFunction<never>));
  return new FunctionalLitAgent(fn, { kind: "llm", stripProxy: options.stripProxy ?? true });
}

/** `(task, prompt_template[, rollout])`; the names are checked. Proxies are always stripped. */
export function promptRollout<T>(fn: RolloutFunction<T>): FunctionalLitAgent<T> {
  validate(fn as RolloutFunction<never>, "prompt", parameterNames(fn as RolloutFunction<never>));
  return new FunctionalLitAgent(fn, { kind: "prompt" });
}

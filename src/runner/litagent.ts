/**
 * `LitAgent` (docs/runner.md#writing-an-agent): the agent a runner drives. Subclass it and implement `rollout`
 * (or `trainingRollout` / `validationRollout` for mode-specific behaviour). A rollout method may
 * return: nothing (spans were traced / the reward emitted), a number or boolean (the reward), or a
 * list of OpenTelemetry ReadableSpans, of stored Spans, or of SpanCoreFields. Sync or async: the
 * runner always awaits.
 */
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base";
import type { Tracer } from "../tracer/base.ts";
import { getLogger } from "../platform/log.ts";
import type { MaybePromise } from "../store/storage.ts";
import type { AttemptedRollout, NamedResources, Span, SpanCoreFields } from "../types/index.ts";
import { NotImplementedError, RuntimeError } from "./errors.ts";

const log = getLogger("agentlightning.litagent");

export type RolloutRawResult = void | null | undefined | number | boolean | ReadableSpan[] | Span[] | SpanCoreFields[];

/** What an agent needs from its trainer / runner: only their tracer. */
export interface HasTracer {
  readonly tracer?: Tracer | null;
}

export class LitAgent<T = unknown> {
  readonly trainedAgents: string | null;
  protected _trainer: HasTracer | null = null;
  protected _runner: HasTracer | null = null;

  constructor(options: { trainedAgents?: string | null } = {}) {
    this.trainedAgents = options.trainedAgents ?? null;
    if (this.trainedAgents !== null) log.warn("`trainedAgents` is deprecated and has no effect; use the adapter's agentMatch instead");
  }

  setTrainer(trainer: HasTracer | null): void {
    this._trainer = trainer;
  }
  getTrainer(): HasTracer {
    if (this._trainer === null) throw new RuntimeError("Trainer has not been set for this agent.");
    return this._trainer;
  }
  get trainer(): HasTracer {
    return this.getTrainer();
  }

  setRunner(runner: HasTracer | null): void {
    this._runner = runner;
  }
  getRunner(): HasTracer {
    if (this._runner === null) throw new RuntimeError("Runner has not been set for this agent.");
    return this._runner;
  }
  get runner(): HasTracer {
    return this.getRunner();
  }

  /** The runner's tracer, else the trainer's. */
  getTracer(): Tracer {
    const fromRunner = this.getRunner().tracer;
    if (fromRunner) return fromRunner;
    const fromTrainer = this._trainer?.tracer;
    if (fromTrainer) return fromTrainer;
    throw new RuntimeError("Neither the runner nor the trainer has a tracer.");
  }
  get tracer(): Tracer {
    return this.getTracer();
  }

  /** True when the subclass overrides one of the *Async methods (API parity; the runner awaits anyway). */
  isAsync(): boolean {
    const p = LitAgent.prototype;
    return (
      this.trainingRolloutAsync !== p.trainingRolloutAsync ||
      this.validationRolloutAsync !== p.validationRolloutAsync ||
      this.rolloutAsync !== p.rolloutAsync
    );
  }

  rollout(_task: T, _resources: NamedResources, _rollout: AttemptedRollout): MaybePromise<RolloutRawResult> {
    throw new NotImplementedError("Agents must implement the `rollout` method.");
  }

  rolloutAsync(_task: T, _resources: NamedResources, _rollout: AttemptedRollout): Promise<RolloutRawResult> {
    throw new NotImplementedError("Agents must implement the `rolloutAsync` method.");
  }

  trainingRollout(task: T, resources: NamedResources, rollout: AttemptedRollout): MaybePromise<RolloutRawResult> {
    return this.rollout(task, resources, rollout);
  }

  /** Delegates to `rollout`, not to `trainingRollout` (as upstream). */
  validationRollout(task: T, resources: NamedResources, rollout: AttemptedRollout): MaybePromise<RolloutRawResult> {
    return this.rollout(task, resources, rollout);
  }

  async trainingRolloutAsync(task: T, resources: NamedResources, rollout: AttemptedRollout): Promise<RolloutRawResult> {
    return await this.rolloutAsync(task, resources, rollout);
  }

  async validationRolloutAsync(task: T, resources: NamedResources, rollout: AttemptedRollout): Promise<RolloutRawResult> {
    return await this.rolloutAsync(task, resources, rollout);
  }

  /** Calls the method the runner would: training iff mode is "train", the async family iff isAsync(). */
  invoke(task: T, resources: NamedResources, rollout: AttemptedRollout): MaybePromise<RolloutRawResult> {
    const train = rollout.mode === "train";
    if (this.isAsync())
      return train ? this.trainingRolloutAsync(task, resources, rollout) : this.validationRolloutAsync(task, resources, rollout);
    return train ? this.trainingRollout(task, resources, rollout) : this.validationRollout(task, resources, rollout);
  }
}

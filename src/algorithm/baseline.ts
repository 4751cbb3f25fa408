/**
 * `Baseline` (docs/training.md#algorithms): enqueues every sample (train then val) while keeping the queue short,
 * waits for each rollout and logs what it produced: attempts, spans and the adapter's output. No
 * learning happens; it is the algorithm for developing and debugging agents (`Trainer.dev`).
 */
import { errorLine, getLogger } from "../platform/log.ts";
import type { Rollout, RolloutConfigInput, RolloutMode, RolloutStatus, Span } from "../types/index.ts";
import { ValidationError } from "../types/index.ts";
import { FastAlgorithm, withLlmProxy, type Dataset } from "./base.ts";

const log = getLogger("agentlightning.algorithm.fast");

export type SpanVerbosity = "keys" | "key_values" | "none";

export interface BaselineOptions {
  nEpochs?: number;
  /** Must be in (0, 1); kept for API parity, otherwise unused (as upstream). */
  trainSplit?: number;
  /** Seconds between queue-length checks and between status checks of a rollout (default 5). */
  pollingInterval?: number;
  /** Enqueue only while at most this many rollouts wait in the queue (default 4). */
  maxQueueLength?: number;
  spanVerbosity?: SpanVerbosity;
  /** TS extension: the config of every enqueued rollout (timeouts, retries). */
  rolloutConfig?: RolloutConfigInput | null;
}

const FINISHED: readonly RolloutStatus[] = ["succeeded", "failed", "cancelled"];
const iso = (t: number | null): string => (t === null ? "unknown" : new Date(t * 1000).toISOString());

export class Baseline extends FastAlgorithm {
  static readonly acceptedOptions = [
    "nEpochs",
    "trainSplit",
    "pollingInterval",
    "maxQueueLength",
    "spanVerbosity",
    "rolloutConfig",
  ] as const;
  readonly nEpochs: number;
  readonly trainSplit: number;
  readonly pollingInterval: number;
  readonly maxQueueLength: number;
  readonly spanVerbosity: SpanVerbosity;
  readonly rolloutConfig: RolloutConfigInput | null;
  /** Final status of every harvested rollout, in enqueue order (for callers that want a summary). */
  readonly finished: Rollout[] = [];

  constructor(options: BaselineOptions = {}) {
    super();
    this.nEpochs = options.nEpochs ?? 1;
    this.trainSplit = options.trainSplit ?? 0.5;
    this.pollingInterval = options.pollingInterval ?? 5.0;
    this.maxQueueLength = options.maxQueueLength ?? 4;
    this.spanVerbosity = options.spanVerbosity ?? "keys";
    this.rolloutConfig = options.rolloutConfig ?? null;
    if (!(this.trainSplit > 0 && this.trainSplit < 1))
      throw new ValidationError("trainSplit must be between 0 and 1 (exclusive)", ["trainSplit"]);
    if (!["keys", "key_values", "none"].includes(this.spanVerbosity))
      throw new ValidationError("spanVerbosity must be keys, key_values or none", ["spanVerbosity"]);
  }

  async run(trainDataset?: Dataset<unknown> | null, valDataset?: Dataset<unknown> | null): Promise<void> {
    await withLlmProxy(this, () => this.runWithStore(trainDataset ?? null, valDataset ?? null));
  }

  private async runWithStore(train: Dataset<unknown> | null, val: Dataset<unknown> | null): Promise<void> {
    const store = this.getStore();
    const nt = train?.length ?? 0;
    const nv = val?.length ?? 0;
    if (nt + nv === 0) {
      log.error("Baseline: both the train and the validation datasets are empty or missing; nothing to do");
      return;
    }
    const initial = this.getInitialResources();
    let resourcesId: string | null = null;
    if (initial) resourcesId = (await store.updateResources("default", initial)).resources_id;
    else log.warn("Baseline: no initial resources; rollouts will use the latest resources in the store");

    for (let epoch = 0; epoch < this.nEpochs; epoch++) {
      const harvests: Promise<void>[] = [];
      const unfinished = new Set<Promise<void>>();
      for (let i = 0; i < nt + nv; i++) {
        const input = i < nt ? train![i] : val![i - nt];
        const mode: RolloutMode = i < nt ? "train" : "val";
        for (;;) {
          const waiting = (await store.queryRollouts({ status_in: ["queuing", "requeuing"], limit: 0 })).total;
          if (waiting <= this.maxQueueLength) {
            const r = await store.enqueueRollout(input, { mode, resources_id: resourcesId, config: this.rolloutConfig });
            const harvest = this.harvest(r);
            harvests.push(harvest);
            unfinished.add(harvest);
            const done = () => void unfinished.delete(harvest);
            harvest.then(done, done);
            break;
          }
          // The queue is full: a rollout that finishes frees its runner for the next one, so wait for
          // the first to finish (or the polling interval, if none does).
          await firstSettled([...unfinished], this.pollingInterval);
        }
      }
      await Promise.all(harvests);
    }
  }

  private async harvest(rollout: Rollout): Promise<void> {
    const store = this.getStore();
    const rid = rollout.rollout_id;
    let status = rollout.status;
    let current: Rollout = rollout;
    while (!FINISHED.includes(status)) {
      // Waiting on the store wakes up as soon as the rollout finishes; the timeout paces status logs.
      await store.waitForRollouts({ rollout_ids: [rid], timeout: this.pollingInterval });
      const fresh = await store.getRolloutById(rid);
      if (fresh === null) throw new ValidationError(`Rollout ${rid} disappeared from the store`, ["rollout_id"]);
      if (fresh.status !== status) log.info(`[Rollout ${rid}] Status changed from ${status} to ${fresh.status}`);
      status = fresh.status;
      current = fresh;
    }
    this.finished.push(current);
    const secs = (current.end_time ?? current.start_time) - current.start_time;
    log.info(`[Rollout ${rid}] Finished with status ${status} in ${secs.toFixed(2)} seconds.`);
    const attempts = (await store.queryAttempts(rid)).items;
    const spans = (await store.querySpans(rid)).items;
    for (const a of attempts) {
      log.info(`[Rollout ${rid} | Attempt ${a.sequence_id}] ID: ${a.attempt_id}. Status: ${a.status}. Worker: ${a.worker_id}`);
      if (this.spanVerbosity === "none") continue;
      for (const s of spans.filter((x) => x.attempt_id === a.attempt_id)) log.info(this.describeSpan(rid, s));
    }
    if (this.hasAdapter()) {
      const latest = (await store.querySpans(rid, { attempt_id: "latest" })).items;
      // A rollout that failed before tracing anything: its runner has logged why; nothing to adapt.
      if (latest.length === 0) return log.info(`[Rollout ${rid}] No spans to adapt`);
      let adapted: unknown;
      try {
        adapted = (this.getAdapter() as { adapt(spans: Span[]): unknown }).adapt(latest);
      } catch (err) {
        // One line; the stack at DEBUG.
        log.warn(`[Rollout ${rid}] The adapter failed on its spans: ${errorLine(err)}`);
        log.debug(`[Rollout ${rid}] The adapter failed on its spans`, err);
        return;
      }
      log.info(`[Rollout ${rid}] Adapted data: ${JSON.stringify(adapted)}`);
    } else log.warn(`[Rollout ${rid}] No adapter set; skipping adaptation`);
  }

  private describeSpan(rid: string, s: Span): string {
    const elapsed = s.start_time !== null && s.end_time !== null ? (s.end_time - s.start_time).toFixed(2) : "unknown";
    const head = `[Rollout ${rid} | Attempt ${s.attempt_id} | Span ${s.span_id}] #${s.sequence_id} (${s.name}) From ${iso(s.start_time)}, to ${iso(s.end_time)}, ${elapsed} seconds. `;
    return this.spanVerbosity === "key_values"
      ? `${head}Attributes: ${JSON.stringify(s.attributes)}`
      : `${head}Attribute keys: ${JSON.stringify(Object.keys(s.attributes))}`;
  }
}

/** Resolves once one of `promises` settles or `seconds` pass, whichever comes first; leaves no timer behind. */
function firstSettled(promises: readonly Promise<unknown>[], seconds: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, seconds * 1000);
    const settle = () => {
      clearTimeout(timer);
      resolve();
    };
    for (const p of promises) p.then(settle, settle);
  });
}

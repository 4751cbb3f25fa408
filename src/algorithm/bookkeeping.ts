/**
 * A bookkeeping rollout: one rollout that no runner executes, under which an algorithm records its
 * progress as spans (GRPO's `grpo.step`, SFT's `sft.step`, APO's `apo.candidate`), so the store's readers (the
 * dashboard, `agl` queries) see the training history next to the rollouts it drove.
 */
import type { MetricsBackend } from "../metrics/backend.ts";
import { PrometheusMetricsBackend } from "../metrics/prometheus.ts";
import type { LightningStore } from "../store/base.ts";
import { spanFromAttributes, type Attributes } from "../types/span.ts";
import { ProgressGauges } from "./progress-gauges.ts";

export class BookkeepingRollout {
  private constructor(
    private readonly store: LightningStore,
    readonly rolloutId: string,
    readonly attemptId: string,
    private readonly gauges: ProgressGauges | null,
  ) {}

  /**
   * Starts the rollout (status `running`) with `input` describing the run and `metadata.kind` naming
   * it. No runner heartbeats it, so it has no unresponsive limit: a long step must not fail it.
   * `gauges`: where each span's numbers also go as gauges (progress-gauges.ts) [this process's Prometheus
   * registry]; null: nowhere (`TrainingMetrics`, whose numbers are already metrics).
   */
  static async start(
    store: LightningStore,
    input: unknown,
    kind: string,
    { gauges = new PrometheusMetricsBackend() }: { gauges?: MetricsBackend | null } = {},
  ): Promise<BookkeepingRollout> {
    const started = await store.startRollout(input, { metadata: { kind }, config: { unresponsive_seconds: null } });
    return new BookkeepingRollout(
      store,
      started.rollout_id,
      started.attempt.attempt_id,
      gauges ? new ProgressGauges(gauges, started.rollout_id) : null,
    );
  }

  /** Adds one instant span `name` with `attributes` (and sets its gauges). */
  async record(name: string, attributes: Attributes): Promise<void> {
    const now = Date.now() / 1000;
    await this.store.addSpan(
      spanFromAttributes({
        rollout_id: this.rolloutId,
        attempt_id: this.attemptId,
        sequence_id: await this.store.getNextSpanSequenceId(this.rolloutId, this.attemptId),
        name,
        attributes,
        start_time: now,
        end_time: now,
      }),
    );
    this.gauges?.set(name, attributes);
  }

  async finish(status: "succeeded" | "failed"): Promise<void> {
    await this.store.updateRollout(this.rolloutId, { status });
  }

  /** Runs `fn`, then marks the rollout succeeded, or failed when `fn` throws (the error propagates). */
  async around<R>(fn: () => Promise<R>): Promise<R> {
    let result: R;
    try {
      result = await fn();
    } catch (e) {
      await this.finish("failed");
      throw e;
    }
    await this.finish("succeeded");
    return result;
  }
}

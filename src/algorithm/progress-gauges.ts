/**
 * The built-in algorithms' progress as Prometheus gauges (docs/metrics.md#built-in-algorithms-in-the-exposition):
 * every number (and boolean, as 0/1) a bookkeeping rollout records on a span becomes the gauge
 * `<span name>_<attribute>` (`grpo_step_reward`), labelled with the run (the rollout's id), so what the
 * dashboard's Training page charts is also on `/metrics`, and in a store server's exposition when the
 * algorithm reaches it through `LightningStoreClient`. (`agl_` names are the store server's own.)
 */
import type { MetricsBackend } from "../metrics/backend.ts";
import { errorLine, getLogger } from "../platform/log.ts";
import type { Attributes } from "../types/span.ts";

const log = getLogger("agentlightning.algorithm.metrics");

const PROMETHEUS_UNSAFE = /[^a-zA-Z0-9_]+/g;

/** `grpo.step` + `grpo.reward` -> `grpo_step_reward`; `critic/score/mean` -> `grpo_step_critic_score_mean`. */
export function gaugeName(spanName: string, attribute: string): string {
  const family = spanName.split(".")[0];
  const own = attribute.startsWith(`${family}.`) ? attribute.slice(family.length + 1) : attribute;
  const part = (s: string) => s.replace(PROMETHEUS_UNSAFE, "_").replace(/^_+|_+$/g, "");
  return `${part(spanName)}_${part(own)}`;
}

export class ProgressGauges {
  /** Gauge names already registered, and the attribute each came from (null: the name could not be registered). */
  private readonly registered = new Map<string, string | null>();

  constructor(
    private readonly backend: MetricsBackend,
    /** The `run` label: the bookkeeping rollout's id. */
    private readonly run: string,
  ) {}

  /** Sets one gauge per numeric or boolean attribute of a recorded span. */
  set(spanName: string, attributes: Attributes): void {
    for (const [key, value] of Object.entries(attributes)) {
      if (typeof value !== "number" && typeof value !== "boolean") continue;
      const name = gaugeName(spanName, key);
      if (!this.registered.has(name)) {
        try {
          this.backend.registerGauge(name, ["run"], { help: `the "${key}" attribute of the last ${spanName} span of the run` });
          this.registered.set(name, key);
        } catch (e) {
          // a name the process already uses otherwise (a metric of the user's): the run goes on without that gauge
          log.warning(`${spanName} "${key}" is not exported as the gauge ${name}: ${errorLine(e)}`);
          this.registered.set(name, null);
        }
      }
      // two attributes that read alike keep the first one's gauge (the second would overwrite it each step)
      if (this.registered.get(name) !== key) continue;
      this.backend.setGauge(name, typeof value === "boolean" ? Number(value) : value, { run: this.run });
    }
  }
}

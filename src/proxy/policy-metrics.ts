/**
 * The policy server's own metrics (docs/serving.md#metrics), what vLLM's `/metrics` tells of its OpenAI
 * server: requests by endpoint and status with their latency, prompt and generated tokens, the requests
 * being answered, and the policy version served. The exposition (`GET /metrics`) is these followed by the
 * process's registry: what algorithms and agents in this process write (`agl train`'s progress gauges).
 */
import { LATENCY_BUCKETS, MetricsRegistry, processMetrics } from "../metrics/registry.ts";

/** The label of the two completion routes. */
export type PolicyEndpoint = "chat" | "completions";

export class PolicyMetrics {
  /** A registry per app: two servers in one process count apart. */
  private readonly own = new MetricsRegistry();
  private readonly requests = this.own.registerCounter("agl.policy.requests", ["endpoint", "status"], {
    help: "Completion requests answered, by endpoint (chat, completions) and HTTP status.",
  });
  private readonly latency = this.own.registerHistogram("agl.policy.latency", ["endpoint", "status"], LATENCY_BUCKETS, {
    help: "Seconds from a completion request's arrival to its answer, by endpoint and HTTP status.",
  });
  private readonly promptTokens = this.own.registerCounter("agl.policy.prompt_tokens", ["endpoint"], {
    help: "Prompt tokens of the requests answered (once per request, whatever its n).",
  });
  private readonly generationTokens = this.own.registerCounter("agl.policy.generation_tokens", ["endpoint"], {
    help: "Tokens generated, over every choice (stop tokens included).",
  });
  private readonly running = this.own.registerGauge("agl.policy.requests_running", [], {
    help: "Completion requests being answered now.",
  });
  private readonly version = this.own.registerGauge("agl.policy.version", [], {
    help: "The policy version served (the training step whose weights answer).",
  });
  private inFlight = 0;

  constructor(
    private readonly policyVersion: () => number,
    private readonly shared: MetricsRegistry = processMetrics,
  ) {
    this.running.set(undefined, 0);
  }

  /** A request starts; the returned function ends it with its HTTP status. */
  start(endpoint: PolicyEndpoint, now: () => number): (status: number) => void {
    const started = now();
    this.running.set(undefined, ++this.inFlight);
    return (status) => {
      this.running.set(undefined, --this.inFlight);
      const labels = { endpoint, status: String(status) };
      this.requests.inc(labels);
      this.latency.observe(labels, Math.max(0, now() - started));
    };
  }

  /** The tokens of one answered request. */
  tokens(endpoint: PolicyEndpoint, prompt: number, generated: number): void {
    this.promptTokens.inc({ endpoint }, prompt);
    this.generationTokens.inc({ endpoint }, generated);
  }

  render(): string {
    this.version.set(undefined, this.policyVersion());
    return this.own.render() + this.shared.render();
  }
}

/**
 * `LightningSpanProcessor`: the one OpenTelemetry span processor that routes spans into rollouts.
 * When a span starts, it reads the rollout scope from the parent context and claims the span's
 * position in that scope (its sequence number); when the span ends, the scope gets it. Spans started
 * outside any rollout scope are ignored, so unrelated tracing in the same process stays out of the
 * store.
 */
import type { Context } from "@opentelemetry/api";
import { trace, TraceFlags } from "@opentelemetry/api";
import { BasicTracerProvider, type ReadableSpan, type Span as SdkSpan, type SpanProcessor } from "@opentelemetry/sdk-trace-base";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { installContextManager, ROLLOUT_SCOPE_KEY } from "./context.ts";
import { getLogger } from "../platform/log.ts";
import type { RolloutScope } from "./scope.ts";

const log = getLogger("agentlightning.tracer");

interface Tag {
  scope: RolloutScope;
  index: number;
}

export class LightningSpanProcessor implements SpanProcessor {
  private readonly tags = new WeakMap<object, Tag>();

  onStart(span: SdkSpan, parentContext: Context): void {
    const scope = parentContext.getValue(ROLLOUT_SCOPE_KEY) as RolloutScope | undefined;
    if (scope === undefined) return;
    this.tags.set(span, { scope, index: scope.claimIndex() });
  }

  onEnd(span: ReadableSpan): void {
    const tag = this.tags.get(span);
    if (tag === undefined) return;
    this.tags.delete(span);
    if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    tag.scope.add(span, tag.index);
  }

  async forceFlush(): Promise<void> {}
  async shutdown(): Promise<void> {}
}

let shared: { processor: LightningSpanProcessor; provider: BasicTracerProvider } | null = null;

/**
 * The process-wide provider with the Lightning processor, registered as the global tracer provider so
 * that any OpenTelemetry-instrumented library's spans inside a rollout reach the store. If another
 * global provider was registered first, ours still serves the emitters, and the caller should add
 * `lightningSpanProcessor()` to theirs.
 */
export function lightningTracing(): { processor: LightningSpanProcessor; provider: BasicTracerProvider } {
  if (shared !== null) return shared;
  installContextManager();
  const processor = new LightningSpanProcessor();
  // A one-key resource: the SDK default (unknown_service:<path>, telemetry.sdk.*) would be copied into
  // every stored span, about a fifth of a small span's bytes, and says nothing a trace reader needs.
  const provider = new BasicTracerProvider({
    spanProcessors: [processor],
    resource: resourceFromAttributes({ "service.name": "agentlightning" }),
  });
  if (!trace.setGlobalTracerProvider(provider)) {
    log.warn(
      "A global OpenTelemetry tracer provider is already registered; add lightningSpanProcessor() to it so library spans reach the store",
    );
  }
  shared = { processor, provider };
  return shared;
}

export const lightningSpanProcessor = (): LightningSpanProcessor => lightningTracing().processor;

/**
 * The explicit trace context (docs/browser.md#tracing-without-async-context): `Tracer.inTrace` and
 * `traceContextValue` on Node, and the synchronous context manager browsers get.
 */
import { context, createContextKey, ROOT_CONTEXT } from "@opentelemetry/api";
import { describe, expect, it } from "vitest";
import { StackContextManager } from "../../src/platform/stack-context.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { emitReward, NoActiveTracerError, OtelTracer } from "../../src/tracer/index.ts";
import { ValidationError } from "../../src/types/index.ts";

describe("Tracer.inTrace", () => {
  it("runs code that lost the implicit context in the one trace the tracer has open", async () => {
    const store = new InMemoryLightningStore();
    const tracer = new OtelTracer();
    tracer.initWorker(0, store);
    const a = await store.startRollout(1);
    let resume!: () => void;
    const paused = new Promise<void>((r) => (resume = r));
    const traced = tracer.traceContext({ rolloutId: a.rollout_id, attemptId: a.attempt.attempt_id }, () => paused);
    // outside the trace's async context: only the explicit way reaches it
    expect(() => emitReward(1)).toThrow(NoActiveTracerError);
    tracer.inTrace(() => emitReward(0.5));
    resume();
    await traced;
    const spans = (await store.querySpans(a.rollout_id)).items;
    expect(spans.map((s) => s.attributes["agentlightning.reward.0.value"])).toEqual([0.5]);
    expect(() => tracer.inTrace(() => 1)).toThrow(NoActiveTracerError);
  });

  it("refuses to guess between two traces the tracer has open at once, and the implicit context still tells them apart", async () => {
    const store = new InMemoryLightningStore();
    const tracer = new OtelTracer();
    tracer.initWorker(0, store);
    const [a, b] = [await store.startRollout(1), await store.startRollout(2)];
    let resume!: () => void;
    const paused = new Promise<void>((r) => (resume = r));
    const open = (r: typeof a) =>
      tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, async () => {
        await paused;
        tracer.inTrace(() => emitReward(r.input as number));
      });
    const both = Promise.all([open(a), open(b)]);
    expect(() => tracer.inTrace(() => 1)).toThrow(ValidationError);
    resume();
    await both;
    for (const r of [a, b])
      expect((await store.querySpans(r.rollout_id)).items.map((s) => s.attributes["agentlightning.reward.0.value"])).toEqual([r.input]);
  });
});

describe("StackContextManager (browsers)", () => {
  const key = createContextKey("k");
  it("carries a context through synchronous calls only, and into bound functions", async () => {
    const m = new StackContextManager().enable();
    const ctx = ROOT_CONTEXT.setValue(key, 1);
    const seen: unknown[] = [];
    const later = await m.with(ctx, async () => {
      seen.push(m.active().getValue(key));
      const bound = m.bind(m.active(), () => m.active().getValue(key));
      await Promise.resolve();
      seen.push(m.active().getValue(key));
      return bound;
    });
    seen.push(m.active().getValue(key), later());
    expect(seen).toEqual([1, undefined, undefined, 1]);
    // nested: the inner context until it returns, then the outer one again, also when it throws
    m.with(ctx, () => {
      expect(() =>
        m.with(ctx.setValue(key, 2), () => {
          expect(m.active().getValue(key)).toBe(2);
          throw new Error("x");
        }),
      ).toThrow("x");
      expect(m.active().getValue(key)).toBe(1);
    });
    expect(m.active()).toBe(ROOT_CONTEXT);
    // the global API on Node keeps AsyncLocalStorage's manager (installed by the tracer)
    expect(context.active()).toBeDefined();
  });
});

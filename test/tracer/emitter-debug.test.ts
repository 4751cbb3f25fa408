/**
 * `AGL_EMITTER_DEBUG` (upstream's `LightningEnvVar`): on, the emitters log each span they emit at debug
 * level through the `agentlightning.emitter` logger; off, they never do; unset, they do when debug
 * records go anywhere (upstream: when its logger's level is DEBUG). On while no one listens at debug,
 * a warning says that nothing will show. A value that is not a boolean is a ValidationError naming it.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { captureLogs, setLogLevel } from "../../src/platform/log.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { OtelTracer, emitAnnotation, emitException, emitMessage, emitObject, emitReward } from "../../src/tracer/index.ts";
import { ValidationError } from "../../src/types/index.ts";

const local = { propagate: false } as const;

/** Runs every emitter once, locally; returns the debug records of the emitter logger. */
function emitAll(): string[] {
  const logs = captureLogs();
  try {
    emitReward(0.5, local);
    emitAnnotation({ tag: "x" }, local);
    emitMessage("hello there", local);
    emitObject({ k: [1, 2] }, local);
    emitException(new RangeError("too far"), local);
  } finally {
    logs.stop();
  }
  return logs.records.filter((r) => r.logger === "agentlightning.emitter" && r.level === "debug").map((r) => r.message);
}

describe("AGL_EMITTER_DEBUG", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
    setLogLevel("warning");
  });

  it("on: each emitter logs the span it emits, with its attributes and where it goes", async () => {
    vi.stubEnv("AGL_EMITTER_DEBUG", "true");
    expect(emitAll()).toEqual([
      'Emitting agentlightning.annotation span locally (propagate: false): {"agentlightning.reward.0.name":"primary","agentlightning.reward.0.value":0.5}',
      'Emitting agentlightning.annotation span locally (propagate: false): {"tag":"x"}',
      'Emitting agentlightning.message span locally (propagate: false): {"agentlightning.message.body":"hello there"}',
      'Emitting agentlightning.object span locally (propagate: false): {"agentlightning.object.type":"dict","agentlightning.object.json":"{\\"k\\":[1,2]}"}',
      expect.stringMatching(
        /^Emitting agentlightning\.exception span locally \(propagate: false\): \{"exception\.type":"RangeError","exception\.message":"too far",/,
      ),
    ]);
    // Through the active tracer: its name, and the rollout it writes to.
    const store = new InMemoryLightningStore();
    const tracer = new OtelTracer();
    tracer.initWorker(0, store);
    const r = await store.startRollout({});
    const logs = captureLogs();
    try {
      await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, () => emitReward(1));
    } finally {
      logs.stop();
    }
    expect(logs.text()).toContain(
      `debug Emitting agentlightning.annotation span to OtelTracer (rollout ${r.rollout_id}, attempt ${r.attempt.attempt_id}): {"agentlightning.reward.0.name":"primary","agentlightning.reward.0.value":1}`,
    );
    await store.close();
  });

  it("a long value is cut in the log line, never in the span", () => {
    vi.stubEnv("AGL_EMITTER_DEBUG", "1");
    const logs = captureLogs();
    try {
      const span = emitMessage("y".repeat(5_000), local);
      expect(span.attributes["agentlightning.message.body"]).toHaveLength(5_000);
    } finally {
      logs.stop();
    }
    const line = logs.records.find((r) => r.logger === "agentlightning.emitter")!.message;
    expect(line.length).toBeLessThan(1_200);
    expect(line).toMatch(/… \(5\d{3} characters\)$/);
  });

  it("off: nothing, even when debug records are collected", () => {
    vi.stubEnv("AGL_EMITTER_DEBUG", "off");
    setLogLevel("debug");
    expect(emitAll()).toEqual([]);
  });

  it("unset: on when debug records go somewhere, as upstream follows its logger's level", () => {
    vi.stubEnv("AGL_EMITTER_DEBUG", undefined);
    expect(emitAll()).toHaveLength(5);
    // Nothing listens at debug: no line is built and nothing reaches the console.
    const printed = vi.spyOn(console, "log");
    emitReward(1, local);
    expect(printed).not.toHaveBeenCalled();
  });

  it("on while nothing listens at debug: one warning that nothing will show", () => {
    vi.stubEnv("AGL_EMITTER_DEBUG", "yes");
    const warned = vi.spyOn(console, "warn").mockImplementation(() => {});
    emitReward(1, local);
    emitReward(2, local);
    const lines = warned.mock.calls.map((c) => String(c[0])).filter((l) => l.includes("AGL_EMITTER_DEBUG"));
    expect(lines).toEqual([expect.stringMatching(/AGL_EMITTER_DEBUG is on but debug logging is not: nothing .* AGL_LOG_LEVEL=debug/)]);
  });

  it("a value that is not a boolean is a ValidationError naming the variable", () => {
    vi.stubEnv("AGL_EMITTER_DEBUG", "maybe");
    expect(() => emitReward(1, local)).toThrow(ValidationError);
    expect(() => emitReward(1, local)).toThrow(/AGL_EMITTER_DEBUG must be one of/);
  });
});

import { describe, expect, it } from "vitest";
import {
  DummyTracer,
  NoActiveTracerError,
  emitAnnotation,
  emitException,
  emitMessage,
  emitObject,
  emitReward,
  getActiveTracer,
  getMessageValue,
  getObjectValue,
  operation,
} from "../../src/tracer/index.ts";
import { getRewardValue } from "../../src/adapter/index.ts";
import { spanFromAttributes, ValidationError } from "../../src/types/index.ts";

const local = { propagate: false } as const;
const asSpan = (core: { name: string; attributes: Record<string, unknown> }) =>
  spanFromAttributes({ name: core.name, attributes: core.attributes as never });

describe("emitReward", () => {
  it("encodes a scalar as the 'primary' dimension of an annotation span", () => {
    const core = emitReward(0.75, local);
    expect(core.name).toBe("agentlightning.annotation");
    expect(core.status.status_code).toBe("OK");
    expect(core.attributes).toEqual({ "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.75 });
    expect(getRewardValue(asSpan(core))).toBe(0.75);
    expect(emitReward(true, local).attributes["agentlightning.reward.0.value"]).toBe(1);
  });

  it("puts the primary key first for named dimensions and checks it", () => {
    const core = emitReward({ length: 0.2, accuracy: 1 }, { ...local, primaryKey: "accuracy", attributes: { run: "a" } });
    expect(core.attributes).toEqual({
      "agentlightning.reward.0.name": "accuracy",
      "agentlightning.reward.0.value": 1,
      "agentlightning.reward.1.name": "length",
      "agentlightning.reward.1.value": 0.2,
      run: "a",
    });
    expect(getRewardValue(asSpan(core))).toBe(1);
    expect(() => emitReward({ a: 1 }, local)).toThrow(ValidationError);
    expect(() => emitReward({ a: 1 }, { ...local, primaryKey: "b" })).toThrow(ValidationError);
    expect(() => emitReward({ a: "x" as unknown as number }, { ...local, primaryKey: "a" })).toThrow(ValidationError);
    expect(() => emitReward("1" as unknown as number, local)).toThrow(TypeError);
  });

  it("needs an active tracer unless propagate is false", () => {
    expect(getActiveTracer()).toBeNull();
    expect(() => emitReward(1)).toThrow(NoActiveTracerError);
    expect(() => emitReward(1)).toThrow(/No active tracer/);
  });
});

describe("other emitters", () => {
  it("flattens annotations and rejects what cannot be an attribute", () => {
    expect(emitAnnotation({ meta: { tag: "foo" }, score: 1.5 }, local).attributes).toEqual({ "meta.tag": "foo", score: 1.5 });
    expect(() => emitAnnotation({ bad: null }, local)).toThrow(ValidationError);
  });

  it("records messages with extra attributes", () => {
    const core = emitMessage("hello", { ...local, attributes: { meta: { tag: "foo" }, labels: ["a", "b"] } });
    expect(core.name).toBe("agentlightning.message");
    expect(core.attributes).toEqual({ "agentlightning.message.body": "hello", "meta.tag": "foo", labels: ["a", "b"] });
    expect(getMessageValue(asSpan(core))).toBe("hello");
    expect(() => emitMessage(3 as unknown as string, local)).toThrow(TypeError);
  });

  it("encodes objects as Python-style literals or JSON and decodes them back", () => {
    const cases: [unknown, string, string][] = [
      ["s", "str", "s"],
      [3, "int", "3"],
      [3.5, "float", "3.5"],
      [true, "bool", "True"],
    ];
    for (const [v, type, literal] of cases) {
      const core = emitObject(v, local);
      expect(core.attributes["agentlightning.object.type"]).toBe(type);
      expect(core.attributes["agentlightning.object.literal"]).toBe(literal);
      expect(getObjectValue(asSpan(core))).toEqual(v);
    }
    const bytes = emitObject(new Uint8Array([1, 2, 255]), local);
    expect(bytes.attributes["agentlightning.object.type"]).toBe("bytes");
    expect(getObjectValue(asSpan(bytes))).toEqual(new Uint8Array([1, 2, 255]));
    const dict = emitObject({ a: [1, 2] }, local);
    expect(dict.attributes["agentlightning.object.type"]).toBe("dict");
    expect(getObjectValue(asSpan(dict))).toEqual({ a: [1, 2] });
    expect(emitObject(null, local).attributes["agentlightning.object.type"]).toBe("NoneType");
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => emitObject(cyclic, local)).toThrow(/JSON serializable/);
  });

  it("records exceptions with OK status", () => {
    const core = emitException(new RangeError("too far"), { ...local, attributes: { step: 2 } });
    expect(core.name).toBe("agentlightning.exception");
    expect(core.status.status_code).toBe("OK");
    expect(core.attributes["exception.type"]).toBe("RangeError");
    expect(core.attributes.step).toBe(2);
    expect(() => emitException("nope" as unknown as Error, local)).toThrow(TypeError);
  });
});

describe("operation (local)", () => {
  it("the scoped form records inputs and output, and its span only after exit", async () => {
    let handle: { span(): unknown; setOutput(v: unknown): void } | null = null;
    const result = await operation({ propagate: false, value: 7 }, async (op) => {
      handle = op;
      op.setInput(1, { x: "y" });
      op.setNamedInput({ mode: "fast" });
      expect(() => op.span()).toThrow(/only after the block exits/);
      op.setOutput({ ok: true });
      return 42;
    });
    expect(result).toBe(42);
    const span = handle!.span() as {
      name: string;
      attributes: Record<string, unknown>;
      status: { status_code: string };
      start_time: number;
      end_time: number;
    };
    expect(span.name).toBe("agentlightning.operation");
    expect(span.attributes).toEqual({
      value: 7,
      "agentlightning.operation.input.args.0": 1,
      "agentlightning.operation.input.args.1.x": "y",
      "agentlightning.operation.input.mode": "fast",
      "agentlightning.operation.output.ok": true,
    });
    expect(span.status.status_code).toBe("OK");
    expect(span.end_time).toBeGreaterThanOrEqual(span.start_time);
    expect(() => handle!.setOutput(1)).toThrow(/inside the operation block/);
  });

  it("records the error and re-throws it", () => {
    let handle: { span(): { status: { status_code: string; description: string | null }; attributes: Record<string, unknown> } } | null =
      null;
    expect(() =>
      operation({ propagate: false }, (op) => {
        handle = op as never;
        throw new Error("kaput");
      }),
    ).toThrow("kaput");
    const span = handle!.span();
    expect(span.status).toEqual({ status_code: "ERROR", description: "kaput" });
    expect(span.attributes["exception.message"]).toBe("kaput");
  });

  it("rejects a positional name and a doubled name", () => {
    expect(() => operation("name" as never, () => 1)).toThrow(ValidationError);
    expect(() => operation({ propagate: false, name: "a", "agentlightning.operation.name": "b" }, () => 1)).toThrow(/specify both/);
  });

  it("DummyTracer keeps explicit timestamps", () => {
    const t = new DummyTracer();
    expect(t.createSpan("x", { timestamp: 12.5 })).toMatchObject({ start_time: 12.5, end_time: 12.5, status: { status_code: "OK" } });
  });
});

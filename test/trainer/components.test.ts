/**
 * Component specs (docs/trainer.md#components), environment variables (docs/trainer.md#environment-variables)
 * and strategy option rules (docs/trainer.md#execution-strategies).
 */
import { afterEach, describe, expect, it } from "vitest";
import { LitAgentRunner } from "../../src/runner/index.ts";
import { DummyTracer, OtelTracer, Tracer } from "../../src/tracer/index.ts";
import {
  ClientServerExecutionStrategy,
  SharedMemoryExecutionStrategy,
  Trainer,
  buildComponent,
  resolveBoolEnv,
  resolveIntEnv,
  resolveStrEnv,
} from "../../src/trainer/index.ts";
import { TraceToMessages, TracerTraceToTriplet } from "../../src/adapter/index.ts";
import type { Baseline } from "../../src/algorithm/index.ts";
import { ValidationError } from "../../src/types/index.ts";

const saved = { ...process.env };
afterEach(() => {
  for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
  Object.assign(process.env, saved);
});

describe("buildComponent", () => {
  const o = { expectedType: Tracer, specName: "tracer" };
  it("accepts an instance, a subclass, a factory, a registered name and a dict", () => {
    const t = new DummyTracer();
    expect(buildComponent(t, o)).toBe(t);
    expect(buildComponent(DummyTracer, o)).toBeInstanceOf(DummyTracer);
    expect(buildComponent(() => new DummyTracer(), o)).toBeInstanceOf(DummyTracer);
    expect(buildComponent("DummyTracer", o)).toBeInstanceOf(DummyTracer);
    expect(buildComponent("agentlightning.OtelTracer", o)).toBeInstanceOf(OtelTracer);
    expect(buildComponent({ type: "OtelTracer", max_batch_size: 7 }, o)).toBeInstanceOf(OtelTracer);
  });

  it("rejects wrong kinds with upstream's messages", () => {
    expect(() => buildComponent(null, o)).toThrow("tracer cannot be None.");
    expect(buildComponent(null, { ...o, allowNone: true })).toBeNull();
    expect(buildComponent(null, { ...o, defaultFactory: () => new DummyTracer() })).toBeInstanceOf(DummyTracer);
    class NotATracer {}
    expect(() => buildComponent(NotATracer as never, o)).toThrow(/Invalid tracer type/);
    expect(() => buildComponent((() => 42) as never, o)).toThrow(TypeError);
    expect(() => buildComponent((() => 42) as never, o)).toThrow(/not a Tracer subclass/);
    expect(() => buildComponent({ max_batch_size: 3 } as never, o)).toThrow("tracer dict must have a 'type' key with the class full name");
    expect(() => buildComponent("NoSuchThing", o)).toThrow(ValidationError);
    expect(() => buildComponent(12 as never, o)).toThrow(/Invalid tracer type/);
  });

  it("injects optional defaults only into constructors that declare them", () => {
    const withRunners = buildComponent("shm", {
      expectedType: SharedMemoryExecutionStrategy,
      specName: "strategy",
      optionalDefaults: { nRunners: 1, serverPort: 9 },
    });
    expect(withRunners.nRunners).toBe(1);
    expect("serverPort" in withRunners).toBe(false);
    const cs = buildComponent("cs", {
      expectedType: ClientServerExecutionStrategy,
      specName: "strategy",
      optionalDefaults: { nRunners: 3, serverPort: 9 },
    });
    expect([cs.nRunners, cs.serverPort]).toEqual([3, 9]);
    const explicit = buildComponent(
      { type: "cs", n_runners: 2 },
      { expectedType: ClientServerExecutionStrategy, specName: "strategy", optionalDefaults: { nRunners: 5 } },
    );
    expect(explicit.nRunners).toBe(2);
  });
});

describe("environment variables", () => {
  it("explicit value, then env, then fallback; strict parsing", () => {
    process.env.AGL_X = " Yes ";
    expect(resolveBoolEnv("AGL_X", null, false)).toBe(true);
    expect(resolveBoolEnv("AGL_X", false, true)).toBe(false);
    expect(resolveBoolEnv("AGL_UNSET_THING", undefined, true)).toBe(true);
    process.env.AGL_X = "maybe";
    expect(() => resolveBoolEnv("AGL_X", null, false)).toThrow(/AGL_X must be one of/);
    process.env.AGL_N = "12";
    expect(resolveIntEnv("AGL_N", null, 1)).toBe(12);
    process.env.AGL_N = "1.5";
    expect(() => resolveIntEnv("AGL_N", null, 1)).toThrow("AGL_N must be an integer, got '1.5'");
    process.env.AGL_S = "raw value";
    expect(resolveStrEnv("AGL_S", null, "x")).toBe("raw value");
  });

  it("the client-server strategy reads its role and address from the environment", () => {
    process.env.AGL_CURRENT_ROLE = "runner";
    process.env.AGL_SERVER_HOST = "10.0.0.2";
    process.env.AGL_SERVER_PORT = "5000";
    process.env.AGL_MANAGED_STORE = "0";
    const s = new ClientServerExecutionStrategy();
    expect([s.role, s.serverHost, s.serverPort, s.managedStore]).toEqual(["runner", "10.0.0.2", 5000, false]);
    expect(new ClientServerExecutionStrategy({ role: "algorithm", serverPort: 1 }).role).toBe("algorithm");
    process.env.AGL_CURRENT_ROLE = "boss";
    expect(() => new ClientServerExecutionStrategy()).toThrow(/role must be/);
  });

  it("runner children's niceness: 10 by default, from the option or AGL_RUNNER_NICENESS, 0 to 19 only", () => {
    const cs = (o: object = {}) => new ClientServerExecutionStrategy({ role: "both", ...o });
    const before = process.env.AGL_RUNNER_NICENESS;
    try {
      delete process.env.AGL_RUNNER_NICENESS;
      expect(cs().runnerNiceness).toBe(10);
      expect(cs({ runnerNiceness: 0 }).runnerNiceness).toBe(0);
      process.env.AGL_RUNNER_NICENESS = "4";
      expect(cs().runnerNiceness).toBe(4);
      expect(cs({ runnerNiceness: 19 }).runnerNiceness).toBe(19);
      for (const bad of [-1, 20, 2.5]) expect(() => cs({ runnerNiceness: bad })).toThrow(/runnerNiceness must be an integer from 0 to 19/);
      process.env.AGL_RUNNER_NICENESS = "low";
      expect(() => cs()).toThrow("AGL_RUNNER_NICENESS must be an integer, got 'low'");
    } finally {
      if (before === undefined) delete process.env.AGL_RUNNER_NICENESS;
      else process.env.AGL_RUNNER_NICENESS = before;
    }
  });
});

describe("strategy and trainer options", () => {
  it("enforces upstream's combinations", () => {
    expect(() => new SharedMemoryExecutionStrategy({ nRunners: 2 })).toThrow(/requires nRunners to be 1/);
    expect(() => new SharedMemoryExecutionStrategy({ mainThread: "both" as never })).toThrow(ValidationError);
    expect(() => new ClientServerExecutionStrategy({ mainProcess: "runner", nRunners: 2 })).toThrow(
      "main_process='runner' requires n_runners to be 1",
    );
    expect(() => new Trainer({ strategy: "shm", nRunners: 8 })).toThrow(/requires nRunners to be 1/);
    expect(new Trainer({ strategy: { type: "shm", main_thread: "algorithm" }, nRunners: 8 }).nRunners).toBe(8);
  });

  it("builds defaults and honours port and strategy counts", () => {
    const t = new Trainer();
    expect(t.tracer).toBeInstanceOf(OtelTracer);
    expect(t.adapter).toBeInstanceOf(TracerTraceToTriplet);
    expect(t.runner).toBeInstanceOf(LitAgentRunner);
    expect(t.strategy).toBeInstanceOf(SharedMemoryExecutionStrategy);
    expect(t.algorithm).toBeNull();
    const cs = new Trainer({ strategy: new ClientServerExecutionStrategy({ serverPort: 1, nRunners: 4 }), port: 4999, nRunners: 2 });
    expect((cs.strategy as ClientServerExecutionStrategy).serverPort).toBe(4999);
    expect(cs.nRunners).toBe(4);
    const named = new Trainer({
      adapter: "agentlightning.adapter.TraceToMessages",
      algorithm: { type: "Baseline", polling_interval: 0.5 },
      maxRollouts: 3,
    });
    expect(named.adapter).toBeInstanceOf(TraceToMessages);
    expect((named.algorithm as Baseline).pollingInterval).toBe(0.5);
    expect((named.runner as LitAgentRunner).maxRollouts).toBe(3);
  });
});

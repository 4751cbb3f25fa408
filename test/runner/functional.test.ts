/** LitAgent basics and function agents (docs/runner.md#writing-an-agent, docs/runner.md#function-agents). */
import { describe, expect, it } from "vitest";
import {
  FunctionalLitAgent,
  LitAgent,
  NotImplementedError,
  RuntimeError,
  llmRollout,
  promptRollout,
  rollout,
} from "../../src/runner/index.ts";
import { captureLogs } from "../../src/tracer/index.ts";
import type { AttemptedRollout, LLM, NamedResources, PromptTemplate } from "../../src/types/index.ts";
import { ValidationError } from "../../src/types/index.ts";

const attempted = { rollout_id: "ro-1", attempt: { attempt_id: "at-1" }, mode: "train" } as unknown as AttemptedRollout;
const llm = (name: string, type: "llm" | "proxy_llm" = "llm") =>
  ({ resource_type: type, endpoint: `http://${name}/v1`, model: name, api_key: null, sampling_parameters: {} }) as unknown as LLM;
const prompt = (t: string): PromptTemplate => ({ resource_type: "prompt_template", template: t, engine: "f-string" });

describe("LitAgent", () => {
  it("needs an implementation, and reports unset trainer and runner", async () => {
    const agent = new LitAgent();
    expect(() => agent.rollout(1, {}, attempted)).toThrow(NotImplementedError);
    expect(new NotImplementedError("x")).toBeInstanceOf(RuntimeError);
    expect(() => agent.getTrainer()).toThrow("Trainer has not been set for this agent.");
    expect(() => agent.getRunner()).toThrow("Runner has not been set for this agent.");
    expect(agent.isAsync()).toBe(false);
    class AsyncAgent extends LitAgent {
      override async rolloutAsync() {
        return 1;
      }
    }
    expect(new AsyncAgent().isAsync()).toBe(true);
    expect(await new AsyncAgent().invoke(0, {}, attempted)).toBe(1);
  });

  it("validation delegates to rollout, not to trainingRollout", () => {
    class A extends LitAgent<number> {
      override rollout() {
        return 1;
      }
      override trainingRollout() {
        return 2;
      }
    }
    const a: LitAgent<number> = new A();
    expect(a.validationRollout(0, {}, attempted)).toBe(1);
    expect(a.trainingRollout(0, {}, attempted)).toBe(2);
  });
});

describe("function agents", () => {
  it("inject the first LLM by parameter name and stay callable", async () => {
    const agent = rollout(async function ask(task: string, llm: LLM, rollout: AttemptedRollout) {
      return `${task}@${llm.model}@${rollout.rollout_id}`;
    });
    expect(agent).toBeInstanceOf(FunctionalLitAgent);
    expect(agent).toBeInstanceOf(LitAgent);
    expect(agent.kind).toBe("llm");
    expect(agent.parameters).toEqual(["task", "llm", "rollout"]);
    expect(agent.isAsync()).toBe(true);
    expect(agent.name).toBe("ask");
    expect(await agent("direct", llm("m0"), attempted)).toBe("direct@m0@ro-1");
    const logs = captureLogs();
    const resources: NamedResources = { p: prompt("x"), main: llm("first"), second: llm("second") };
    expect(await agent.rollout("t", resources, attempted)).toBe("t@first@ro-1");
    logs.stop();
    expect(logs.text()).toContain("Multiple LLM resources found");
    expect(logs.text()).toContain("'second'");
    expect(() => agent.rollout("t", { p: prompt("x") }, attempted)).toThrow(/No LLM resource found/);
  });

  it("bind a ProxyLLM to the attempt unless stripProxy is false", () => {
    const seen: string[] = [];
    const strip = llmRollout((task: number, llm: LLM) => void seen.push(llm.endpoint + "|" + llm.resource_type));
    const keep = llmRollout((task: number, llm: LLM) => void seen.push(llm.endpoint + "|" + llm.resource_type), { stripProxy: false });
    strip.rollout(1, { p: llm("proxy", "proxy_llm") }, attempted);
    keep.rollout(1, { p: llm("proxy", "proxy_llm") }, attempted);
    expect(seen).toEqual(["http://proxy/rollout/ro-1/attempt/at-1/v1|llm", "http://proxy/v1|proxy_llm"]);
  });

  it("inject the prompt template (snake or camel case)", () => {
    const a = promptRollout((task: number, prompt_template: PromptTemplate) => `${prompt_template.template}${task}`);
    const b = rollout((task: number, promptTemplate: PromptTemplate) => `${promptTemplate.template}${task}`);
    expect(a.rollout(1, { x: prompt("a") }, attempted)).toBe("a1");
    expect(b.kind).toBe("prompt");
    expect(b.rollout(2, { x: prompt("b") }, attempted)).toBe("b2");
    expect(() => a.rollout(1, { l: llm("x") }, attempted)).toThrow(/No prompt template resource found/);
  });

  it("check the parameter patterns, and skip parsing when the kind is declared", () => {
    expect(() => llmRollout((task: number) => task)).toThrow(/at least 2 parameters/);
    expect(() => llmRollout((input: number, llm: LLM) => [input, llm])).toThrow(/called 'task'/);
    expect(() => llmRollout((task: number, model: LLM) => [task, model])).toThrow(/called 'llm'/);
    expect(() => promptRollout((task: number, llm: LLM) => [task, llm])).toThrow(/called 'prompt_template'/);
    expect(() => rollout((task: number, other: unknown) => [task, other])).toThrow(NotImplementedError);
    expect(() => rollout((task: number, other: unknown) => [task, other])).toThrow(/does not match any known agent patterns/);
    // Minified-looking names: declared kind, positional call (task, resource, rollout).
    const minified = rollout((a: number, b: LLM, c: AttemptedRollout) => `${a}:${b.model}:${c.rollout_id}`, { kind: "llm" });
    expect(minified.rollout(7, { l: llm("m") }, attempted)).toBe("7:m:ro-1");
    expect(() => llmRollout((task: number, llm: LLM) => [task, llm])).not.toThrow(ValidationError);
  });
});

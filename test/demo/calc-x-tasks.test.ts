import { describe, expect, it } from "vitest";
import { evaluateReference, heldOutTasks, referenceResults, trainTasks } from "../../examples/calc-x/tasks.ts";

describe("calc-x tasks", () => {
  it("are seeded: the same seed gives the same tasks, another seed other tasks", () => {
    expect(trainTasks(50, 7)).toEqual(trainTasks(50, 7));
    expect(trainTasks(50, 8).map((t) => t.question)).not.toEqual(trainTasks(50, 7).map((t) => t.question));
    expect(heldOutTasks(30)).toEqual(heldOutTasks(30));
  });

  it("keep the held-out questions distinct and out of every train set", () => {
    const held = heldOutTasks(100);
    expect(new Set(held.map((t) => t.question)).size).toBe(100);
    const questions = new Set(held.map((t) => t.question));
    for (const seed of [0, 1, 2, 3]) for (const t of trainTasks(500, seed)) expect(questions.has(t.question)).toBe(false);
  });

  it("chain their reference expressions and end at the exact integer answer", () => {
    const tasks = [...heldOutTasks(100), ...trainTasks(300, 0)];
    for (const t of tasks) {
      const results = referenceResults(t);
      expect(t.expressions).toHaveLength(t.calls);
      expect(results.at(-1)).toBe(t.answer);
      expect(t.answer).toMatch(/^\d+$/);
      // the second call starts from the first call's result, as the agent must copy it
      if (t.calls === 2) expect(t.expressions[1]!.startsWith(results[0]!)).toBe(true);
      // numbers the question states have 2-4 digits
      for (const n of t.question.match(/\d+/g)!) expect(n.length).toBeGreaterThanOrEqual(2), expect(n.length).toBeLessThanOrEqual(4);
    }
    const twoCalls = tasks.filter((t) => t.calls === 2).length / tasks.length;
    expect(twoCalls).toBeGreaterThan(0.35);
    expect(twoCalls).toBeLessThan(0.65);
  });

  it("evaluates reference expressions exactly and refuses other shapes", () => {
    expect(evaluateReference("23*148")).toBe("3404");
    expect(evaluateReference("3404-517")).toBe("2887");
    expect(evaluateReference("99999999*99999999")).toBe("9999999800000001");
    expect(evaluateReference("1476/12")).toBe("123");
    expect(() => evaluateReference("7/2")).toThrow(RangeError);
    expect(() => evaluateReference("1+2+3")).toThrow(SyntaxError);
  });
});

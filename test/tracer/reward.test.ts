/**
 * `reward(fn)`, upstream's `@reward` decorator: the wrapped function (sync or async) returns what `fn`
 * returns, and that value is emitted as the reward span of the active trace (as `emitReward` would).
 */
import { describe, expect, it } from "vitest";
import { findFinalReward } from "../../src/adapter/index.ts";
import { InMemoryLightningStore } from "../../src/store/index.ts";
import { NoActiveTracerError, OtelTracer, reward } from "../../src/tracer/index.ts";
import { captureLogs } from "../../src/platform/log.ts";

/** Runs `body` as one traced attempt; returns its result and the attempt's stored spans. */
async function traced<T>(body: () => T | Promise<T>) {
  const store = new InMemoryLightningStore();
  const tracer = new OtelTracer();
  tracer.initWorker(0, store);
  const r = await store.startRollout({});
  try {
    const result = await tracer.traceContext({ rolloutId: r.rollout_id, attemptId: r.attempt.attempt_id }, body);
    return { result, spans: (await store.querySpans(r.rollout_id)).items };
  } finally {
    await store.close();
  }
}

const rewardAttributes = (spans: { name: string; attributes: Record<string, unknown> }[]) =>
  spans.filter((s) => s.name === "agentlightning.annotation").map((s) => s.attributes);

describe("reward(fn)", () => {
  it("a sync function: its return value is returned and becomes the reward span", async () => {
    const accuracy = reward((answer: number, expected: number) => (answer === expected ? 1 : 0.25));
    const { result, spans } = await traced(() => accuracy(3, 4));
    expect(result).toBe(0.25);
    expect(rewardAttributes(spans)).toEqual([{ "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.25 }]);
    expect(findFinalReward(spans)).toBe(0.25);
  });

  it("an async function: awaited, then emitted; a boolean counts as 1 or 0 as in emitReward", async () => {
    const judge = reward(async (text: string) => {
      await new Promise((r) => setTimeout(r, 5));
      return text.includes("42");
    });
    const { result, spans } = await traced(async () => [await judge("the answer is 42"), await judge("no idea")]);
    expect(result).toEqual([true, false]);
    expect(rewardAttributes(spans).map((a) => a["agentlightning.reward.0.value"])).toEqual([1, 0]);
    expect(findFinalReward(spans)).toBe(0);
  });

  it("keeps `this` and the arguments, and stays sync for a sync function", async () => {
    const grader = {
      weight: 0.5,
      score: reward(function (this: { weight: number }, hits: number) {
        return this.weight * hits;
      }),
    };
    const { result } = await traced(() => {
      const value = grader.score(3);
      expect(value).toBe(1.5);
      return value;
    });
    expect(result).toBe(1.5);
  });

  it("a function that throws emits nothing and the error goes on", async () => {
    const failing = reward((): number => {
      throw new RangeError("no score");
    });
    const failingLater = reward(async (): Promise<number> => {
      throw new RangeError("no score later");
    });
    const { result, spans } = await traced(async () => {
      expect(() => failing()).toThrow("no score");
      await expect(failingLater()).rejects.toThrow("no score later");
      return "done";
    });
    expect(result).toBe("done");
    expect(rewardAttributes(spans)).toEqual([]);
  });

  it("a value that is not a number emits no reward, as upstream's decorator: null quietly, anything else with a warning", async () => {
    const logs = captureLogs();
    try {
      const nothing = reward((): number | null => null);
      const words = reward(() => "high" as unknown as number);
      const { result, spans } = await traced(() => [nothing(), words()]);
      expect(result).toEqual([null, "high"]);
      expect(rewardAttributes(spans)).toEqual([]);
    } finally {
      logs.stop();
    }
    expect(logs.records.filter((r) => r.level === "warning").map((r) => r.message)).toEqual([
      "Reward is ignored because it is not a number: high",
    ]);
  });

  it("it needs an active tracer, as emitReward does", () => {
    expect(() => reward(() => 1)()).toThrow(NoActiveTracerError);
  });
});

import { describe, expect, it } from "vitest";
import { buildTrainingBatch, mergeRuns, trajectoryRow, type FinishedRollout, type Triplet } from "../../src/adapter/index.ts";
import { referenceKernels } from "../../src/wasm/index.ts";
import { ValidationError } from "../../src/types/errors.ts";

const t = (prompt: number[], response: number[], reward: number | null = null): Triplet => ({
  prompt: { token_ids: prompt },
  response: { token_ids: response },
  reward,
  metadata: {},
});

describe("batch builder (docs/adapters.md#the-training-batch)", () => {
  const rollouts: FinishedRollout[] = [
    { rollout_id: "r1", data_id: "d1", triplets: [t([1, 2], [3], 0.2), t([1, 2, 3, 4], [5, 6, 7], 1)] },
    { rollout_id: "r2", data_id: "d1", triplets: [t([1, 2], [8], null), t([9, 9, 9, 9, 9], [4], null)] },
    { rollout_id: "r3", data_id: "d2", triplets: [] },
  ];

  it("transition level: one row per triplet, every row gets the rollout's final reward, and the batch metrics", () => {
    for (const kernels of [undefined, referenceKernels]) {
      const b = buildTrainingBatch(rollouts, { maxPromptLength: 4, maxResponseLength: 2, kernels });
      expect(b.tensors.n).toBe(4);
      expect(Array.from(b.rewards)).toEqual([1, 1, 0, 0]);
      expect(b.rolloutIds).toEqual(["r1", "r1", "r2", "r2"]);
      expect(b.turnIndex).toEqual([0, 1, 0, 1]);
      expect(Array.from(b.tensors.isDrop)).toEqual([0, 0, 0, 1]);
      expect(Array.from(b.tensors.tokenLevelScores)).toEqual([1, 0, 0, 1, 0, 0, 0, 0]);
      expect(b.metrics).toMatchObject({
        "training/reward": 1 / 3,
        "training/n_rollouts": 3,
        "training/n_rollouts_w_trace": 2,
        "training/n_rollouts_w_reward": 1,
        "training/n_truncated_triplets": 1,
        "training/n_triplets": 4,
      });
    }
  });

  it("groups by sample-and-turn by default, by sample on request, and reports tied groups", () => {
    const byTurn = buildTrainingBatch(rollouts, { maxPromptLength: 4, maxResponseLength: 2 });
    expect(byTurn.groupKeys).toEqual(["d1#0", "d1#1"]);
    expect(Array.from(byTurn.groups)).toEqual([0, 1, 0, 1]);
    expect(byTurn.metrics["training/n_groups"]).toBe(2);
    expect(byTurn.metrics["training/n_tied_groups"]).toBe(0);
    const bySample = buildTrainingBatch(rollouts, { maxPromptLength: 4, maxResponseLength: 2, grouping: "sample" });
    expect(Array.from(bySample.groups)).toEqual([0, 0, 0, 0]);
    const tied = buildTrainingBatch(
      [
        { rollout_id: "a", data_id: "x", triplets: [t([1], [2], 1)] },
        { rollout_id: "b", data_id: "x", triplets: [t([1], [3], 1)] },
        { rollout_id: "c", data_id: "y", triplets: [t([1], [2], 0)] },
        { rollout_id: "d", data_id: "y", triplets: [t([1], [2], 1)] },
        { rollout_id: "e", data_id: "z", triplets: [t([1], [2], 1)] },
      ],
      { maxPromptLength: 2, maxResponseLength: 2 },
    );
    expect(tied.metrics).toMatchObject({
      "training/n_groups": 3,
      "training/n_tied_groups": 1,
      "training/tied_group_ratio": 0.5,
      "training/n_singleton_groups": 1,
      "training/n_zero_adv_groups": 2,
    });
  });

  it("an unknown level or grouping is an error naming the option", () => {
    const o = { maxPromptLength: 4, maxResponseLength: 2 };
    expect(() => buildTrainingBatch(rollouts, { ...o, level: "episode" as never })).toThrow(/level must be one of transition, trajectory/);
    expect(() => buildTrainingBatch(rollouts, { ...o, grouping: "turn" as never })).toThrow(/grouping must be one of sample, sample_turn/);
  });

  it("a missing reward with rewardFillna null is an error", () => {
    expect(() => buildTrainingBatch(rollouts, { maxPromptLength: 4, maxResponseLength: 2, rewardFillna: null })).toThrow(ValidationError);
  });

  it("trajectory level: merges turns whose context extends the previous turn; loss mask 0 on environment tokens", () => {
    const turns = [
      { prompt: [1, 2], response: [3] },
      { prompt: [1, 2, 3, 10, 11], response: [4, 5] },
      { prompt: [7], response: [8] },
    ];
    expect(mergeRuns(turns)).toEqual([[0, 1], [2]]);
    expect(trajectoryRow(turns, [0, 1], 8)).toEqual({ prompt: [1, 2], response: [3, 10, 11, 4, 5], mask: [1, 0, 0, 1, 1] });
    // no new token between turns: nothing is appended twice (upstream appended the whole prompt again)
    const tight = [
      { prompt: [1], response: [2] },
      { prompt: [1, 2], response: [3] },
    ];
    expect(trajectoryRow(tight, [0, 1], 8)).toEqual({ prompt: [1], response: [2, 3], mask: [1, 1] });
    const b = buildTrainingBatch([{ rollout_id: "r", data_id: "d", triplets: turns.map((x) => t(x.prompt, x.response, 1)) }], {
      level: "trajectory",
      maxPromptLength: 3,
      maxResponseLength: 4,
    });
    expect(b.tensors.n).toBe(2);
    expect(Array.from(b.tensors.responses)).toEqual([3, 10, 11, 4, 8, 0, 0, 0]);
    expect(Array.from(b.tensors.responseMask)).toEqual([1, 0, 0, 1, 1, 0, 0, 0]);
    expect(b.turnIndex).toBeNull();
    expect(b.metrics).toMatchObject({
      "training/n_unmerged_rollouts": 1,
      "training/n_triplets": 2,
      "training/n_truncated_triplets": 1,
      "training/n_triplets_by_turn": 3,
      "training/max_response_length_by_turn": 2,
      "training/min_response_length_by_turn": 1,
    });
  });
});

describe("batch builder memory", () => {
  it("by default the tensors are copies: a later adapter/kernel call cannot change them", async () => {
    const { TraceTripletAdapter } = await import("../../src/adapter/index.ts");
    const { spanFromAttributes } = await import("../../src/types/span.ts");
    const b = buildTrainingBatch([{ rollout_id: "r", data_id: "d", triplets: [t([1, 2, 3], [4, 5], 1)] }], {
      maxPromptLength: 4,
      maxResponseLength: 4,
    });
    const before = Array.from(b.tensors.inputIds);
    // run the private Wasm instance again on something else
    new TraceTripletAdapter().adapt(
      Array.from({ length: 50 }, (_, i) =>
        spanFromAttributes({ span_id: `s${i}`, name: "openai.chat.completion", start_time: i, end_time: i + 1 }),
      ),
    );
    buildTrainingBatch([{ rollout_id: "x", data_id: "y", triplets: [t([9, 9, 9, 9], [9, 9, 9, 9], 0)] }], {
      maxPromptLength: 4,
      maxResponseLength: 4,
    });
    expect(Array.from(b.tensors.inputIds)).toEqual(before);
    expect(before).toEqual([0, 1, 2, 3, 4, 5, 0, 0]);
  });
});

describe("rolloutFromSpans (docs/adapters.md#the-training-batch)", () => {
  it("adapts the spans of a rollout, and gives no triplets for no spans", async () => {
    const { rolloutFromSpans } = await import("../../src/adapter/index.ts");
    const { llm, reward, sp } = await import("./spans.ts");
    const r = rolloutFromSpans({ rollout_id: "ro", data_id: "d" }, [
      sp({ id: "root", start: 0, end: 9 }),
      llm("c", "root", 1, 2),
      reward("w", "root", 3, 0.5),
    ]);
    expect(r.triplets.map((x) => [x.prompt.token_ids, x.reward])).toEqual([[[1, 2], 0.5]]);
    expect(rolloutFromSpans({ rollout_id: "ro", data_id: "d" }, []).triplets).toEqual([]);
  });
});

/** GRPO's own pieces; the whole loop runs in test/demo/calc.test.ts. */
import { describe, expect, it } from "vitest";
import { GRPO, selectRows } from "../../src/algorithm/grpo.ts";
import { batchFromTokens, CpuTrainer, initParams, PAD_ID, presetConfig } from "../../src/model/index.ts";
import { ModelPolicy } from "../../src/proxy/index.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";

const config = { ...presetConfig("tiny"), d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1, d_ff: 64, max_seq_len: 32 };

describe("selectRows", () => {
  it("keeps exactly the chosen rows of every tensor, in the order given", () => {
    const rows = [
      { prompt: [1, 2, 3], response: [4, 5] },
      { prompt: [6], response: [7, 8, 9] },
      { prompt: [10, 11], response: [12] },
    ];
    const full = batchFromTokens(rows, { padId: PAD_ID });
    const sub = selectRows(full, [2, 0]);
    const again = batchFromTokens([rows[2], rows[0]], { padId: PAD_ID, P: full.P, R: full.R });
    expect(sub.n).toBe(2);
    expect(Array.from(sub.inputIds)).toEqual(Array.from(again.inputIds));
    expect(Array.from(sub.attentionMask)).toEqual(Array.from(again.attentionMask));
    expect(Array.from(sub.positionIds)).toEqual(Array.from(again.positionIds));
  });
});

describe("GRPO", () => {
  const make = (o: Partial<ConstructorParameters<typeof GRPO>[0]> = {}) => {
    const params = initParams(config, 0);
    return new GRPO({
      trainer: new CpuTrainer({ config, params }),
      policy: new ModelPolicy({ model: "m", config, params }),
      maxPromptLength: 24,
      maxResponseLength: 8,
      progress: false,
      ...o,
    });
  };

  it("rejects a non-positive group size or batch size", () => {
    expect(() => make({ nSamples: 0 })).toThrow(/nSamples/);
    expect(() => make({ batchSize: 1.5 })).toThrow(/batchSize/);
  });

  it("needs a training dataset and a policy server as its LLM proxy", async () => {
    const g = make();
    g.setStore(new InMemoryLightningStore());
    await expect(g.run([], null)).rejects.toThrow(/non-empty training dataset/);
    await expect(g.run([{ q: 1 }], null)).rejects.toThrow(/LLM proxy/);
  });
});

// SFT from chat records: the batch's response mask covers exactly the assistant turns (byte tokenizer and
// the real Qwen2.5 / Qwen3 tokenizers), long records are cut or dropped as documented, bad records name
// their field, and a LoRA SFT run on a tiny model makes greedy generation reproduce the trained answers.
import { describe, expect, it } from "vitest";
import { SFT, trainSft } from "../../src/algorithm/sft.ts";
import { sftBatchFromChats, sftBatchFromRows, sftRowsFromChats, tokenizeChatRecord } from "../../src/algorithm/sft-batch.ts";
import { createHfTokenizer } from "../../src/model/hf/index.ts";
import { CpuTrainer } from "../../src/cpu/index.ts";
import { generate, initParams, paramLayout, parseLoraConfig, presetConfig } from "../../src/model/index.ts";
import { byteTokenizer, PAD_ID } from "../../src/model/tokenizer.ts";
import type { Tokenizer } from "../../src/model/tokenizer-api.ts";
import type { TokenBatch } from "../../src/model/train-types.ts";
import { InMemoryLightningStore } from "../../src/store/memory.ts";
import { Trainer } from "../../src/trainer/index.ts";
import { GpuContext } from "../../src/gpu/context.ts";
import { GpuPolicyTrainer } from "../../src/gpu/trainer.ts";
import { noGpu } from "../gpu/gpu-env.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { lenmlTokenizerFiles } from "../model/hf/qwen-files.ts";
import { arithmeticAgent } from "../../examples/arithmetic/agent.ts";

const qwen = createHfTokenizer(lenmlTokenizerFiles("qwen2_5"));
const qwen3 = createHfTokenizer(lenmlTokenizerFiles("qwen3"));

/** The decoded runs of consecutive trained tokens of row `i`, in order (special tokens shown). */
function trainedRuns(tok: Tokenizer, b: TokenBatch, i: number): string[] {
  const runs: string[] = [];
  let cur: number[] = [];
  for (let j = 0; j <= b.R; j++) {
    if (j < b.R && b.responseMask![i * b.R + j]) cur.push(b.inputIds[i * (b.P + b.R) + b.P + j]);
    else if (cur.length) {
      runs.push(tok.decode(cur, { skipSpecialTokens: false }));
      cur = [];
    }
  }
  return runs;
}

/** The real (attention-mask 1) tokens of row `i`. */
function realTokens(b: TokenBatch, i: number): number[] {
  const T = b.P + b.R;
  const out: number[] = [];
  for (let t = 0; t < T; t++) if (b.attentionMask[i * T + t]) out.push(b.inputIds[i * T + t]);
  return out;
}

const multiTurn = {
  messages: [
    { role: "system", content: "Be brief." },
    { role: "user", content: "2+2?" },
    { role: "assistant", content: "4" },
    { role: "user", content: "And 3+3?" },
    { role: "assistant", content: "six, I think" },
    { role: "user", content: "thanks" },
  ],
};

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather of a city",
      parameters: { type: "object", properties: { city: { type: "string" } } },
    },
  },
];
const toolRecord = {
  messages: [
    { role: "user", content: "Weather in Paris?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }],
    },
    { role: "tool", content: "sunny", tool_call_id: "c1" },
    { role: "assistant", content: "It is sunny." },
  ],
  tools,
};

describe("sftBatchFromChats: layout and mask", () => {
  it("byte tokenizer: the mask covers exactly each assistant turn and its end token; the rest is context", () => {
    const other = {
      messages: [
        { role: "user", content: "A long question, longer than the other prompt?" },
        { role: "assistant", content: "ok" },
      ],
    };
    const { batch: b, truncated, dropped, tokens } = sftBatchFromChats([multiTurn, other], byteTokenizer, { maxLength: 256 });
    expect(b).not.toBeNull();
    expect([truncated, dropped]).toEqual([[], []]);
    const batch = b!;
    expect(trainedRuns(byteTokenizer, batch, 0)).toEqual(["4<|eos|>", "six, I think<|eos|>"]);
    expect(trainedRuns(byteTokenizer, batch, 1)).toEqual(["ok<|eos|>"]);
    expect(tokens).toBe(2 + 13 + 3);
    // each row is the template's rendering up to its last assistant turn (the trailing user turn is not rendered)
    expect(realTokens(batch, 0)).toEqual(byteTokenizer.applyChatTemplate(multiTurn.messages.slice(0, 5) as never));
    expect(realTokens(batch, 1)).toEqual(byteTokenizer.applyChatTemplate(other.messages as never));
    // the layout is never wider than the longest row, and positions count real tokens only
    expect(batch.P + batch.R).toBe(Math.max(realTokens(batch, 0).length, realTokens(batch, 1).length));
    const T = batch.P + batch.R;
    for (let i = 0; i < batch.n; i++) {
      let c = 0;
      for (let t = 0; t < T; t++) {
        c += batch.attentionMask[i * T + t];
        expect(batch.positionIds[i * T + t]).toBe(Math.max(c - 1, 0));
        if (!batch.attentionMask[i * T + t]) expect(batch.inputIds[i * T + t]).toBe(PAD_ID);
      }
      // prompt left-padded, response right-padded, no trained token on padding
      for (let t = 0; t < batch.R; t++) if (batch.responseMask![i * batch.R + t]) expect(batch.attentionMask[i * T + batch.P + t]).toBe(1);
    }
    expect(batch.attentionMask[1 * T + 0]).toBe(1); // the longer prompt fills its row from column 0
    expect(batch.attentionMask[0 * T + T - 1]).toBe(1); // the longer response reaches the last column
  });

  it("last-assistant: only the final assistant turn carries the loss", () => {
    const { batch } = sftBatchFromChats([multiTurn], byteTokenizer, { maxLength: 256, trainOn: "last-assistant" });
    expect(trainedRuns(byteTokenizer, batch!, 0)).toEqual(["six, I think<|eos|>"]);
  });

  it("Qwen2.5 tokenizer: multi-turn and tool calls, each turn up to <|im_end|> (not the newline after it)", () => {
    const { batch } = sftBatchFromChats([multiTurn, toolRecord], qwen, { maxLength: 1024 });
    const b = batch!;
    expect(trainedRuns(qwen, b, 0)).toEqual(["4<|im_end|>", "six, I think<|im_end|>"]);
    expect(trainedRuns(qwen, b, 1)).toEqual([
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
      "It is sunny.<|im_end|>",
    ]);
    // decoding without specials gives back the assistant contents exactly
    const plain = (i: number) => {
      const ids: number[] = [];
      for (let j = 0; j < b.R; j++) if (b.responseMask![i * b.R + j]) ids.push(b.inputIds[i * (b.P + b.R) + b.P + j]);
      return qwen.decode(ids);
    };
    expect(plain(0)).toBe("4six, I think");
    // the tools are rendered into the system prompt of the tool record's context
    expect(qwen.decode(realTokens(b, 1))).toContain('"name": "get_weather"');
    const full = qwen.applyChatTemplate(multiTurn.messages.slice(0, 5) as never);
    expect(realTokens(b, 0)).toEqual(full.slice(0, -1)); // the template's final "\n" after <|im_end|> is cut
  });

  it("Qwen3 tokenizer: an earlier turn is trained as the whole conversation renders it (no think block), the last with its empty think block", () => {
    const { batch } = sftBatchFromChats([multiTurn], qwen3, { maxLength: 1024 });
    expect(trainedRuns(qwen3, batch!, 0)).toEqual(["4<|im_end|>", "<think>\n\n</think>\n\nsix, I think<|im_end|>"]);
  });

  it("a turn opening with a newline that merges with the header's newline starts at the merged token", () => {
    const rec = {
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", content: "\nHi" },
      ],
    };
    const { batch } = sftBatchFromChats([rec], qwen, { maxLength: 64 });
    expect(trainedRuns(qwen, batch!, 0)).toEqual(["\n\nHi<|im_end|>"]);
  });
});

describe("sftBatchFromChats: maxLength", () => {
  const longPrompt = {
    messages: [
      { role: "system", content: "x".repeat(40) },
      { role: "user", content: "hi" },
      { role: "assistant", content: "hello" },
    ],
  };
  const longAnswer = {
    messages: [
      { role: "user", content: "hi" },
      { role: "assistant", content: "y".repeat(40) },
    ],
  };
  const short = {
    messages: [
      { role: "user", content: "hi" },
      { role: "assistant", content: "yo" },
    ],
  };

  it("cuts a long prompt from the left, keeping every trained token; drops a record whose answer alone does not fit", () => {
    const maxLength = 24;
    const rows = sftRowsFromChats([longPrompt, longAnswer, short], byteTokenizer, { maxLength });
    expect(rows.truncated).toEqual([0]);
    expect(rows.dropped).toEqual([1]);
    expect(rows.rows.map((r) => r.record)).toEqual([0, 2]);
    const whole = tokenizeChatRecord(longPrompt, 0, byteTokenizer);
    const kept = rows.rows[0];
    expect(kept.ids).toHaveLength(maxLength);
    expect(kept.cut).toBe(whole.ids.length - maxLength);
    expect(kept.ids).toEqual(whole.ids.slice(-maxLength));
    expect(byteTokenizer.decode(kept.ids.filter((_, i) => kept.mask[i]))).toBe("hello");
    const b = sftBatchFromRows(rows.rows, PAD_ID);
    expect(b.P + b.R).toBeLessThanOrEqual(maxLength);
  });

  it("a row is never wider than maxLength, whatever mix of long prompts and long answers", () => {
    const answer = {
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "y".repeat(18) },
      ],
    };
    const { batch } = sftBatchFromChats([longPrompt, answer], byteTokenizer, { maxLength: 24 });
    expect(batch!.P + batch!.R).toBeLessThanOrEqual(24);
    expect(trainedRuns(byteTokenizer, batch!, 1)).toEqual([`${"y".repeat(18)}<|eos|>`]);
  });

  it("an answer that needs every position (no token to predict its first one from) is dropped", () => {
    const n = tokenizeChatRecord(short, 0, byteTokenizer).ids.length;
    const trained = 3; // "yo" + EOS
    expect(sftRowsFromChats([short], byteTokenizer, { maxLength: trained + 1 }).dropped).toEqual([]);
    expect(sftRowsFromChats([short], byteTokenizer, { maxLength: trained }).dropped).toEqual([0]);
    expect(n).toBeGreaterThan(trained + 1);
    expect(sftBatchFromChats([short], byteTokenizer, { maxLength: trained }).batch).toBeNull();
  });
});

describe("sftBatchFromChats: bad records", () => {
  const fails = (records: unknown[], path: (string | number)[], tok: Tokenizer = byteTokenizer) => {
    let err: unknown;
    try {
      sftBatchFromChats(records, tok, { maxLength: 256 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues[0].path).toEqual(path);
    return (err as ValidationError).message;
  };

  it("names the record index and the field", () => {
    const ok = {
      messages: [
        { role: "user", content: "a" },
        { role: "assistant", content: "b" },
      ],
    };
    expect(fails([ok, { messages: [{ role: "user", content: "a" }] }], ["records", 1, "messages"])).toMatch(/no assistant turn/);
    expect(fails([{ messages: [{ role: "robot", content: "a" }] }], ["records", 0, "messages", 0, "role"])).toMatch(/unknown role "robot"/);
    expect(
      fails(
        [ok, ok, { messages: [{ role: "user", content: [{ type: "text", text: "a" }] }, ok.messages[1]] }],
        ["records", 2, "messages", 0, "content"],
      ),
    ).toMatch(/content must be a string, got a list/);
    expect(
      fails(
        [
          {
            messages: [
              { role: "user", content: "a" },
              { role: "assistant", content: 5 },
            ],
          },
        ],
        ["records", 0, "messages", 1, "content"],
      ),
    ).toMatch(/number/);
    expect(
      fails(
        [
          {
            messages: [
              { role: "user", content: "a" },
              { role: "assistant", content: null },
            ],
          },
        ],
        ["records", 0, "messages", 1, "content"],
      ),
    ).toMatch(/tool_calls/);
    expect(fails([{ message: [] }], ["records", 0, "messages"])).toMatch(/list of messages/);
    expect(
      fails(
        [
          {
            messages: [
              { role: "user", content: "a" },
              { role: "assistant", content: null, tool_calls: [{ function: { arguments: "{}" } }] },
            ],
          },
        ],
        ["records", 0, "messages", 1, "tool_calls", 0, "function", "name"],
      ),
    ).toMatch(/function name/);
    expect(fails([{ ...ok, tools: [{ type: "function" }] }], ["records", 0, "tools", 0])).toMatch(/tool/);
  });

  it("a template's refusal keeps its own path under the record's index", () => {
    // the byte tokenizer's template cannot render tools or the developer role
    expect(fails([toolRecord], ["records", 0, "tools"])).toMatch(/record 0: .*cannot render tools/);
    expect(
      fails(
        [
          {
            messages: [
              { role: "developer", content: "a" },
              { role: "assistant", content: "b" },
            ],
          },
        ],
        ["records", 0, "messages", 0, "role"],
      ),
    ).toMatch(/unknown chat role/);
  });
});

// A tiny byte-tokenizer model. Its final norm gain is raised so that logits can be as peaked as a trained
// model's: with initParams' 0.02-std tied embeddings and a unit gain no token can win clearly, and LoRA
// (which leaves norms and embeddings alone) could not change that.
const config = { ...presetConfig("tiny"), d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 128, max_seq_len: 64 };
function baseModel(): Float32Array {
  const p = initParams(config, 3);
  const norm = paramLayout(config).find((s) => s.name === "norm")!;
  p.fill(8, norm.offset, norm.offset + norm.size);
  return p;
}
const LORA = parseLoraConfig({
  r: 8,
  alpha: 16,
  targetModules: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
});
const SYSTEM = { role: "system", content: "Answer briefly." };
const QA = [
  ["Say hi.", "Hello there!"],
  ["What is 7 times 6?", "42"],
] as const;
const records = QA.map(([q, a]) => ({ messages: [SYSTEM, { role: "user", content: q }, { role: "assistant", content: a }] }));

function greedy(base: Float32Array, question: string, adapter?: Float32Array): string {
  const prompt = byteTokenizer.applyChatTemplate([SYSTEM, { role: "user", content: question }], { addGenerationPrompt: true });
  const out = generate(config, base, prompt, {
    maxTokens: 20,
    temperature: 0,
    ...(adapter ? { lora: { config: LORA, params: adapter } } : {}),
  });
  return byteTokenizer.decode(out.tokens, { skipSpecialTokens: false });
}

describe("trainSft", () => {
  it("LoRA SFT on a tiny model lowers the loss and greedy generation reproduces each trained answer", async () => {
    const base = baseModel();
    const baseCopy = base.slice();
    const trainer = new CpuTrainer({ config, lr: 1e-2, lora: { config: LORA, base, seed: 0 } });
    const result = await trainSft({
      trainer,
      tokenizer: byteTokenizer,
      records,
      valRecords: records,
      epochs: 40,
      batchSize: 2,
      maxLength: 64,
      progress: false,
    });
    const steps = result.reports.filter((r) => r.kind === "step");
    const vals = result.reports.filter((r) => r.kind === "validation");
    expect(steps).toHaveLength(40);
    expect(steps.every((s) => !s.skipped && s.rows === 2)).toBe(true);
    expect(steps[39].loss).toBeLessThan(steps[0].loss * 0.1);
    expect(vals[vals.length - 1].loss).toBeLessThan(vals[0].loss * 0.1);
    const { params } = await trainer.getState();
    for (const [q, a] of QA) {
      expect(greedy(base, q, params)).toBe(`${a}<|eos|>`);
      expect(greedy(base, q)).not.toContain(a); // the base alone does not know it
    }
    expect(Array.from(base)).toEqual(Array.from(baseCopy)); // the base is never written
  });

  it("full fine-tuning (no adapter) lowers the loss too; micro-batches give the same step", async () => {
    const make = () => new CpuTrainer({ config, params: baseModel(), lr: 1e-3 });
    const run = (microBatchSize?: number) =>
      trainSft({
        trainer: make(),
        tokenizer: byteTokenizer,
        records,
        epochs: 6,
        batchSize: 2,
        maxLength: 64,
        progress: false,
        microBatchSize,
      });
    const whole = (await run()).reports.filter((r) => r.kind === "step");
    expect(whole[5].loss).toBeLessThan(whole[0].loss * 0.7);
    const micro = (await run(1)).reports.filter((r) => r.kind === "step");
    micro.forEach((r, i) => expect(r.loss).toBeCloseTo(whole[i].loss, 3));
  });

  it("refuses bad options and a dataset whose every record is too long", async () => {
    const trainer = new CpuTrainer({ config, params: baseModel() });
    const opts = { trainer, tokenizer: byteTokenizer, records, progress: false };
    await expect(trainSft({ ...opts, maxLength: 65 })).rejects.toThrow(/max_seq_len 64/);
    await expect(trainSft({ ...opts, batchSize: 0 })).rejects.toThrow(/batchSize/);
    await expect(trainSft({ ...opts, records: [] })).rejects.toThrow(/at least one training record/);
    await expect(trainSft({ ...opts, maxLength: 3 })).rejects.toThrow(/every one of the 2 training records/);
  });
});

describe.skipIf(noGpu)("trainSft on the WebGPU trainer", { timeout: 120_000 }, () => {
  it("takes the same steps as the CPU trainer on the same chat records", async () => {
    const ctx = await GpuContext.create();
    try {
      const gpu = await GpuPolicyTrainer.create({ config, params: baseModel(), context: ctx, lr: 1e-3 });
      const cpu = new CpuTrainer({ config, params: baseModel(), lr: 1e-3 });
      const run = (trainer: CpuTrainer | GpuPolicyTrainer) =>
        trainSft({
          trainer,
          tokenizer: byteTokenizer,
          records: [...records, multiTurn],
          epochs: 2,
          batchSize: 3,
          maxLength: 64,
          progress: false,
        });
      const want = (await run(cpu)).reports.filter((r) => r.kind === "step");
      const got = (await run(gpu)).reports.filter((r) => r.kind === "step");
      expect(got.map((r) => r.tokens)).toEqual(want.map((r) => r.tokens));
      got.forEach((r, i) => expect(Math.abs(r.loss - want[i].loss) / want[i].loss).toBeLessThan(1e-4));
      expect(got[1].loss).toBeLessThan(got[0].loss);
      gpu.destroy();
    } finally {
      ctx.destroy();
    }
  });
});

describe("SFT algorithm", () => {
  it("trains from datasets of chat records and writes an sft.step span per step and sft.validation spans", async () => {
    const store = new InMemoryLightningStore();
    const trainer = new CpuTrainer({ config, lr: 1e-2, lora: { config: LORA, base: baseModel() } });
    const seen: string[] = [];
    const sft = new SFT({
      trainer,
      tokenizer: byteTokenizer,
      epochs: 3,
      batchSize: 1,
      maxLength: 64,
      progress: false,
      onReport: (r) => void seen.push(r.kind),
    });
    sft.setStore(store);
    await sft.run(records, records.slice(0, 1));
    expect(sft.result!.steps).toBe(6);
    expect(seen).toEqual(["validation", ...Array(3).fill(["step", "step", "validation"]).flat()]);
    const rollouts = (await store.queryRollouts()).items;
    expect(rollouts).toHaveLength(1);
    expect(rollouts[0].metadata).toMatchObject({ kind: "sft-metrics" });
    expect(rollouts[0].status).toBe("succeeded");
    const spans = (await store.querySpans(rollouts[0].rollout_id)).items;
    const stepSpans = spans.filter((s) => s.name === "sft.step");
    expect(stepSpans).toHaveLength(6);
    expect(spans.filter((s) => s.name === "sft.validation")).toHaveLength(4);
    expect(stepSpans.map((s) => s.attributes["sft.step"])).toEqual([1, 2, 3, 4, 5, 6]);
    const stepReports = sft.reports.filter((r) => r.kind === "step");
    expect(stepSpans.map((s) => s.attributes["sft.loss"])).toEqual(stepReports.map((r) => r.loss));
    expect(stepSpans.map((s) => s.attributes["sft.tokens"])).toEqual(stepReports.map((r) => r.tokens));
    expect(sft.reports).toHaveLength(10);
  });

  it("runs under Trainer.fit with chat records as the datasets (the runners stay idle)", async () => {
    const store = new InMemoryLightningStore();
    const sft = new SFT({
      trainer: new CpuTrainer({ config, lr: 1e-2, lora: { config: LORA, base: baseModel() } }),
      tokenizer: byteTokenizer,
      epochs: 2,
      batchSize: 2,
      progress: false,
    });
    const trainer = new Trainer({
      algorithm: sft,
      nRunners: 1,
      store,
      runner: { type: "LitAgentRunner", poll_interval: 0.01, heartbeat_interval: 10 },
    });
    await trainer.fit(arithmeticAgent as never, records, { valDataset: records });
    const [metrics] = (await store.queryRollouts()).items;
    // the Trainer's default unresponsive limit is not applied to the bookkeeping rollout no runner heartbeats
    expect(metrics.config.unresponsive_seconds).toBeNull();
    expect(metrics.status).toBe("succeeded");
    const names = (await store.querySpans(metrics.rollout_id)).items.map((s) => s.name);
    expect(names).toEqual(["sft.validation", "sft.step", "sft.validation", "sft.step", "sft.validation"]);
    const steps = sft.reports.filter((r) => r.kind === "step");
    expect(steps[1].loss).toBeLessThan(steps[0].loss);
  });

  it("refuses an empty dataset, and marks its rollout failed when a record is bad", async () => {
    const store = new InMemoryLightningStore();
    const sft = new SFT({ trainer: new CpuTrainer({ config, params: baseModel() }), tokenizer: byteTokenizer, progress: false });
    sft.setStore(store);
    await expect(sft.run([], null)).rejects.toThrow(/non-empty training dataset/);
    await expect(sft.run([{ messages: [{ role: "user", content: "no answer" }] }], null)).rejects.toThrow(ValidationError);
    const rollouts = (await store.queryRollouts()).items;
    expect(rollouts.map((r) => r.status)).toEqual(["failed"]);
    expect(() => new SFT({ trainer: new CpuTrainer({ config }), tokenizer: byteTokenizer, epochs: 0 })).toThrow(/epochs/);
  });
});

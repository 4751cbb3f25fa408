import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { loadPretrained, type PretrainedModel, type TemplateMessage, type Tokenizer } from "../../src/model/index.ts";
import { parseToolCalls } from "../../src/proxy/tool-calls.ts";
import { assistantTurns, referenceConversation, startMessages, SYSTEM_PROMPT, TOOLS } from "../../examples/calc-x/conversations.ts";
import { heldOutAccuracy, sftBatch } from "../../examples/calc-x/sft.ts";
import { heldOutTasks, referenceResults, trainTasks } from "../../examples/calc-x/tasks.ts";
import { trainCalcXTokenizer } from "../../examples/calc-x/tokenizer.ts";

const MODEL = "examples/calc-x/model";

interface GoldenCase {
  name: string;
  messages: TemplateMessage[];
  tools: typeof TOOLS | null;
  add_generation_prompt: boolean;
  text: string;
  ids: number[];
}
/** Rendered and encoded by Hugging Face transformers (test/fixtures/calc-x/make_golden.py). */
const golden = JSON.parse(readFileSync("test/fixtures/calc-x/template-golden.json", "utf8")) as { cases: GoldenCase[] };

let model: PretrainedModel | undefined;
async function load(): Promise<PretrainedModel & { tokenizer: Tokenizer }> {
  model ??= await loadPretrained(MODEL);
  return model as PretrainedModel & { tokenizer: Tokenizer };
}

const decodeAll = (tok: Tokenizer, ids: number[]): string => tok.decode(ids, { skipSpecialTokens: false });

describe("calc-x policy folder", () => {
  it("loads as a Qwen2 model whose tokenizer writes hermes tool calls and ends turns with <|im_end|>", async () => {
    const m = await load();
    expect(m.architecture).toBe("Qwen2ForCausalLM");
    expect(m.config.qkv_bias).toBe(true);
    expect(m.config.vocab_size).toBe(m.tokenizer.vocabSize);
    expect(m.tokenizer.toolCallFormat).toBe("hermes");
    expect(m.tokenizer.eosTokenIds.map((id) => decodeAll(m.tokenizer, [id]))).toContain("<|im_end|>");
    // the tool tags are added tokens that decoding keeps (the parser reads them), <|im_start|> is special
    for (const tag of ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]) {
      const ids = m.tokenizer.encode(tag);
      expect(ids).toHaveLength(1);
      expect(m.tokenizer.decode(ids)).toBe(tag);
    }
    expect(m.tokenizer.decode(m.tokenizer.encode("<|im_start|>user"))).toBe("user");
  });

  it("holds the tokenizer files the tokenizer trainer makes (deterministic)", () => {
    const { files } = trainCalcXTokenizer();
    for (const [name, text] of Object.entries(files)) expect(readFileSync(`${MODEL}/${name}`, "utf8"), name).toBe(text);
  });

  it("renders and encodes conversations token for token as Hugging Face transformers does", async () => {
    const { tokenizer } = await load();
    const withTools = golden.cases.filter((c) => c.tools !== null);
    expect(withTools.length).toBeGreaterThan(3);
    for (const c of withTools) expect(c.tools).toEqual(TOOLS);
    expect(golden.cases[0]!.messages[0]!.content).toBe(SYSTEM_PROMPT);
    for (const c of golden.cases) {
      const ids = tokenizer.applyChatTemplate(c.messages, { tools: c.tools ?? undefined, addGenerationPrompt: c.add_generation_prompt });
      expect(ids, c.name).toEqual(c.ids);
      expect(decodeAll(tokenizer, ids), c.name).toBe(c.text);
    }
  });
});

describe("calc-x conversations under the template", () => {
  const tasks = [...heldOutTasks(6), ...trainTasks(6, 5)];

  it("turn k+1's prompt is turn k's prompt and response, token for token", async () => {
    const { tokenizer } = await load();
    for (const t of tasks) {
      const turns = assistantTurns(tokenizer, referenceConversation(t));
      expect(turns).toHaveLength(t.calls + 1);
      for (let k = 0; k + 1 < turns.length; k++) {
        const done = [...turns[k]!.prompt, ...turns[k]!.response];
        expect(turns[k + 1]!.prompt.slice(0, done.length)).toEqual(done);
      }
    }
  });

  it("a tool call the model writes parses into the call and re-renders as exactly those tokens", async () => {
    const { tokenizer } = await load();
    for (const t of tasks) {
      const turns = assistantTurns(tokenizer, referenceConversation(t));
      const messages = startMessages(t);
      t.expressions.forEach((expression, k) => {
        const { prompt, response } = turns[k]!;
        expect(tokenizer.applyChatTemplate(messages, { tools: TOOLS, addGenerationPrompt: true })).toEqual(prompt);
        expect(decodeAll(tokenizer, response)).toBe(
          `<tool_call>\n{"name": "calculator", "arguments": {"expression": "${expression}"}}\n</tool_call><|im_end|>`,
        );
        // what the generation engine returns (special tokens dropped) through the policy server's parser
        const parsed = parseToolCalls(tokenizer.decode(response), tokenizer.toolCallFormat);
        expect(parsed.content).toBeNull();
        expect(parsed.toolCalls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([["calculator", { expression }]]);
        messages.push({ role: "assistant", content: parsed.content, tool_calls: parsed.toolCalls });
        messages.push({ role: "tool", tool_call_id: parsed.toolCalls[0]!.id, content: referenceResults(t)[k]! });
        const next = tokenizer.applyChatTemplate(messages, { tools: TOOLS, addGenerationPrompt: true });
        expect(next.slice(0, prompt.length + response.length)).toEqual([...prompt, ...response]);
      });
    }
  });

  it("an SFT row trains on the assistant's tokens only", async () => {
    const { tokenizer } = await load();
    const t = heldOutTasks(100).find((x) => x.calls === 2)!;
    const batch = sftBatch(tokenizer, [t], tokenizer.padTokenId!);
    const response = Array.from(batch.inputIds.subarray(batch.P));
    const trained = response.filter((_, i) => batch.responseMask[i] === 1);
    const [a, b] = t.expressions;
    const call = (e: string) => `<tool_call>\n{"name": "calculator", "arguments": {"expression": "${e}"}}\n</tool_call><|im_end|>`;
    expect(decodeAll(tokenizer, trained)).toBe(`${call(a!)}${call(b!)}### ANSWER: ${t.answer} ###<|im_end|>`);
    expect(decodeAll(tokenizer, Array.from(batch.inputIds.subarray(0, batch.P)))).toMatch(/<\|im_start\|>assistant\n$/);
  });
});

describe("calc-x SFT checkpoint", () => {
  it("answers 15-60% of held-out tasks through the full tool loop (greedy)", async () => {
    const m = await load();
    const accuracy = await heldOutAccuracy({ config: m.config, params: m.weights, tokenizer: m.tokenizer }, heldOutTasks(20));
    expect(accuracy).toBeGreaterThanOrEqual(0.15);
    expect(accuracy).toBeLessThanOrEqual(0.6);
  });
});

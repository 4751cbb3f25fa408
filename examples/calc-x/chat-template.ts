/**
 * The Calc-X policy's chat template: ChatML in Qwen2.5's hermes style, with a shorter preamble (every
 * token costs a tiny CPU model a position). Tools are JSON lines inside `<tools></tools>` at the end of
 * the system turn; an assistant's tool calls are `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`
 * after its content; consecutive tool results form one user turn of `<tool_response>` blocks. Without a
 * system message no system turn is written (Qwen writes a default one).
 *
 * What the model generates after the generation prompt (`<|im_start|>assistant\n`) is exactly what this
 * template writes back for that message when its content is empty, so each turn's prompt extends the
 * previous prompt and response token for token.
 */

/** The special tokens (`special: true`: skipped when decoding). */
export const SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] as const;
/** Added tokens that stay in decoded text (the tool-call parser reads them), as in Qwen2.5. */
export const TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"] as const;

export const EOS_TOKEN = "<|im_end|>";
export const PAD_TOKEN = "<|endoftext|>";

export const CHAT_TEMPLATE = [
  "{%- if tools %}",
  "{{- '<|im_start|>system\\n' }}",
  "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n' }}{%- endif %}",
  "{{- '<tools>' }}",
  "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}",
  "{{- '\\n</tools><|im_end|>\\n' }}",
  "{%- elif messages[0]['role'] == 'system' %}",
  "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}",
  "{%- endif %}",
  "{%- for message in messages %}",
  '{%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}',
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}",
  '{%- elif message.role == "assistant" %}',
  "{{- '<|im_start|>' + message.role }}",
  "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}",
  "{%- for tool_call in message.tool_calls %}",
  "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}",
  "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}",
  "{%- endfor %}",
  "{{- '<|im_end|>\\n' }}",
  '{%- elif message.role == "tool" %}',
  "{%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}{{- '<|im_start|>user' }}{%- endif %}",
  "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}",
  "{%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}{{- '<|im_end|>\\n' }}{%- endif %}",
  "{%- endif %}",
  "{%- endfor %}",
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
].join("\n");

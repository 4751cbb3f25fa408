// The incremental decoder against the quadratic definition it replaces (every prefix decoded whole), on
// the byte tokenizer, Qwen2.5's real tokenizer (text and random ids, which break UTF-8 everywhere), a
// WordPiece tokenizer whose pieces do not concatenate, and a tokenizer the window cannot follow.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Rng } from "../../src/model/init.ts";
import { createHfTokenizer } from "../../src/model/hf/index.ts";
import { byteTokenizer } from "../../src/model/tokenizer.ts";
import type { Tokenizer } from "../../src/model/tokenizer-api.ts";
import { decodeWithOffsets, findStopString, IncrementalDecoder } from "../../src/model/detokenize.ts";
import { applyStopStrings, finishGeneration } from "../../src/model/generation.ts";
import { textDeltas } from "../../src/proxy/policy-server.ts";
import { QWEN_TOKENIZER_DIR } from "./hf/qwen-files.ts";

const qwen = createHfTokenizer({
  tokenizerJson: JSON.parse(readFileSync(join(QWEN_TOKENIZER_DIR, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(join(QWEN_TOKENIZER_DIR, "tokenizer_config.json"), "utf8")),
});

const WORDS = ["[UNK]", "hello", "world", "##s", "##ing", "play", ",", "!", "the", "cat"];
const wordPiece = createHfTokenizer({
  tokenizerJson: {
    version: "1.0",
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: { type: "Whitespace" },
    post_processor: null,
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: {
      type: "WordPiece",
      unk_token: "[UNK]",
      continuing_subword_prefix: "##",
      max_input_chars_per_word: 100,
      vocab: Object.fromEntries(WORDS.map((w, i) => [w, i])),
    },
  },
  tokenizerConfig: null,
});

/** Decodes as a whole but renders its text reversed: no window can follow it. */
const reversed: Tokenizer = { ...byteTokenizer, decode: (ids, o) => [...byteTokenizer.decode(ids, o)].reverse().join("") };

/** The definition: the stop string first seen in the text of the shortest prefix, cut before it. An
 * incomplete last character does not count yet (its U+FFFD is not text: random bytes hit this). */
function stopByPrefixes(tok: Tokenizer, ids: number[], stop: string[]): { keep: number; text: string } | null {
  for (let k = 1; k <= ids.length; k++) {
    let text = tok.decode(ids.slice(0, k));
    if (k < ids.length) while (text.endsWith("\uFFFD")) text = text.slice(0, -1);
    let at = -1;
    for (const s of stop) {
      const i = text.indexOf(s);
      if (i >= 0 && (at < 0 || i < at)) at = i;
    }
    if (at >= 0) return { keep: k, text: text.slice(0, at) };
  }
  return null;
}

/** The definition of a token's end: its prefix decoded whole, an incomplete last character not counted. */
function endsByPrefixes(tok: Tokenizer, ids: number[]): number[] {
  const full = tok.decode(ids);
  let last = 0;
  return ids.map((_, i) => {
    let t = tok.decode(ids.slice(0, i + 1));
    if (i + 1 < ids.length) while (t.endsWith("\uFFFD")) t = t.slice(0, -1);
    last = Math.max(last, Math.min(t.length, full.length));
    return i + 1 === ids.length ? full.length : last;
  });
}

const TEXTS = [
  "The quick brown fox jumps over the lazy dog.",
  "Zürich 🌧 — naïve café; 日本語のテキスト。 Привет, мир! 👩‍👩‍👧",
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
  "def f(x):\n    return x ** 2  # squares\n\n\n",
  "<|im_start|>assistant\nhi<|im_end|>",
];

function randomIds(rng: Rng, n: number, vocab: number): number[] {
  return Array.from({ length: n }, () => Math.floor(rng.uniform() * vocab));
}

describe("decodeWithOffsets", () => {
  it("gives each prefix's text on Qwen2.5's tokenizer: real texts and random ids (broken UTF-8, special tokens)", () => {
    const rng = new Rng(3);
    const cases = [...TEXTS.map((t) => qwen.encode(t)), ...Array.from({ length: 20 }, (_, i) => randomIds(rng, 5 + 3 * i, qwen.vocabSize))];
    // byte-level tokens of a 4-byte emoji, split across ids: nothing until the character is whole
    cases.push(qwen.encode("a🌧b").flatMap((id) => [id]));
    for (const ids of cases) {
      const d = decodeWithOffsets(qwen, ids);
      expect(d.text).toBe(qwen.decode(ids));
      expect(d.ends).toEqual(endsByPrefixes(qwen, ids));
    }
  });

  it("on the byte tokenizer, a WordPiece tokenizer (pieces joined by spaces) and one no window can follow", () => {
    const rng = new Rng(5);
    const bytes = [...TEXTS.map((t) => byteTokenizer.encode(t)), ...Array.from({ length: 10 }, () => randomIds(rng, 40, 263))];
    for (const ids of bytes) expect(decodeWithOffsets(byteTokenizer, ids).ends).toEqual(endsByPrefixes(byteTokenizer, ids));
    const words = [
      wordPiece.encode("hello world, the cat plays playing!"),
      ...Array.from({ length: 10 }, () => randomIds(rng, 12, WORDS.length)),
    ];
    for (const ids of words) {
      const d = decodeWithOffsets(wordPiece, ids);
      expect(d.text).toBe(wordPiece.decode(ids));
      expect(d.ends).toEqual(endsByPrefixes(wordPiece, ids));
    }
    expect(decodeWithOffsets(wordPiece, wordPiece.encode("hello worlds")).text).toBe("hello worlds");
    const ids = byteTokenizer.encode("abcdef");
    expect(decodeWithOffsets(reversed, ids)).toEqual({ text: "fedcba", ends: endsByPrefixes(reversed, ids) });
  });

  it("pushes one token at a time: the deltas are the text, a split character arrives whole", () => {
    const d = new IncrementalDecoder(byteTokenizer);
    const deltas = byteTokenizer.encode("a€").map((id) => d.push(id));
    expect(deltas).toEqual(["a", "", "", "€"]);
    const cut = new IncrementalDecoder(byteTokenizer);
    for (const id of byteTokenizer.encode("x€").slice(0, 3)) cut.push(id);
    expect(cut.text).toBe("x");
    expect(cut.flush()).toBe("\uFFFD");
  });
});

describe("stop strings and stream deltas", () => {
  it("cut where decoding every prefix would, on random outputs and random stop strings", () => {
    const rng = new Rng(11);
    for (let trial = 0; trial < 60; trial++) {
      const tok = trial % 3 === 0 ? byteTokenizer : qwen;
      const ids = tok === qwen ? qwen.encode(TEXTS[trial % TEXTS.length]) : randomIds(rng, 30, 256);
      const text = tok.decode(ids);
      const pick = (): string => {
        const at = Math.floor(rng.uniform() * text.length);
        return text.slice(at, at + 1 + Math.floor(rng.uniform() * 4));
      };
      const stop = [pick(), pick(), trial % 2 ? "never there ∅" : pick()].filter((s) => s.length > 0);
      expect(applyStopStrings(ids, stop, tok)).toEqual(stopByPrefixes(tok, ids, stop));
    }
    expect(findStopString(decodeWithOffsets(qwen, qwen.encode("one two three")), ["", "zzz"])).toBeNull();
  });

  it("stream deltas add up to the (cut) text and carry every token id", () => {
    for (const t of TEXTS) {
      const ids = [...qwen.encode(t), 151645];
      const g = finishGeneration(
        ids,
        ids.map(() => 0),
        "stop",
        [t.slice(10, 13)],
        qwen,
      );
      const deltas = textDeltas(g, qwen);
      expect(deltas.map((d) => d.text).join("")).toBe(g.text);
      expect(deltas.flatMap((d) => d.tokenIds)).toEqual(g.tokenIds);
    }
  });

  it("is linear: 8000 tokens of stop-string scan and stream deltas take well under a second", () => {
    let ids: number[] = [];
    while (ids.length < 8000) ids = ids.concat(qwen.encode(TEXTS[1]));
    ids = ids.slice(0, 8000);
    const t0 = performance.now();
    const g = finishGeneration(
      ids,
      ids.map(() => 0),
      "length",
      ["never there ∅"],
      qwen,
    );
    textDeltas(g, qwen);
    // Decoding every prefix took ~3 s for each of the two at 4000 tokens (docs/serving.md).
    expect(performance.now() - t0).toBeLessThan(1500);
  });
});

/**
 * Rewrites of `tokenizer.json` parts that `@huggingface/tokenizers` (0.2) reads differently from the
 * Rust `tokenizers` crate, into equivalent parts it reads the Rust way. Each rewrite is checked
 * against the Rust crate's ids (docs/tokenizers.md, "How they are checked").
 *
 * - `Digits`: Rust isolates every `char::is_numeric` character (Unicode categories Nd, Nl, No: `½`,
 *   `²`, `Ⅻ`, `٣` too), the JS port only ASCII `0-9`. SmolLM2's pre-tokenizer starts with
 *   `Digits { individual_digits: true }`. The same split as a `Split` on `\p{N}` (one numeric
 *   character) or `\p{N}+` (a run), `Isolated`, which the JS port runs with Unicode regexes.
 */

type Json = Record<string, unknown>;

function rewritePreTokenizer(p: unknown): unknown {
  if (!p || typeof p !== "object") return p;
  const node = p as Json;
  if (node.type === "Digits")
    return {
      type: "Split",
      pattern: { Regex: node.individual_digits === true ? "\\p{N}" : "\\p{N}+" },
      behavior: "Isolated",
      invert: false,
    };
  if (node.type === "Sequence" && Array.isArray(node.pretokenizers))
    return { ...node, pretokenizers: node.pretokenizers.map(rewritePreTokenizer) };
  return node;
}

/** `tokenizer.json` with the rewrites above applied (a shallow copy; the input is not changed). */
export function compatTokenizerJson(json: Json): Json {
  return json.pre_tokenizer ? { ...json, pre_tokenizer: rewritePreTokenizer(json.pre_tokenizer) } : json;
}

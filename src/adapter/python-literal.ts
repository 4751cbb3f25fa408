/**
 * A small parser for Python literals (`repr` output): lists, tuples, dicts, quoted strings with escapes,
 * ints, floats, True/False/None. LiteLLM writes token ids this way (`"[1, 2, 3]"`,
 * `"[{'token_ids': [1, 2], 'logprobs': None}]"`). Invalid text returns the string unchanged.
 */
import { setOwn } from "../types/own-keys.ts";

export function parsePythonLiteral(input: unknown): unknown {
  if (typeof input !== "string") return input;
  try {
    const p = new Parser(input);
    const v = p.value();
    p.ws();
    if (p.i !== input.length) return input;
    return v;
  } catch {
    return input;
  }
}

/** A Python int or float literal at a given position (sticky: no copying of the rest of the text). */
const NUMBER = /[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)/y;
const ESCAPES: Record<string, string> = { n: "\n", t: "\t", r: "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0", b: "\b", f: "\f" };

class Parser {
  i = 0;
  constructor(readonly s: string) {}

  ws(): void {
    while (this.i < this.s.length && /\s/.test(this.s[this.i])) this.i++;
  }

  fail(): never {
    throw new Error(`python literal: unexpected input at ${this.i}`);
  }

  value(): unknown {
    this.ws();
    const c = this.s[this.i];
    if (c === "[") return this.seq("]");
    if (c === "(") return this.seq(")");
    if (c === "{") return this.dict();
    if (c === "'" || c === '"') return this.str();
    for (const [word, v] of [
      ["True", true],
      ["False", false],
      ["None", null],
    ] as const) {
      if (this.s.startsWith(word, this.i)) {
        this.i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(this.s);
    if (!m) this.fail();
    this.i += m[0].length;
    return Number(m[0]);
  }

  private items(close: string, item: () => void): void {
    this.i++; // opening bracket
    for (;;) {
      this.ws();
      if (this.s[this.i] === close) {
        this.i++;
        return;
      }
      item();
      this.ws();
      if (this.s[this.i] === ",") {
        this.i++;
        continue;
      }
      if (this.s[this.i] === close) {
        this.i++;
        return;
      }
      this.fail();
    }
  }

  seq(close: string): unknown[] {
    const out: unknown[] = [];
    this.items(close, () => out.push(this.value()));
    return out;
  }

  dict(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    this.items("}", () => {
      const k = this.value();
      this.ws();
      if (this.s[this.i] !== ":") this.fail();
      this.i++;
      setOwn(out, String(k), this.value());
    });
    return out;
  }

  str(): string {
    const q = this.s[this.i++];
    let out = "";
    while (this.i < this.s.length) {
      const c = this.s[this.i++];
      if (c === q) return out;
      if (c !== "\\") {
        out += c;
        continue;
      }
      const e = this.s[this.i++];
      if (e === "x" || e === "u") {
        const len = e === "x" ? 2 : 4;
        out += String.fromCharCode(parseInt(this.s.slice(this.i, this.i + len), 16));
        this.i += len;
      } else out += ESCAPES[e] ?? "\\" + e;
    }
    return this.fail();
  }
}

/** An array whose every element is an integer (an empty array qualifies). */
export function isIntArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((x) => typeof x === "number" && Number.isInteger(x));
}

/** Token ids given as a real array or a Python-repr string (docs/departures.md#13), else null. */
export function tokenIds(v: unknown): number[] | null {
  const parsed = parsePythonLiteral(v);
  return isIntArray(parsed) ? parsed : null;
}

/**
 * The nesting-depth check of JSON request bodies (src/server/json-body.ts): what it adds to parsing a
 * span batch, against the alternative of scanning the body text for brackets before JSON.parse, and what
 * a refused 32 MiB body of brackets costs each way (beside a flat 32 MiB body, which the body limit
 * allows whatever the depth check does).
 *
 * Run: `npx tsx bench/json-depth.ts`
 */
import { checkJsonDepth } from "../src/server/json-body.ts";
import { MAX_JSON_DEPTH } from "../src/store/owned.ts";
import { makeLlmSpan } from "./_llm-span.ts";

/** The alternative: brackets counted outside strings, strings skipped with indexOf. */
function scanDepth(text: string, max: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      let j = i + 1;
      for (;;) {
        j = text.indexOf('"', j);
        if (j < 0) return true;
        let k = j - 1;
        while (text.charCodeAt(k) === 92) k--;
        if ((j - 1 - k) % 2 === 0) break;
        j++;
      }
      i = j;
    } else if (c === 91 || c === 123) {
      if (++depth > max) return false;
    } else if (c === 93 || c === 125) depth--;
  }
  return true;
}

const best = (runs: number, f: () => void): number => {
  let min = Infinity;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    f();
    min = Math.min(min, performance.now() - t0);
  }
  return min;
};

const spans = Array.from({ length: 2_000 }, (_, i) => {
  const s = makeLlmSpan("ro-000000000001", "at-00000001", i + 1);
  s.attributes["gen_ai.prompt.0.content"] = 'What is 2 + 2? "Think" step by step. '.repeat(40);
  s.attributes["llm.token_ids"] = Array.from({ length: 200 }, (_, k) => k * 7);
  return s;
});
const body = JSON.stringify({ spans });
const parsed = JSON.parse(body) as unknown;
const parse = best(20, () => JSON.parse(body));
const walk = best(20, () => checkJsonDepth(parsed));
const scan = best(20, () => scanDepth(body, MAX_JSON_DEPTH));
console.log(
  `span batch (${(body.length / 2 ** 20).toFixed(1)} MiB, 2,000 spans): JSON.parse ${parse.toFixed(1)} ms; ` +
    `depth check on the parsed value ${walk.toFixed(1)} ms (${((walk / parse) * 100).toFixed(0)}% of the parse); text scan ${scan.toFixed(1)} ms (${((scan / parse) * 100).toFixed(0)}%) (best of 20)`,
);

const levels = 16 * 2 ** 20;
const brackets = "[".repeat(levels) + "]".repeat(levels);
const parseDeep = best(1, () => {
  try {
    checkJsonDepth(JSON.parse(brackets));
  } catch {
    // refused, as it must be
  }
});
const scanDeep = best(3, () => scanDepth(brackets, MAX_JSON_DEPTH));
// For scale: what the body limit lets any 32 MiB body cost, nested or not.
const flat = "[" + "[],".repeat((2 * levels) / 3 - 1) + "[]]";
const parseFlat = best(1, () => checkJsonDepth(JSON.parse(flat)));
console.log(
  `a 32 MiB body of nested brackets: parsed then refused in ${parseDeep.toFixed(0)} ms; the text scan refuses it in ${scanDeep.toFixed(2)} ms; ` +
    `a 32 MiB body of flat empty arrays is parsed and taken in ${parseFlat.toFixed(0)} ms`,
);

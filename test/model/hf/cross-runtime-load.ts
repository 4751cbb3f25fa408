/**
 * Loads each golden Hugging Face fixture with `loadPretrained` from its folder (the platform's ranged
 * reads into the weights' own memory) on this runtime and prints one JSON line: per fixture, the worst
 * logit difference from the golden and the greedy tokens. Run with `npx tsx`, `deno run -A` or `bun`;
 * test/model/hf/runtimes.test.ts runs all three and compares with the goldens.
 */
import { generate } from "../../../src/model/generate.ts";
import { loadPretrained } from "../../../src/model/hf/index.ts";
import { forward, sequenceInput } from "../../../src/model/reference/model.ts";
import { platform } from "../../../src/platform/index.ts";

const FIXTURES = ["llama-tied-llama3", "llama-untied-gqa-sharded", "qwen2-bias-tied", "qwen3-qknorm-headdim"];

interface Golden {
  ids: number[];
  logits: number[][];
  prompt: number[];
  greedy: number[];
}

const report: Record<string, unknown> = { runtime: platform.runtime };
for (const name of FIXTURES) {
  const dir = `test/fixtures/hf/${name}`;
  const golden = JSON.parse(new TextDecoder().decode(await platform.files().readFile(`${dir}/golden.json`))) as Golden;
  const model = await loadPretrained(dir);
  const out = forward(model.config, model.weights, sequenceInput(golden.ids)).logits;
  const V = model.config.vocab_size;
  let worst = 0;
  golden.logits.forEach((row, t) => row.forEach((v, j) => (worst = Math.max(worst, Math.abs(out[t * V + j] - v)))));
  const greedy = generate(model.config, model.weights, golden.prompt, { maxTokens: golden.greedy.length, temperature: 0, stop: [] });
  report[name] = { worst, greedy: greedy.tokens };
}
console.log(JSON.stringify(report));

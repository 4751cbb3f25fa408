/**
 * The limits of JSON request bodies (src/server/json-scan.ts, docs/http-api.md "Limits"): the scan of the
 * text for nesting depth and keys per object, on a typical span batch beside `JSON.parse` and beside the
 * whole `POST /v1/agl/spans/batch`; the check of a runner's 13-span body, too small to be scanned; how
 * fast it refuses the 12 MB object with a million keys beside what parsing that body alone costs; what
 * bodies of the widest objects it lets through cost per MiB against span batches; and a 32 MiB body of
 * nested brackets. All in process (`app.fetch`, in-memory store), so a request's time is the time it
 * holds the event loop.
 *
 * Run: `npx tsx bench/json-limits.ts`
 */
import { createStoreApp } from "../src/server/index.ts";
import { MAX_JSON_KEYS, scanJsonLimits } from "../src/server/json-scan.ts";
import { InMemoryLightningStore } from "../src/store/memory.ts";
import { MAX_JSON_DEPTH } from "../src/store/owned.ts";
import { makeLlmSpan } from "./_llm-span.ts";

const best = (runs: number, f: () => void): number => {
  let min = Infinity;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    f();
    min = Math.min(min, performance.now() - t0);
  }
  return min;
};
const MiB = 2 ** 20;
const mib = (text: string) => text.length / MiB;

const store = new InMemoryLightningStore();
const app = createStoreApp(store, { metrics: false });
/** The best time of `runs` requests, each with the body `bodyFor(round)` built beforehand; all must answer `status`. */
async function bestRequest(
  runs: number,
  path: string,
  status: number,
  bodyFor: (round: number) => Promise<string> | string,
  prefer?: string,
) {
  let min = Infinity;
  for (let round = 0; round < runs; round++) {
    const body = await bodyFor(round);
    const headers: Record<string, string> = { "content-type": "application/json", ...(prefer ? { prefer } : {}) };
    const t0 = performance.now();
    const res = await app.fetch(new Request(`http://store${path}`, { method: "POST", headers, body }));
    await res.arrayBuffer();
    min = Math.min(min, performance.now() - t0);
    if (res.status !== status) throw new Error(`${path} answered ${res.status}, not ${status}`);
  }
  return min;
}

// A typical span batch: 2,000 LLM-call spans with a 1.5 KB prompt and 200 token ids each; a fresh rollout per round.
const batchFor = async (): Promise<string> => {
  const r = await store.startRollout({ task: 1 });
  const spans = Array.from({ length: 2_000 }, (_, i) => {
    const s = makeLlmSpan(r.rollout_id, r.attempt.attempt_id, i + 1);
    s.attributes["gen_ai.prompt.0.content"] = 'What is 2 + 2? "Think" step by step. '.repeat(40);
    s.attributes["llm.token_ids"] = Array.from({ length: 200 }, (_, k) => k * 7);
    return s;
  });
  return JSON.stringify({ spans });
};
const batch = await batchFor();
const parse = best(20, () => JSON.parse(batch));
const scan = best(20, () => scanJsonLimits(batch, MAX_JSON_DEPTH, MAX_JSON_KEYS));
const batchRequest = await bestRequest(5, "/v1/agl/spans/batch", 201, batchFor, "return=minimal");
console.log(
  `span batch (${mib(batch).toFixed(1)} MiB, 2,000 spans): JSON.parse ${parse.toFixed(1)} ms; the limits scan ${scan.toFixed(1)} ms ` +
    `(${((scan / parse) * 100).toFixed(0)}% of the parse, ${((scan / batchRequest) * 100).toFixed(1)}% of the whole request, ${batchRequest.toFixed(0)} ms) (best of 20 / 5)`,
);

// What most requests are: a runner's finished attempt of 13 spans, too small to pass either limit, so not scanned.
const attempt = await store.startRollout({ task: 1 });
const finish = JSON.stringify({
  spans: Array.from({ length: 13 }, (_, i) => makeLlmSpan(attempt.rollout_id, attempt.attempt.attempt_id, i + 1)),
});
const parseFinish = best(2_000, () => JSON.parse(finish));
const checkFinish = best(2_000, () => scanJsonLimits(finish, MAX_JSON_DEPTH, MAX_JSON_KEYS));
console.log(
  `13-span body (${(finish.length / 1024).toFixed(1)} KiB): JSON.parse ${(1000 * parseFinish).toFixed(1)} us; the limits check ` +
    `${(1000 * checkFinish).toFixed(2)} us (${((checkFinish / parseFinish) * 100).toFixed(1)}% of the parse) (best of 2,000)`,
);

const wide = (n: number, prefix = "k") => `{${Array.from({ length: n }, (_, i) => `"${prefix}${i}":${i % 10}`).join(",")}}`;
const million = `{"input":${wide(1_000_000)}}`;
const refused = await bestRequest(5, "/v1/agl/rollouts", 400, () => million);
const parseMillion = best(2, () => JSON.parse(million));
console.log(
  `one object with 1,000,000 keys (${mib(million).toFixed(1)} MiB): refused in ${refused.toFixed(1)} ms; JSON.parse alone of that body takes ${parseMillion.toFixed(0)} ms ` +
    `(${(parseMillion / refused).toFixed(0)}x) (best of 5 / 2)`,
);

// Bodies of the widest objects let through, against span batches, per MiB of body.
const widest = (round: number) => `{"input":[${Array.from({ length: 60 }, (_, i) => wide(MAX_JSON_KEYS, `r${round}o${i}.`)).join(",")}]}`;
const widestBody = widest(0);
const widestRequest = await bestRequest(5, "/v1/agl/rollouts", 201, widest);
const perMiB = (ms: number, text: string) => ms / mib(text);
console.log(
  `60 objects of ${MAX_JSON_KEYS.toLocaleString("en-US")} keys (${mib(widestBody).toFixed(1)} MiB) as a rollout input: ${widestRequest.toFixed(0)} ms, ` +
    `${perMiB(widestRequest, widestBody).toFixed(0)} ms/MiB against ${perMiB(batchRequest, batch).toFixed(0)} ms/MiB for the span batch ` +
    `(${(perMiB(widestRequest, widestBody) / perMiB(batchRequest, batch)).toFixed(1)}x) (best of 5)`,
);

// Just under the 32 MiB body limit with the envelope.
const levels = 16 * MiB - 8;
const brackets = "[".repeat(levels) + "]".repeat(levels);
const deepRefused = await bestRequest(3, "/v1/agl/rollouts", 400, () => `{"input":${brackets}}`);
// For scale: what the body limit lets any 32 MiB body cost, nested or not.
const flat = "[" + "[],".repeat(Math.floor((2 * levels) / 3) - 1) + "[]]";
const flatTaken = await bestRequest(1, "/v1/agl/rollouts", 201, () => `{"input":${flat}}`);
console.log(
  `a 32 MiB body of nested brackets is refused in ${deepRefused.toFixed(1)} ms; a 32 MiB body of flat empty arrays is taken in ${flatTaken.toFixed(0)} ms`,
);
await store.close();

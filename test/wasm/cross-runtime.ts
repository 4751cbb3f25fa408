/**
 * Cross-runtime check: runs every kernel family on fixed seeded inputs and prints one JSON line with a
 * digest of the Wasm outputs (bit-exact) and whether they match the plain-TS reference (integers exactly,
 * floats within 1e-6 relative). Run with `npx tsx`, `npx deno run -A` or `npx bun`; test/wasm/runtimes.test.ts
 * runs all three and compares.
 */
import { instantiateWasmCore, referenceKernels, toRagged, wasmKernels, type Kernels } from "../../src/wasm/index.ts";
import { randomFloats, randomGroups, randomMask, randomRewards, rng } from "./random.ts";
import { digest, type Out } from "./output-digest.ts";

function run(k: Kernels): Out {
  const r = rng(20251122);
  const B = 37,
    T = 53;
  const mask = randomMask(r, B, T);
  const rewards = randomRewards(r, B, T, mask);
  const values = randomFloats(r, B * T, -1, 1);
  const groups = randomGroups(r, B);
  const logp = randomFloats(r, B * T, -8, 0),
    ref = randomFloats(r, B * T, -8, 0);
  const out: Out = {};
  const keep = (name: string, x: ArrayLike<number>) => {
    out[name] = Array.from(x);
  };
  keep("grpo", k.grpo({ rewards, mask, groups, B, T }).advantages);
  keep("grpo_nostd", k.grpo({ rewards, mask, groups, B, T }, false).advantages);
  keep("rloo", k.rloo({ rewards, mask, groups, B, T }).advantages);
  keep("opo", k.opo({ rewards, mask, groups, B, T }).advantages);
  keep("gpg", k.gpg({ rewards, mask, groups, B, T }).advantages);
  const pairs = Int32Array.from({ length: B - 1 }, (_, i) => i >> 1); // 18 groups of two rows
  keep(
    "grpo_passk",
    k.grpoPassk({ rewards: rewards.subarray(0, (B - 1) * T), mask: mask.subarray(0, (B - 1) * T), groups: pairs, B: B - 1, T }).advantages,
  );
  keep("rpp_baseline", k.reinforcePlusPlusBaseline({ rewards, mask, groups, B, T }).advantages);
  const g = k.gae({ rewards, values, mask, B, T }, 0.99, 0.95);
  keep("gae_adv", g.advantages);
  keep("gae_ret", g.returns);
  keep("rpp", k.reinforcePlusPlus({ rewards, mask, B, T }, 0.9).advantages);
  keep("remax", k.remax({ rewards, mask, baselines: values.subarray(0, B), B, T }).advantages);
  for (const kind of ["k1", "abs", "k2", "k3"] as const) keep(`kl_${kind}`, k.klPenalty(logp, ref, kind));
  keep("whiten", k.maskedWhiten(values, mask, true));
  const rows = (n: number, max: number) => Array.from({ length: n }, () => Array.from({ length: r.int(0, max) }, () => r.int(1, 1000)));
  const layout = k.batchLayout({
    prompts: toRagged(rows(50, 20)),
    responses: toRagged(rows(50, 20)),
    rewards: randomFloats(r, 50, 0, 1),
    maxPromptLength: 16,
    maxResponseLength: 12,
    padTokenId: 0,
  });
  keep("layout_input_ids", layout.inputIds);
  keep("layout_position_ids", layout.positionIds);
  keep("layout_scores", layout.tokenLevelScores);
  const n = 300;
  const parent = Int32Array.from({ length: n }, (_, i) => (i === 0 ? -1 : r.int(0, i - 1)));
  const start = Float64Array.from({ length: n }, () => r.int(0, 100)),
    end = Float64Array.from(start, (s) => s + r.int(0, 30));
  const calls = k.extractCalls({
    n,
    root: 0,
    parent,
    start,
    end,
    flags: Int32Array.from({ length: n }, () => r.int(0, 31)),
    agent: Int32Array.from({ length: n }, () => r.int(0, 3)),
    responseId: Int32Array.from({ length: n }, () => r.int(-1, 9)),
    nResponseIds: 10,
    reward: Float64Array.from({ length: n }, () => (r.bool(0.2) ? r.float(0, 1) : NaN)),
    options: 1 | 4 | 8,
  });
  keep("trace_calls", calls.calls);
  keep("trace_labels", calls.labels);
  keep("trace_rewards", calls.rewards);
  return out;
}

function matches(a: Out, b: Out): string[] {
  const bad: string[] = [];
  for (const key of Object.keys(b)) {
    const x = Array.from(a[key]),
      y = Array.from(b[key]);
    const ok =
      x.length === y.length &&
      x.every((v, i) => (Number.isNaN(y[i]) ? Number.isNaN(v) : Math.abs(v - y[i]) <= 1e-6 * Math.max(Math.abs(v), Math.abs(y[i])) + 1e-9));
    if (!ok) bad.push(key);
  }
  return bad;
}

const runtime = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";
const wasmOut = run(wasmKernels(await instantiateWasmCore()));
const refOut = run(referenceKernels);
console.log(JSON.stringify({ runtime, digest: digest(wasmOut), referenceDigest: digest(refOut), mismatches: matches(wasmOut, refOut) }));

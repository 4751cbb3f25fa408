/**
 * Wasm core vs its plain-TS reference, same inputs, same run. For each kernel family: best-of-runs time of the
 * reference, of the Wasm kernel with inputs already in Wasm memory (the hot path: callers fill arena
 * views), of the Wasm kernel when inputs are copied in from JS arrays, and the speed-up ratios.
 * Sizes: advantages 4,096 rows x 1,024 tokens; batch layout 2,048 rows (P = R = 1,024); traces of 10k spans.
 * Run: `npm run bench -- wasm` (or `npx tsx bench/wasm.ts`).
 */
import { instantiateWasmCoreSync, referenceKernels as ref, toRagged, wasmKernels, type Kernels } from "../src/wasm/index.ts";
import { TraceTripletAdapter } from "../src/adapter/index.ts";
import { spanFromAttributes, type Span } from "../src/types/span.ts";
import { randomFloats, randomMask, randomRewards, rng } from "../test/wasm/random.ts";

const core = instantiateWasmCoreSync();
const wasm = wasmKernels(core);

/** Best of several runs: on a shared machine the minimum is the figure least disturbed by other load. */
function best(f: () => unknown, minRuns = 5, minMs = 400): number {
  f(); // warm-up (JIT tiers, Wasm tier-up)
  const times: number[] = [];
  const t0 = performance.now();
  while (times.length < minRuns || (performance.now() - t0 < minMs && times.length < 50)) {
    const a = performance.now();
    f();
    times.push(performance.now() - a);
  }
  return Math.min(...times);
}

const rows: string[][] = [["kernel", "size", "reference ms", "wasm ms", "ratio", "wasm+copy-in ms", "ratio"]];
function report(name: string, size: string, refMs: number, wasmMs: number, copyMs: number): void {
  rows.push([
    name,
    size,
    refMs.toFixed(2),
    wasmMs.toFixed(2),
    `${(refMs / wasmMs).toFixed(2)}x`,
    copyMs.toFixed(2),
    `${(refMs / copyMs).toFixed(2)}x`,
  ]);
}

// ---- advantages and penalties: 4,096 x 1,024
{
  const r = rng(1);
  const B = 4096,
    T = 1024,
    n = B * T;
  const mask = randomMask(r, B, T);
  const rewards = randomRewards(r, B, T, mask);
  const values = randomFloats(r, n, -1, 1);
  const logp = randomFloats(r, n, -5, 0),
    refp = randomFloats(r, n, -5, 0);
  const groups = Int32Array.from({ length: B }, (_, i) => i >> 3); // 512 prompts x 8 rollouts
  const baselines = randomFloats(r, B, 0, 1);
  // the same inputs living in Wasm memory (written once)
  core.reserve(12 * n * 4 + 2 * B * 4 + (1 << 20)); // inputs and every kernel's outputs: no growth, no detached views
  const put = (x: Float32Array) => {
    const v = core.inputF32(x.length);
    v.set(x);
    return v;
  };
  const inW = { mask: put(mask), rewards: put(rewards), values: put(values), logp: put(logp), ref: put(refp), baselines: put(baselines) };
  const groupsW = core.inputI32(B);
  groupsW.set(groups);
  const size = `${B}x${T}`;
  const fam: [string, (k: Kernels, x: typeof inW, g: Int32Array) => unknown][] = [
    ["GRPO", (k, x, g) => k.grpo({ rewards: x.rewards, mask: x.mask, groups: g, B, T })],
    ["GRPO (no std)", (k, x, g) => k.grpo({ rewards: x.rewards, mask: x.mask, groups: g, B, T }, false)],
    ["RLOO", (k, x, g) => k.rloo({ rewards: x.rewards, mask: x.mask, groups: g, B, T })],
    ["OPO", (k, x, g) => k.opo({ rewards: x.rewards, mask: x.mask, groups: g, B, T })],
    ["GPG", (k, x, g) => k.gpg({ rewards: x.rewards, mask: x.mask, groups: g, B, T })],
    ["GRPO pass@k", (k, x, g) => k.grpoPassk({ rewards: x.rewards, mask: x.mask, groups: g, B, T })],
    ["REINFORCE++ baseline", (k, x, g) => k.reinforcePlusPlusBaseline({ rewards: x.rewards, mask: x.mask, groups: g, B, T })],
    ["GAE + whitening", (k, x) => k.gae({ rewards: x.rewards, values: x.values, mask: x.mask, B, T }, 1, 0.95)],
    ["REINFORCE++", (k, x) => k.reinforcePlusPlus({ rewards: x.rewards, mask: x.mask, B, T }, 0.99)],
    ["ReMax", (k, x) => k.remax({ rewards: x.rewards, mask: x.mask, baselines: x.baselines, B, T })],
    ["KL k1", (k, x) => k.klPenalty(x.logp, x.ref, "k1")],
    ["KL k2", (k, x) => k.klPenalty(x.logp, x.ref, "k2")],
    ["KL k3", (k, x) => k.klPenalty(x.logp, x.ref, "k3")],
    ["in-reward KL (k3)", (k, x) => k.applyKlPenalty({ scores: x.rewards, logp: x.logp, ref: x.ref, mask: x.mask, B, T }, "k3", 0.01)],
    ["masked whitening", (k, x) => k.maskedWhiten(x.values, x.mask, true)],
    ["rollout broadcast", (k, x) => k.broadcastScalars(x.baselines, groups, x.mask, B, T)],
  ];
  const inJs = { mask, rewards, values, logp, ref: refp, baselines };
  for (const [name, f] of fam) {
    report(
      name,
      size,
      best(() => f(ref, inJs, groups)),
      best(() => f(wasm, inW, groupsW)),
      best(() => f(wasm, inJs, groups)),
    );
  }
  core.releaseInputs();
}

// ---- batch layout: 2,048 rows, P = R = 1,024, ragged lengths up to 1.5x the limits
{
  const r = rng(2);
  const N = 2048,
    P = 1024,
    R = 1024;
  const row = (max: number) => Int32Array.from({ length: r.int(1, max) }, () => r.int(1, 150000));
  const input = {
    prompts: toRagged(Array.from({ length: N }, () => row(1536))),
    responses: toRagged(Array.from({ length: N }, () => row(1536))),
    rewards: randomFloats(r, N, 0, 1),
    maxPromptLength: P,
    maxResponseLength: R,
    padTokenId: 0,
  };
  const total = (x: { offsets: Int32Array; values: Int32Array }) => x.values.length * 4 + x.offsets.length * 4;
  core.reserve(total(input.prompts) + total(input.responses) + N * 4 + 8 * N * (P + R) * 4 + (1 << 20));
  const putI = (x: Int32Array) => {
    const v = core.inputI32(x.length);
    v.set(x);
    return v;
  };
  const rw = core.inputF32(N);
  rw.set(input.rewards);
  const inW = {
    ...input,
    prompts: { offsets: putI(input.prompts.offsets), values: putI(input.prompts.values) },
    responses: { offsets: putI(input.responses.offsets), values: putI(input.responses.values) },
    rewards: rw,
  };
  report(
    "batch layout",
    `${N} rows, P=R=${P}`,
    best(() => ref.batchLayout(input)),
    best(() => wasm.batchLayout(inW)),
    best(() => wasm.batchLayout(input)),
  );
  core.releaseInputs();
}

// ---- trace tree: 10k spans (an agent session of ~1,400 turns plus stray reward roots)
{
  const r = rng(3);
  const spans: Span[] = [];
  let id = 0;
  const add = (parent: string | null, name: string, start: number, end: number, attributes: Span["attributes"] = {}) => {
    const span_id = `s${id++}`;
    spans.push(spanFromAttributes({ span_id, parent_id: parent, name, start_time: start, end_time: end, attributes, trace_id: "t" }));
    return span_id;
  };
  const session = add(null, "session", 0, 1e6);
  for (let turn = 0; spans.length < 10_000; turn++) {
    const t0 = turn * 100;
    const agent = add(session, "agent.turn", t0, t0 + 90, { "agent.name": r.pick(["planner", "coder", "critic"]) });
    const call = add(agent, "openai.chat.completion", t0 + 1, t0 + 40, {
      "gen_ai.response.id": `resp-${turn}`,
      prompt_token_ids: [1, 2, 3],
      response_token_ids: [4, 5],
    });
    for (let k = 0; k < 3; k++) add(call, "http.request", t0 + 2 + k, t0 + 3 + k);
    add(agent, "tool.call", t0 + 41, t0 + 60);
    add(agent, "tool.call", t0 + 61, t0 + 80);
    if (turn % 10 === 9)
      add(null, "agentlightning.annotation", t0 + 95, t0 + 95, {
        "agentlightning.reward.0.name": "r",
        "agentlightning.reward.0.value": r.float(0, 1),
      });
  }
  const adapterRef = new TraceTripletAdapter({ kernels: ref });
  const adapterWasm = new TraceTripletAdapter({ kernels: wasm });
  const { buildTree } = await import("../src/adapter/tree.ts");
  const encoded = adapterWasm.encode(buildTree(spans)).trace;
  const tCopy = best(() => wasm.extractCalls(encoded));
  report(
    "trace kernel (tree, repair, calls, rewards)",
    `${spans.length} spans`,
    best(() => ref.extractCalls(encoded)),
    tCopy,
    tCopy,
  );
  report(
    "TraceTripletAdapter end to end",
    `${spans.length} spans`,
    best(() => adapterRef.adapt(spans)),
    best(() => adapterWasm.adapt(spans)),
    NaN,
  );
}

const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => row[c].length)));
for (const row of rows) console.log(row.map((cell, c) => (c < 2 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join("  "));
const { loadavg, cpus } = await import("node:os");
console.log(
  `\nnode ${process.version}, ${cpus().length} CPUs, load average ${loadavg()[0].toFixed(1)}; ratio = reference / wasm (higher is better)`,
);

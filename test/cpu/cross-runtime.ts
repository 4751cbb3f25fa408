/**
 * Cross-runtime check of the CPU model kernels: runs every kernel on fixed seeded inputs and prints one JSON
 * line with a digest of the Wasm outputs (bit-exact) and the kernels whose outputs leave the reference's
 * tolerance (1e-5 of each output's scale here: the per-kernel bounds are in test/cpu/kernels.test.ts), and whether a
 * pool of 3 threads gives the same bits as one. Run with
 * `npx tsx`, `npx deno run -A` or `npx bun`; test/wasm/runtimes.test.ts runs all three and compares.
 */
import { parseModelConfig } from "../../src/model/config.ts";
import { CpuDecoder } from "../../src/model/generate.ts";
import { initParams, Rng } from "../../src/model/init.ts";
import { initLora, parseLoraConfig } from "../../src/model/lora.ts";
import { referenceOps, type ModelOps } from "../../src/model/model-ops.ts";
import { WasmOps } from "../../src/cpu/wasm-ops.ts";
import { CpuPool } from "../../src/cpu/pool.ts";
import { digest, type Out } from "../wasm/output-digest.ts";

function run(ops: ModelOps): Out {
  const rng = new Rng(20261127);
  const f32 = (n: number, s = 1) => Float32Array.from({ length: n }, () => rng.normal() * s);
  const out: Out = {};
  const [m, k, n] = [37, 300, 45];
  const a = f32(m * k);
  const b = f32(k * n);
  out.matmul = ops.matmul(a, b, { m, k, n });
  out.matmulABt = ops.matmulABt(a, f32(n * k), { m, k, n });
  out.matmulAtB = ops.matmulAtB(f32(k * m), b, { m, k, n });
  out.gemv = ops.matmul(a.subarray(0, k), b, { m: 1, k, n });
  const [rows, dim] = [9, 67];
  const x = f32(rows * dim, 2);
  const w = f32(dim);
  const dy = f32(rows * dim);
  const norm = ops.rmsnorm(x, w, { rows, dim, eps: 1e-6 });
  out.rmsnorm = norm.y;
  const nb = ops.rmsnormBackward(x, w, norm.rstd, dy, { rows, dim });
  out.rmsnorm_dx = nb.dx;
  out.rmsnorm_dw = nb.dw;
  const pos = Array.from({ length: 9 }, (_, i) => i * 131);
  const rd = { rows: 9, heads: 3, headDim: 12, theta: 1e6 };
  const xr = f32(9 * 36);
  out.rope = ops.rope(xr, pos, rd);
  out.rope_back = ops.ropeBackward(xr, pos, rd);
  const g = f32(1001, 4);
  const u = f32(1001);
  const d = f32(1001);
  out.swiglu = ops.swiglu(g, u);
  const sb = ops.swigluBackward(g, u, d);
  out.swiglu_dgate = sb.dgate;
  out.swiglu_dup = sb.dup;
  const [r2, vocab] = [5, 777];
  const z = f32(r2 * vocab, 5);
  const t = [0, 776, 3, 400, 9];
  const ls = ops.logSoftmaxGatherEntropy(z, t, { rows: r2, vocab });
  out.logprob = ls.logprob;
  out.entropy = ls.entropy;
  out.dlogits = ops.logSoftmaxGatherEntropyBackward(z, t, ls.lse, ls.entropy, f32(r2), f32(r2), { rows: r2, vocab });
  const dims = { batch: 2, seq: 11, heads: 6, kvHeads: 2, headDim: 10 };
  const q = f32(2 * 11 * 60, 2);
  const kk = f32(2 * 11 * 20, 2);
  const v = f32(2 * 11 * 20);
  const mask = Array.from({ length: 22 }, (_, i) => (i % 7 === 2 ? 0 : 1));
  const at = ops.attention(q, kk, v, mask, dims);
  out.attention = at.out;
  const ab = ops.attentionBackward(q, kk, v, at.probs, f32(q.length), dims);
  out.attention_dq = ab.dq;
  out.attention_dk = ab.dk;
  out.attention_dv = ab.dv;
  out.decode = ops.attentionDecode(q.subarray(0, 60), kk, v, 15, dims);
  const p = f32(500);
  const state = { step: 0, m: new Float32Array(500), v: new Float32Array(500) };
  ops.adamwStep(p, f32(500), state, { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, maxGradNorm: 1 });
  out.adamw = p;
  out.decode_step = decodeSteps(ops);
  return out;
}

/** Logits of a prefill and three KV-cached steps of a small model with every optional feature and an
 * adapter (the fused prefill and decode step on the Wasm ops). */
function decodeSteps(ops: ModelOps): Float32Array {
  const config = parseModelConfig({
    vocab_size: 53,
    d_model: 21,
    n_layers: 2,
    n_heads: 6,
    n_kv_heads: 2,
    head_dim: 6,
    d_ff: 27,
    max_seq_len: 16,
    rope_theta: 10000,
    norm_eps: 1e-5,
    tie_embeddings: false,
    qkv_bias: true,
    qk_norm: true,
    rope_scaling: { rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8 },
  });
  const rng = new Rng(7);
  const params = initParams(config, 3).map((x) => x + rng.normal() * 0.05);
  const loraConfig = parseLoraConfig({ r: 3, alpha: 6, targetModules: ["q_proj", "v_proj", "o_proj", "down_proj"] });
  const lora = initLora(config, loraConfig, 5).map((x) => (x === 0 ? rng.normal() * 0.1 : x));
  const decoder = new CpuDecoder(config, params, 7, { config: loraConfig, params: lora }, ops);
  const out = Array.from(decoder.prefill([1, 2, 3, 4]));
  for (const t of [5, 6, 7]) out.push(...decoder.step(t));
  decoder.dispose();
  return Float32Array.from(out);
}

function mismatches(a: Out, b: Out): string[] {
  return Object.keys(b).filter((key) => {
    const x = a[key];
    const y = b[key];
    let scale = 0;
    for (let i = 0; i < y.length; i++) scale = Math.max(scale, Math.abs(y[i]));
    if (x.length !== y.length) return true;
    for (let i = 0; i < y.length; i++) if (!(Math.abs(x[i] - y[i]) <= 1e-5 * scale)) return true;
    return false;
  });
}

const runtime = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";
const wasmOut = run(new WasmOps());
const refOut = run(referenceOps);
// the same through a pool of 3 threads over one shared memory: the same bits
const pool = await CpuPool.create(3);
const pooled = digest(run(new WasmOps(pool)));
pool.close();
const bad = [
  ...mismatches(wasmOut, refOut),
  ...(pool.threads === 3 ? [] : [`pool has ${pool.threads} threads`]),
  ...(pooled === digest(wasmOut) ? [] : [`3 threads: ${pooled}`]),
];
console.log(JSON.stringify({ runtime, digest: digest(wasmOut), referenceDigest: digest(refOut), mismatches: bad }));

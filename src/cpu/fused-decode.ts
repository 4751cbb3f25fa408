/**
 * The fused decode step (assembly/cpu/decode.ts): one Wasm call per token runs every layer and the lm
 * head over the resident weights and KV cache, with the activations kept in a resident workspace, instead
 * of ~10 façade calls per layer that copy activations in and out; one call runs a prompt (prefill). It runs the per-op path's kernels in the
 * same order, so it gives that path's bits. Served when every tensor is resident and the per-op path
 * would run the whole step on one thread (a pool of one, or a model whose decode ops are all below the
 * size at which the façade splits work over threads); otherwise the decoder stays op by op.
 */
import { headDim, ropeInvFreq, type ModelConfig } from "../model/config.ts";
import type { DecodeStepper, DecodeStepperRequest, Residency } from "../model/model-ops.ts";
import type { CpuCore } from "./kernels/index.ts";
import { ValidationError } from "../types/errors.ts";

/** What the fused step needs from the Wasm backend. */
export interface FusedDecodeHost {
  core: CpuCore;
  residency: Residency;
  /** A resident array's byte pointer. */
  pointer(x: ArrayLike<number>): number | undefined;
  /** Threads of the backend's pool (1 without one). */
  threads: number;
  /** Work (multiply-adds, or the façade's own measure) from which the façade splits a call over threads. */
  parallelMinWork: number;
}

// The descriptor's layout: assembly/cpu/decode.ts's D_*, L_* and F_* constants, word for word.
const HEADER_WORDS = 32;
const LAYER_WORDS = 32;
const H = {
  layers: 0,
  dim: 1,
  heads: 2,
  kvHeads: 3,
  headDim: 4,
  ff: 5,
  vocab: 6,
  flags: 7,
  tokEmb: 8,
  norm: 9,
  lmHead: 10,
  invFreq: 11,
  loraR: 12,
  x: 13,
  h: 14,
  q: 15,
  k: 16,
  qr: 17,
  att: 18,
  tmp: 19,
  gate: 20,
  up: 21,
  act: 22,
  logits: 23,
  rstd: 24,
  scores: 25,
  loraT: 26,
  loraU: 27,
  pos: 28,
} as const;
const FLAG = { qkvBias: 1, qkNorm: 2, tied: 4 } as const;
const LAYER_TENSORS = [
  "attn_norm",
  "wq",
  "wk",
  "wv",
  "bq",
  "bk",
  "bv",
  "q_norm",
  "k_norm",
  "wo",
  "ffn_norm",
  "w_gate",
  "w_up",
  "w_down",
] as const;
const L_K_CACHE = 14;
const L_V_CACHE = 15;
const L_LORA = 16;
/** The projections in the kernel's LoRA slot order. */
const LORA_SLOTS = ["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"] as const;

const round4 = (n: number) => (n + 3) & ~3;

/** The model's sizes the step is laid out by. */
interface StepDims {
  d: number;
  hd: number;
  qDim: number;
  kvDim: number;
  ff: number;
  V: number;
  /** LoRA rank (0: no adapter). */
  r: number;
  /** Widest projection output (LoRA's scratch). */
  wide: number;
}

function stepDims(c: ModelConfig, r: number): StepDims {
  const hd = headDim(c);
  const qDim = c.n_heads * hd;
  const kvDim = c.n_kv_heads * hd;
  return { d: c.d_model, hd, qDim, kvDim, ff: c.d_ff, V: c.vocab_size, r, wide: Math.max(qDim, kvDim, c.d_model, c.d_ff) };
}

/** The workspace's regions (floats) in order: one token's activations, then the descriptor, then the RoPE table. */
function workspaceLayout(c: ModelConfig, { d, hd, qDim, kvDim, ff, V, r }: StepDims, slots: number, descWords: number) {
  const sizes: [keyof typeof H, number][] = [
    ["x", d],
    ["h", d],
    ["q", qDim],
    ["k", kvDim],
    ["qr", qDim],
    ["att", qDim],
    ["tmp", d],
    ["gate", ff],
    ["up", ff],
    ["act", ff],
    ["logits", V],
    ["rstd", Math.max(c.n_heads, c.n_kv_heads, 1)],
    ["scores", slots],
    ["loraT", Math.max(r, 1)],
    ["loraU", Math.max(qDim, kvDim, d, ff)],
    ["pos", 1],
  ];
  let floats = 0;
  const activations: [keyof typeof H, number][] = [];
  for (const [name, n] of sizes) {
    activations.push([name, floats]);
    floats += round4(n);
  }
  const descAt = floats;
  floats += round4(descWords);
  // f64, 16-aligned
  const freqAt = floats;
  floats += round4(hd);
  return { activations, descAt, freqAt, floats };
}

/**
 * The descriptor's words that do not depend on the workspace: dims, flags and the pointers of every
 * tensor and cache; null when one of them is not resident (its pin failed, or it is not Float32). Int32Array
 * wraps pointers past 2 GiB; the kernel reads them as u32.
 */
function describe(pointer: FusedDecodeHost["pointer"], request: DecodeStepperRequest, { d, hd, ff, V, r }: StepDims): Int32Array | null {
  const { config: c, p, lora, kCache, vCache } = request;
  let missing = false;
  const at = (x: ArrayLike<number> | undefined): number => {
    if (!x) return 0;
    const ptr = pointer(x);
    if (ptr === undefined) missing = true;
    return ptr ?? 0;
  };
  const desc = new Int32Array(HEADER_WORDS + c.n_layers * LAYER_WORDS);
  desc.set([c.n_layers, d, c.n_heads, c.n_kv_heads, hd, ff, V], 0);
  desc[H.flags] = (c.qkv_bias ? FLAG.qkvBias : 0) | (c.qk_norm ? FLAG.qkNorm : 0) | (c.tie_embeddings ? FLAG.tied : 0);
  desc[H.tokEmb] = at(p.tok_embeddings);
  desc[H.norm] = at(p.norm);
  desc[H.lmHead] = c.tie_embeddings ? 0 : at(p.lm_head);
  desc[H.loraR] = r;
  for (let l = 0; l < c.n_layers; l++) {
    const o = HEADER_WORDS + l * LAYER_WORDS;
    LAYER_TENSORS.forEach((name, i) => (desc[o + i] = at(p[`layers.${l}.${name}`])));
    desc[o + L_K_CACHE] = at(kCache[l]);
    desc[o + L_V_CACHE] = at(vCache[l]);
    LORA_SLOTS.forEach((name, i) => {
      desc[o + L_LORA + 2 * i] = at(lora?.views[`layers.${l}.${name}.lora_a`]);
      desc[o + L_LORA + 2 * i + 1] = at(lora?.views[`layers.${l}.${name}.lora_b`]);
    });
  }
  return missing ? null : desc;
}

/** A prefill or decode step of one model and cache, one Wasm call each, over a descriptor in the workspace. */
export class FusedDecodeStepper implements DecodeStepper {
  private constructor(
    private readonly host: FusedDecodeHost,
    private readonly config: ModelConfig,
    private readonly dims: StepDims,
    private readonly slots: number,
    /** The descriptor's byte pointer. */
    private readonly descPtr: number,
    private readonly logitsPtr: number,
    /** The adapter's scale (0: none). */
    private readonly scale: number,
  ) {}

  /**
   * The fused step for this model and cache, or null where it cannot serve them (a tensor not resident)
   * or where the per-op path would use more than one thread.
   */
  static create(host: FusedDecodeHost, request: DecodeStepperRequest): FusedDecodeStepper | null {
    const { config: c, lora, slots } = request;
    const dims = stepDims(c, lora?.config.r ?? 0);
    if (host.threads > 1) {
      const { d, qDim, kvDim, ff, V, r } = dims;
      // the per-op path's splits (wasm-ops.ts: GEMM by m*k*n, attention by len*H*hd*4, SwiGLU by n*8)
      const work = [d * qDim, d * kvDim, qDim * d, d * ff, ff * d, d * V, slots * qDim * 4, ff * 8, d * r, r * Math.max(qDim, ff, d)];
      if (work.some((w) => w >= host.parallelMinWork)) return null;
    }
    const desc = describe(host.pointer, request, dims);
    if (!desc) return null;
    const layout = workspaceLayout(c, dims, slots, desc.length);
    const workspace = new Float32Array(layout.floats);
    if (!host.residency.pin([workspace])) return null;
    const base = host.pointer(workspace)!;
    desc[H.invFreq] = base + layout.freqAt * 4;
    for (const [name, at] of layout.activations) desc[H[name]] = base + at * 4;
    host.core.view(Int32Array, base + layout.descAt * 4, desc.length).set(desc);
    host.core.view(Float64Array, base + layout.freqAt * 4, dims.hd / 2).set(ropeInvFreq(dims.hd, c.rope_theta, c.rope_scaling));
    return new FusedDecodeStepper(host, c, dims, slots, base + layout.descAt * 4, desc[H.logits] >>> 0, lora?.scaling ?? 0);
  }

  prefill(prompt: ArrayLike<number>): Float32Array | null {
    const L = prompt.length;
    const V = this.dims.V;
    if (!(L >= 1 && L <= this.slots)) throw new ValidationError(`prompt of ${L} tokens outside [1, ${this.slots}]`, ["prompt"]);
    for (let i = 0; i < L; i++) {
      const id = prompt[i];
      if (!(Number.isInteger(id) && id >= 0 && id < V)) throw new ValidationError(`token id ${id} outside [0, ${V})`, ["prompt", i]);
    }
    if (this.host.threads > 1 && this.prefillWouldSplit(L)) return null;
    const core = this.host.core;
    // the per-call table and L-row activations in the call arena (freed by the next call)
    core.begin();
    const table = this.prefillTable(L);
    const ws = core.alloc(table.length * 4);
    core.write(Int32Array, ws, table);
    core.write(Int32Array, table[0], prompt);
    core.write(
      Int32Array,
      table[16],
      Int32Array.from({ length: L }, (_, i) => i),
    );
    core.view(Int32Array, table[17], L).fill(1);
    core.exports.decodePrefill(this.descPtr, ws, L, this.config.norm_eps, this.scale);
    return core.read(Float32Array, this.logitsPtr, V);
  }

  step(token: number, pos: number): Float32Array {
    const V = this.dims.V;
    if (!(Number.isInteger(token) && token >= 0 && token < V)) throw new ValidationError(`token id ${token} outside [0, ${V})`, ["token"]);
    if (!(Number.isInteger(pos) && pos >= 0 && pos < this.slots))
      throw new ValidationError(`position ${pos} outside the KV cache's [0, ${this.slots})`, ["position"]);
    this.host.core.exports.decodeStep(this.descPtr, token, pos, this.config.norm_eps, this.scale);
    return this.host.core.read(Float32Array, this.logitsPtr, V);
  }

  /** Whether the per-op prefill would split some op of these L rows over threads (rope and RMSNorm by
   * elements, attention by B*H*T*T*hd): then it is left to that path. */
  private prefillWouldSplit(L: number): boolean {
    const { d, hd, qDim, kvDim, ff, r, wide } = this.dims;
    const c = this.config;
    const work = [
      L * d * qDim,
      L * d * kvDim,
      L * ff * d,
      L * d * ff,
      c.n_heads * L * L * hd,
      L * ff * 8,
      L * qDim,
      L * d * r,
      L * r * wide,
    ];
    return work.some((w) => w >= this.host.parallelMinWork);
  }

  /** The prefill's per-call table: pointers of its L-row buffers in the call arena, in the kernel's order. */
  private prefillTable(L: number): number[] {
    const core = this.host.core;
    const { d, qDim, kvDim, ff, r, wide } = this.dims;
    const c = this.config;
    const f32 = (n: number) => core.alloc(n * 4);
    return [
      f32(L), // ids (i32)
      f32(L * d),
      f32(L * d),
      f32(L * qDim),
      f32(L * kvDim),
      f32(L * qDim),
      f32(L * kvDim),
      f32(L * qDim),
      f32(L * d),
      f32(L * ff),
      f32(L * ff),
      f32(L * ff),
      f32(L * Math.max(c.n_heads, c.n_kv_heads)),
      f32(L),
      f32(L * Math.max(r, 1)),
      f32(L * wide),
      f32(L), // positions (i32)
      f32(L), // mask (i32)
      core.alloc(core.exports.gemmScratchBytes()),
    ];
  }
}

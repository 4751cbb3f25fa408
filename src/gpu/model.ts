/**
 * The policy model on the GPU: parameter, gradient and AdamW-moment buffers per tensor (paramLayout order),
 * activation workspaces, and the forward/backward passes encoded as kernel dispatches. The math is the
 * CPU reference's (src/model/reference.ts); conventions in src/model/config.ts.
 */
import { headDim, paramLayout, type ModelConfig, type ParamSpec } from "../model/config.ts";
import { paramViews, type ModelParams } from "../model/params.ts";
import { ValidationError } from "../types/errors.ts";
import type { GpuContext } from "./context.ts";
import { matmul } from "./kernels/matmul.ts";
import { embeddingGather, embeddingScatterAdd, scatterRows } from "./kernels/embedding.ts";
import { rmsnormBackwardInput, rmsnormBackwardWeight, rmsnormForward } from "./kernels/rmsnorm.ts";
import { ropeApply, ropeTable } from "./kernels/rope.ts";
import { attentionBackward, attentionForward, type AttentionShape } from "./kernels/attention.ts";
import { swigluBackward, swigluForward } from "./kernels/swiglu.ts";
import { logSoftmaxBackward, logSoftmaxForward } from "./kernels/logsoftmax.ts";
import { allocQkNorm, finishQkv, finishQkvBackward, qkvBuffers, type QkvBuffers } from "./qk.ts";
import { packWeights, type WeightFormat } from "./kernels/weights.ts";

/** One micro-batch as the GPU sees it: B rows of T tokens, of which the last R are response tokens. */
export interface MicroShape {
  B: number;
  T: number;
  R: number;
}

/** Host-side inputs of one micro-batch, already in the GPU's integer formats. */
export interface MicroInputs {
  ids: Uint32Array;
  mask: Uint32Array;
  positions: Uint32Array;
  /** [B*R] flat token row b*T + P + c - 1 whose logits predict response token c. */
  predictRows: Uint32Array;
  /** [B*R] the response token ids. */
  targets: Uint32Array;
}

/** One layer's saved activations; q, k, v (after bias and qk-norm, before RoPE; RoPE then rotates q and k in
 * place) and the qk-norm inputs as {@link QkvBuffers} describes. */
interface LayerActivations extends QkvBuffers {
  xIn: GPUBuffer;
  h1: GPUBuffer;
  rstd1: GPUBuffer;
  attn: GPUBuffer;
  lse: GPUBuffer;
  xMid: GPUBuffer;
  h2: GPUBuffer;
  rstd2: GPUBuffer;
  gate: GPUBuffer;
  up: GPUBuffer;
  act: GPUBuffer;
}

/** Buffers sized for up to `tokens` token rows, `responseRows` predicted rows and `attnRows` B*T. */
class Workspace {
  readonly layers: LayerActivations[];
  readonly xOut: GPUBuffer;
  readonly hFinal: GPUBuffer;
  readonly rstdFinal: GPUBuffer;
  readonly hSel: GPUBuffer;
  readonly logits: GPUBuffer;
  readonly stats: GPUBuffer;
  readonly logprob: GPUBuffer;
  readonly entropy: GPUBuffer;
  readonly ids: GPUBuffer;
  readonly mask: GPUBuffer;
  readonly positions: GPUBuffer;
  readonly predictRows: GPUBuffer;
  readonly targets: GPUBuffer;
  // backward scratch
  readonly dx: GPUBuffer;
  readonly dh: GPUBuffer;
  readonly dAttn: GPUBuffer;
  readonly dq: GPUBuffer;
  readonly dk: GPUBuffer;
  readonly dv: GPUBuffer;
  /** Gradients w.r.t. the q/k projections ahead of the per-head norm (qk_norm configs). */
  readonly dqProj: GPUBuffer | null;
  readonly dkProj: GPUBuffer | null;
  readonly D: GPUBuffer;
  readonly dAct: GPUBuffer;
  readonly dGate: GPUBuffer;
  readonly dUp: GPUBuffer;
  readonly dhSel: GPUBuffer;
  readonly dlogprob: GPUBuffer;
  readonly dentropy: GPUBuffer;
  private readonly all: GPUBuffer[] = [];

  constructor(
    ctx: GpuContext,
    c: ModelConfig,
    readonly tokens: number,
    readonly responseRows: number,
    readonly attnRows: number,
    training: boolean,
  ) {
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const d = c.d_model;
    const maxBytes = ctx.device.limits.maxStorageBufferBindingSize;
    const a = (n: number): GPUBuffer => {
      if (n * 4 > maxBytes) {
        this.destroy();
        throw new ValidationError(
          `a micro-batch of ${tokens} tokens needs a ${n * 4}-byte activation buffer, over this device's ${maxBytes}-byte binding limit: lower microBatchSize`,
          ["microBatchSize"],
        );
      }
      const b = ctx.alloc(n);
      this.all.push(b);
      return b;
    };
    const N = tokens;
    this.layers = [];
    // The qk-norm inputs are kept per layer for the backward; inference overwrites one set.
    const sharedNorm = training ? null : allocQkNorm(c, N, a);
    for (let l = 0; l < c.n_layers; l++) {
      const norm = training ? allocQkNorm(c, N, a) : sharedNorm;
      this.layers.push({
        ...qkvBuffers(a(N * qd), a(N * kvd), a(N * kvd), norm),
        xIn: a(N * d),
        h1: a(N * d),
        rstd1: a(N),
        attn: a(N * qd),
        lse: a(attnRows * c.n_heads),
        xMid: a(N * d),
        h2: a(N * d),
        rstd2: a(N),
        gate: a(N * c.d_ff),
        up: a(N * c.d_ff),
        act: a(N * c.d_ff),
      });
    }
    const NR = responseRows;
    this.xOut = a(N * d);
    this.hFinal = a(N * d);
    this.rstdFinal = a(N);
    this.hSel = a(NR * d);
    this.logits = a(NR * c.vocab_size);
    this.stats = a(2 * NR);
    this.logprob = a(NR);
    this.entropy = a(NR);
    this.ids = a(N);
    this.mask = a(N);
    this.positions = a(N);
    this.predictRows = a(NR);
    this.targets = a(NR);
    this.dx = a(N * d);
    this.dh = a(N * d);
    this.dAttn = a(N * qd);
    this.dq = a(N * qd);
    this.dk = a(N * kvd);
    this.dv = a(N * kvd);
    this.dqProj = c.qk_norm ? a(N * qd) : null;
    this.dkProj = c.qk_norm ? a(N * kvd) : null;
    this.D = a(attnRows * c.n_heads);
    this.dAct = a(N * c.d_ff);
    this.dGate = a(N * c.d_ff);
    this.dUp = a(N * c.d_ff);
    this.dhSel = a(NR * d);
    this.dlogprob = a(NR);
    this.dentropy = a(NR);
  }

  fits(tokens: number, responseRows: number, attnRows: number): boolean {
    return tokens <= this.tokens && responseRows <= this.responseRows && attnRows <= this.attnRows;
  }

  destroy(): void {
    for (const b of this.all) b.destroy();
  }
}

export type ParamBuffers = Record<string, GPUBuffer>;

/** Token ids must index the embedding table and positions the RoPE table (the GPU would read out of range). */
export function checkTokenRanges(c: ModelConfig, ids: ArrayLike<number>, positions: ArrayLike<number>): void {
  for (let i = 0; i < ids.length; i++) {
    if (!(ids[i] >= 0 && ids[i] < c.vocab_size))
      throw new ValidationError(`token id ${ids[i]} outside [0, ${c.vocab_size})`, ["inputIds", i]);
  }
  for (let i = 0; i < positions.length; i++) {
    if (!(positions[i] >= 0 && positions[i] < c.max_seq_len))
      throw new ValidationError(`position id ${positions[i]} outside [0, max_seq_len ${c.max_seq_len})`, ["positionIds", i]);
  }
}

export class GpuModel {
  readonly layout: ParamSpec[];
  readonly params: ParamBuffers = {};
  readonly grads: ParamBuffers = {};
  readonly m: ParamBuffers = {};
  readonly v: ParamBuffers = {};
  private readonly rope: GPUBuffer;
  private workspace: Workspace | null = null;

  /** How the weight matrices (embeddings, projections, lm head) are stored; norms and biases stay f32. */
  readonly matrixFormat: WeightFormat;

  /** `params`: flat (paramLayout order) or tensors by name. `training` false: parameters only, no gradient or
   * AdamW-moment buffers (inference, e.g. generation). `weightFormat` "bf16" or "f16" keeps the matrices in
   * 16 bits (inference only; weights.ts). */
  constructor(
    readonly ctx: GpuContext,
    readonly config: ModelConfig,
    params: ModelParams,
    readonly training = true,
    options: { weightFormat?: WeightFormat } = {},
  ) {
    this.matrixFormat = options.weightFormat ?? "f32";
    if (training && this.matrixFormat !== "f32")
      throw new ValidationError(`16-bit weights (${this.matrixFormat}) are for inference: training keeps float32`, ["weightFormat"]);
    this.layout = paramLayout(config);
    // A tensor is bound whole by the kernels: one over the device's binding limit cannot run at all.
    const limit = Math.min(ctx.device.limits.maxStorageBufferBindingSize, ctx.device.limits.maxBufferSize);
    for (const s of this.layout) {
      const bytes = this.storedBytes(s);
      if (bytes > limit)
        throw new ValidationError(
          `tensor ${s.name} (${s.shape.join(" x ")}) needs ${bytes} bytes in ${this.formatOf(s)}, over this device's ${limit}-byte storage binding limit: use the CPU engine or a GPU with a larger limit`,
          ["params", s.name],
        );
    }
    const views = paramViews(config, params);
    for (const s of this.layout) {
      this.params[s.name] = this.uploadParam(s, views[s.name]);
      if (!training) continue;
      this.grads[s.name] = ctx.alloc(s.size, `grad.${s.name}`);
      this.m[s.name] = ctx.alloc(s.size, `adam_m.${s.name}`);
      this.v[s.name] = ctx.alloc(s.size, `adam_v.${s.name}`);
    }
    this.rope = ctx.upload(ropeTable(config.max_seq_len, headDim(config), config.rope_theta, config.rope_scaling), "rope_table");
  }

  /** The [max_seq_len, hd/2] cos then sin table RoPE reads (shared with KV-cached decoding). */
  get ropeBuffer(): GPUBuffer {
    return this.rope;
  }

  /** The format tensor `s` is stored in: matrices in `matrixFormat`, vectors (norms, biases) in f32. */
  formatOf(s: ParamSpec): WeightFormat {
    return s.shape.length === 2 ? this.matrixFormat : "f32";
  }

  private storedBytes(s: ParamSpec): number {
    return this.formatOf(s) === "f32" ? 4 * s.size : 4 * Math.ceil(s.size / 2);
  }

  private uploadParam(s: ParamSpec, data: Float32Array): GPUBuffer {
    const f = this.formatOf(s);
    return f === "f32" ? this.ctx.upload(data, s.name) : this.ctx.upload(packWeights(data, f), s.name);
  }

  /** Bytes of the parameter buffers on the device (not gradients or optimizer moments). */
  get paramBytes(): number {
    return this.layout.reduce((a, s) => a + this.storedBytes(s), 0);
  }

  /** Uploads a flat buffer (paramLayout order) or tensors by name into per-tensor buffers (the parameters:
   * packed as stored). */
  writeFlat(target: ParamBuffers, params: ModelParams): void {
    const views = paramViews(this.config, params);
    for (const s of this.layout) {
      const data = views[s.name];
      const f = target === this.params ? this.formatOf(s) : "f32";
      this.ctx.write(target[s.name], f === "f32" ? data : packWeights(data, f));
    }
  }

  /** Downloads per-tensor buffers into one flat buffer (paramLayout order). */
  async readFlat(source: ParamBuffers): Promise<Float32Array> {
    const total = this.layout.reduce((a, s) => a + s.size, 0);
    const flat = new Float32Array(total);
    for (const s of this.layout) flat.set(await this.ctx.read(source[s.name], s.size), s.offset);
    return flat;
  }

  zeroGrads(): void {
    for (const s of this.layout) this.ctx.clear(this.grads[s.name]);
  }

  /** The workspace for a micro-batch shape, reallocated only when a bigger one is needed. */
  private ensureWorkspace(s: MicroShape): Workspace {
    const tokens = s.B * s.T;
    const responseRows = s.B * s.R;
    if (this.workspace === null || !this.workspace.fits(tokens, responseRows, tokens)) {
      this.ctx.flush();
      this.workspace?.destroy();
      this.workspace = null;
      this.workspace = new Workspace(this.ctx, this.config, tokens, responseRows, tokens, this.training);
    }
    return this.workspace;
  }

  /** Uploads the inputs and encodes the forward pass; the response log-probs/entropies land in ws.logprob/ws.entropy. */
  forward(s: MicroShape, inputs: MicroInputs): Workspace {
    const c = this.config;
    checkTokenRanges(c, inputs.ids, inputs.positions);
    const ws = this.ensureWorkspace(s);
    const ctx = this.ctx;
    ctx.write(ws.ids, inputs.ids);
    ctx.write(ws.mask, inputs.mask);
    ctx.write(ws.positions, inputs.positions);
    ctx.write(ws.predictRows, inputs.predictRows);
    ctx.write(ws.targets, inputs.targets);
    const P = this.params;
    const N = s.B * s.T;
    const NR = s.B * s.R;
    const d = c.d_model;
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const att: AttentionShape = { batch: s.B, seq: s.T, heads: c.n_heads, kvHeads: c.n_kv_heads, headDim: hd };
    const bFormat = this.matrixFormat;
    embeddingGather(ctx, ws.ids, P.tok_embeddings, ws.layers[0].xIn, N, d, bFormat);
    for (let l = 0; l < c.n_layers; l++) {
      const a = ws.layers[l];
      const p = (n: string): GPUBuffer => P[`layers.${l}.${n}`];
      rmsnormForward(ctx, a.xIn, p("attn_norm"), a.h1, a.rstd1, N, d, c.norm_eps);
      matmul(ctx, a.h1, p("wq"), a.qProj, { M: N, K: d, N: qd, bFormat });
      matmul(ctx, a.h1, p("wk"), a.kProj, { M: N, K: d, N: kvd, bFormat });
      matmul(ctx, a.h1, p("wv"), a.v, { M: N, K: d, N: kvd, bFormat });
      finishQkv(ctx, c, p, a, N);
      ropeApply(ctx, a.q, ws.positions, this.rope, c.max_seq_len, N, c.n_heads, hd, false);
      ropeApply(ctx, a.k, ws.positions, this.rope, c.max_seq_len, N, c.n_kv_heads, hd, false);
      attentionForward(ctx, a.q, a.k, a.v, ws.mask, a.attn, a.lse, att);
      ctx.copy(a.xIn, a.xMid, N * d * 4);
      matmul(ctx, a.attn, p("wo"), a.xMid, { M: N, K: qd, N: d, accumulate: true, bFormat });
      rmsnormForward(ctx, a.xMid, p("ffn_norm"), a.h2, a.rstd2, N, d, c.norm_eps);
      matmul(ctx, a.h2, p("w_gate"), a.gate, { M: N, K: d, N: c.d_ff, bFormat });
      matmul(ctx, a.h2, p("w_up"), a.up, { M: N, K: d, N: c.d_ff, bFormat });
      swigluForward(ctx, a.gate, a.up, a.act, N * c.d_ff);
      const xNext = l + 1 < c.n_layers ? ws.layers[l + 1].xIn : ws.xOut;
      ctx.copy(a.xMid, xNext, N * d * 4);
      matmul(ctx, a.act, p("w_down"), xNext, { M: N, K: c.d_ff, N: d, accumulate: true, bFormat });
    }
    rmsnormForward(ctx, ws.xOut, P.norm, ws.hFinal, ws.rstdFinal, N, d, c.norm_eps);
    // Only the rows that predict response tokens go through the lm head.
    embeddingGather(ctx, ws.predictRows, ws.hFinal, ws.hSel, NR, d);
    if (c.tie_embeddings) matmul(ctx, ws.hSel, P.tok_embeddings, ws.logits, { M: NR, K: d, N: c.vocab_size, transB: true, bFormat });
    else matmul(ctx, ws.hSel, P.lm_head, ws.logits, { M: NR, K: d, N: c.vocab_size, bFormat });
    logSoftmaxForward(ctx, ws.logits, ws.targets, ws.logprob, ws.entropy, ws.stats, NR, c.vocab_size);
    return ws;
  }

  /** Encodes the backward pass from ws.dlogprob / ws.dentropy (filled by the loss), adding into the gradients. */
  backward(s: MicroShape, ws: Workspace): void {
    const ctx = this.ctx;
    const c = this.config;
    const P = this.params;
    const G = this.grads;
    const N = s.B * s.T;
    const NR = s.B * s.R;
    const d = c.d_model;
    const V = c.vocab_size;
    const ff = c.d_ff;
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const att: AttentionShape = { batch: s.B, seq: s.T, heads: c.n_heads, kvHeads: c.n_kv_heads, headDim: hd };
    logSoftmaxBackward(ctx, ws.logits, ws.targets, ws.stats, ws.dlogprob, ws.dentropy, NR, V);
    const dLogits = ws.logits;
    if (c.tie_embeddings) {
      matmul(ctx, dLogits, P.tok_embeddings, ws.dhSel, { M: NR, K: V, N: d });
      matmul(ctx, dLogits, ws.hSel, G.tok_embeddings, { M: V, K: NR, N: d, transA: true, accumulate: true });
    } else {
      matmul(ctx, dLogits, P.lm_head, ws.dhSel, { M: NR, K: V, N: d, transB: true });
      matmul(ctx, ws.hSel, dLogits, G.lm_head, { M: d, K: NR, N: V, transA: true, accumulate: true });
    }
    ctx.clear(ws.dh, N * d * 4);
    scatterRows(ctx, ws.predictRows, ws.dhSel, ws.dh, NR, d);
    rmsnormBackwardWeight(ctx, ws.xOut, ws.rstdFinal, ws.dh, G.norm, N, d);
    rmsnormBackwardInput(ctx, ws.xOut, P.norm, ws.rstdFinal, ws.dh, ws.dx, N, d, false);
    for (let l = c.n_layers - 1; l >= 0; l--) {
      const a = ws.layers[l];
      const p = (n: string): GPUBuffer => P[`layers.${l}.${n}`];
      const g = (n: string): GPUBuffer => G[`layers.${l}.${n}`];
      // x_{l+1} = xMid + act @ w_down
      matmul(ctx, ws.dx, p("w_down"), ws.dAct, { M: N, K: d, N: ff, transB: true });
      matmul(ctx, a.act, ws.dx, g("w_down"), { M: ff, K: N, N: d, transA: true, accumulate: true });
      swigluBackward(ctx, a.gate, a.up, ws.dAct, ws.dGate, ws.dUp, N * ff);
      matmul(ctx, ws.dGate, p("w_gate"), ws.dh, { M: N, K: ff, N: d, transB: true });
      matmul(ctx, ws.dUp, p("w_up"), ws.dh, { M: N, K: ff, N: d, transB: true, accumulate: true });
      matmul(ctx, a.h2, ws.dGate, g("w_gate"), { M: d, K: N, N: ff, transA: true, accumulate: true });
      matmul(ctx, a.h2, ws.dUp, g("w_up"), { M: d, K: N, N: ff, transA: true, accumulate: true });
      rmsnormBackwardWeight(ctx, a.xMid, a.rstd2, ws.dh, g("ffn_norm"), N, d);
      rmsnormBackwardInput(ctx, a.xMid, p("ffn_norm"), a.rstd2, ws.dh, ws.dx, N, d, true);
      // xMid = xIn + attn @ wo
      matmul(ctx, ws.dx, p("wo"), ws.dAttn, { M: N, K: d, N: qd, transB: true });
      matmul(ctx, a.attn, ws.dx, g("wo"), { M: qd, K: N, N: d, transA: true, accumulate: true });
      attentionBackward(
        ctx,
        { q: a.q, k: a.k, v: a.v, mask: ws.mask, out: a.attn, lse: a.lse, dout: ws.dAttn, dq: ws.dq, dk: ws.dk, dv: ws.dv, D: ws.D },
        att,
      );
      ropeApply(ctx, ws.dq, ws.positions, this.rope, c.max_seq_len, N, c.n_heads, hd, true);
      ropeApply(ctx, ws.dk, ws.positions, this.rope, c.max_seq_len, N, c.n_kv_heads, hd, true);
      // q/k/v = finishQkv(h1 @ wq, h1 @ wk, h1 @ wv)
      const { dq, dk } = finishQkvBackward(ctx, c, p, g, a, ws, N);
      matmul(ctx, dq, p("wq"), ws.dh, { M: N, K: qd, N: d, transB: true });
      matmul(ctx, dk, p("wk"), ws.dh, { M: N, K: kvd, N: d, transB: true, accumulate: true });
      matmul(ctx, ws.dv, p("wv"), ws.dh, { M: N, K: kvd, N: d, transB: true, accumulate: true });
      matmul(ctx, a.h1, dq, g("wq"), { M: d, K: N, N: qd, transA: true, accumulate: true });
      matmul(ctx, a.h1, dk, g("wk"), { M: d, K: N, N: kvd, transA: true, accumulate: true });
      matmul(ctx, a.h1, ws.dv, g("wv"), { M: d, K: N, N: kvd, transA: true, accumulate: true });
      rmsnormBackwardWeight(ctx, a.xIn, a.rstd1, ws.dh, g("attn_norm"), N, d);
      rmsnormBackwardInput(ctx, a.xIn, p("attn_norm"), a.rstd1, ws.dh, ws.dx, N, d, true);
    }
    embeddingScatterAdd(ctx, ws.ids, ws.dx, G.tok_embeddings, N, d, V);
  }

  destroy(): void {
    this.ctx.flush();
    this.workspace?.destroy();
    for (const set of [this.params, this.grads, this.m, this.v]) for (const b of Object.values(set)) b.destroy();
    this.rope.destroy();
  }
}

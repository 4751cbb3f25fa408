/**
 * The policy model on the GPU: parameter, gradient and AdamW-moment buffers per tensor (paramLayout order),
 * optionally a LoRA adapter beside the frozen base (lora.ts, docs/lora.md), activation workspaces, and the
 * forward/backward passes encoded as kernel dispatches. The math is the
 * CPU reference's (src/model/reference/model.ts); conventions in src/model/config.ts.
 */
import { headDim, paramLayout, type ModelConfig, type ParamSpec } from "../model/config.ts";
import { paramViews, type ModelParams } from "../model/params.ts";
import type { LoraWeights } from "../model/lora.ts";
import { ValidationError } from "../types/errors.ts";
import type { GpuContext } from "./context.ts";
import { matmul } from "./kernels/matmul.ts";
import { linear } from "./kernels/matmul-rows.ts";
import { embedding, embeddingBackward, scatterRows } from "./kernels/embedding.ts";
import { rmsnormBackwardInput, rmsnormBackwardWeight, rmsnorm } from "./kernels/rmsnorm.ts";
import { rope, ropeTable } from "./kernels/rope.ts";
import { attentionBackward, attention, type AttentionShape } from "./kernels/attention.ts";
import { swigluBackward, swiglu } from "./kernels/swiglu.ts";
import { logSoftmaxGatherEntropyBackward, logSoftmaxGatherEntropy } from "./kernels/logsoftmax.ts";
import { allocQkNorm, finishQkv, finishQkvBackward, qkvBuffers, type QkvBuffers } from "./qk.ts";
import type { WeightFormat } from "./kernels/weights.ts";
import { GpuAdapter } from "./lora.ts";
import { adapterInput, projectBackward, projectForward, type ProjectionDims, type ProjectionWeights } from "./projection.ts";
import { TensorSet, type ParamBuffers } from "./tensors.ts";

export type { ParamBuffers } from "./tensors.ts";

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

/** One layer's activations as the backward reads them; q, k, v (after bias and qk-norm, before RoPE; RoPE
 * then rotates q and k in place) and the qk-norm inputs as {@link QkvBuffers} describes. */
interface LayerActivations extends QkvBuffers {
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
  /** `x · lora_a` [N, r] of each adapted projection, by weight name (wq, w_up, ...). */
  loraT: Record<string, GPUBuffer>;
}

/**
 * What a workspace keeps: "inference" one activation set per layer (the KV-cached decoder's prefill reads
 * every layer's k and v) without backward buffers; "training" one set per layer and the backward's
 * scratch; "recompute" (activation checkpointing) one set shared by all layers, refilled from each
 * layer's input in the backward, so activation memory does not grow with n_layers beyond the inputs.
 */
export type WorkspaceMode = "inference" | "training" | "recompute";

/** Buffers sized for up to `tokens` token rows, `responseRows` predicted rows and `attnRows` B*T. */
class Workspace {
  /** inputs[l]: layer l's input [N, d]; inputs[n_layers]: the last layer's output. */
  readonly inputs: GPUBuffer[];
  private readonly sets: LayerActivations[];
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
  // backward scratch (one element each in inference)
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
  /** The adapter's dt = scaling · dy · lora_bᵀ [N, r], shared by every projection's backward. */
  readonly loraDt: GPUBuffer | null;
  /** Whether the last forward applied the adapter (its backward must match). */
  adapterUsed = false;
  /** What the last forward divided the logits by (its backward divides their gradient too). */
  temperature = 1;
  private readonly all: GPUBuffer[] = [];

  constructor(
    ctx: GpuContext,
    c: ModelConfig,
    readonly tokens: number,
    readonly responseRows: number,
    readonly attnRows: number,
    readonly mode: WorkspaceMode,
    /** The adapter's rank and projection names, or null: the t buffers' shapes. */
    readonly lora: { r: number; weights: readonly string[] } | null,
    /** Whether the LM head runs: without it the logits and their statistics are not needed. */
    lmHead = true,
  ) {
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const d = c.d_model;
    const maxBytes = Math.min(ctx.device.limits.maxStorageBufferBindingSize, ctx.device.limits.maxBufferSize);
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
    const training = mode !== "inference";
    const bw = (n: number): GPUBuffer => a(training ? n : 1);
    const N = tokens;
    const loraT = (): Record<string, GPUBuffer> => Object.fromEntries((lora?.weights ?? []).map((w) => [w, a(N * lora!.r)]));
    this.inputs = Array.from({ length: c.n_layers + 1 }, () => a(N * d));
    // Inference overwrites one set of qk-norm inputs and adapter t's; training keeps them per set.
    const sharedNorm = training ? null : allocQkNorm(c, N, a);
    const sharedT = training ? null : loraT();
    this.sets = [];
    for (let l = 0; l < (mode === "recompute" ? 1 : c.n_layers); l++) {
      const norm = training ? allocQkNorm(c, N, a) : sharedNorm;
      this.sets.push({
        ...qkvBuffers(a(N * qd), a(N * kvd), a(N * kvd), norm),
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
        loraT: sharedT ?? loraT(),
      });
    }
    const NR = responseRows;
    this.hFinal = a(N * d);
    this.rstdFinal = a(N);
    this.hSel = a(NR * d);
    this.logits = a(lmHead ? NR * c.vocab_size : 1);
    this.stats = a(lmHead ? 2 * NR : 1);
    this.logprob = a(NR);
    this.entropy = a(NR);
    this.ids = a(N);
    this.mask = a(N);
    this.positions = a(N);
    this.predictRows = a(NR);
    this.targets = a(NR);
    this.dx = bw(N * d);
    this.dh = bw(N * d);
    this.dAttn = bw(N * qd);
    this.dq = bw(N * qd);
    this.dk = bw(N * kvd);
    this.dv = bw(N * kvd);
    this.dqProj = c.qk_norm ? bw(N * qd) : null;
    this.dkProj = c.qk_norm ? bw(N * kvd) : null;
    this.D = bw(attnRows * c.n_heads);
    this.dAct = bw(N * c.d_ff);
    this.dGate = bw(N * c.d_ff);
    this.dUp = bw(N * c.d_ff);
    this.dhSel = bw(NR * d);
    this.dlogprob = bw(NR);
    this.dentropy = bw(NR);
    this.loraDt = training && lora !== null ? a(N * lora.r) : null;
  }

  /** Layer l's activation set (the shared one under activation checkpointing). */
  layer(l: number): LayerActivations {
    return this.sets[this.sets.length === 1 ? 0 : l];
  }

  /** The last layer's output (the final norm's input). */
  get xOut(): GPUBuffer {
    return this.inputs[this.inputs.length - 1];
  }

  fits(tokens: number, responseRows: number, attnRows: number, mode: WorkspaceMode, lora: Workspace["lora"]): boolean {
    return (
      tokens <= this.tokens &&
      responseRows <= this.responseRows &&
      attnRows <= this.attnRows &&
      mode === this.mode &&
      JSON.stringify(lora) === JSON.stringify(this.lora)
    );
  }

  destroy(): void {
    for (const b of this.all) b.destroy();
  }
}

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

export interface GpuModelOptions {
  /** How the base's weight matrices are stored: float32 [default], or bf16/f16 when the base is frozen
   * (inference, or LoRA training: kernels/weights.ts). */
  weightFormat?: WeightFormat;
  /** A LoRA adapter applied unmerged on top of the base (docs/lora.md). With `training`, the adapter is what
   * trains: the base gets no gradient or optimizer buffers and its weight gradients are never formed. */
  lora?: LoraWeights;
  /** Training only: keep each layer's input and recompute its activations in the backward (activation
   * checkpointing) [false]. */
  recomputeActivations?: boolean;
  /** "lm": the LM head and its log-softmax [default]; "none": the passes stop at (and the backward starts
   * from) the final hidden rows that predict response tokens, `hSel` (`dhSel`), for a head of the caller's
   * (the critic's value head, src/gpu/value-trainer.ts). */
  head?: "lm" | "none";
}

export class GpuModel {
  /** The base model's tensors (paramLayout order). */
  readonly base: TensorSet;
  /** The adapter, when one is set. */
  private lora: GpuAdapter | null = null;
  private readonly rope: GPUBuffer;
  private workspace: Workspace | null = null;
  private readonly mode: WorkspaceMode;
  private readonly lmHead: boolean;

  /** `params`: flat (paramLayout order) or tensors by name. `training` false: parameters only, no gradient or
   * AdamW-moment buffers (inference, e.g. generation); true: the whole model trains, or with `options.lora`
   * the adapter alone. */
  constructor(
    readonly ctx: GpuContext,
    readonly config: ModelConfig,
    params: ModelParams,
    readonly training = true,
    options: GpuModelOptions = {},
  ) {
    const loraTraining = training && options.lora !== undefined;
    if (options.recomputeActivations && !training)
      throw new ValidationError("recomputeActivations is a training option", ["recomputeActivations"]);
    this.mode = !training ? "inference" : options.recomputeActivations ? "recompute" : "training";
    this.lmHead = (options.head ?? "lm") === "lm";
    this.base = new TensorSet(
      ctx,
      paramLayout(config),
      () => paramViews(config, params),
      training && !loraTraining,
      options.weightFormat ?? "f32",
    );
    try {
      if (options.lora !== undefined) this.lora = new GpuAdapter(ctx, config, options.lora, training);
      this.rope = ctx.upload(ropeTable(config.max_seq_len, headDim(config), config.rope_theta, config.rope_scaling), "rope_table");
    } catch (e) {
      this.base.destroy();
      this.lora?.destroy();
      throw e;
    }
  }

  /** The tensors that train: the adapter in LoRA mode, else the whole model. */
  get trained(): TensorSet {
    return this.lora?.tensors.training ? this.lora.tensors : this.base;
  }

  get adapter(): GpuAdapter | null {
    return this.lora;
  }

  /** Paramlayout order of the base's tensors. */
  get layout(): readonly ParamSpec[] {
    return this.base.layout;
  }

  /** The base's parameter buffers (packed as stored). */
  get params(): ParamBuffers {
    return this.base.params;
  }

  /** How the base's weight matrices (embeddings, projections, lm head) are stored; norms and biases stay f32. */
  get matrixFormat(): WeightFormat {
    return this.base.matrixFormat;
  }

  /** The [max_seq_len, hd/2] cos then sin table RoPE reads (shared with KV-cached decoding). */
  get ropeBuffer(): GPUBuffer {
    return this.rope;
  }

  /** Bytes of the base's parameter buffers on the device (not gradients, optimizer moments or an adapter). */
  get paramBytes(): number {
    return this.base.paramBytes;
  }

  /** Uploads the base's parameters (flat in paramLayout order, or tensors by name) into `target`, one of the
   * base's buffer sets (parameters packed as stored). */
  writeFlat(target: ParamBuffers, params: ModelParams): void {
    this.base.write(target, paramViews(this.config, params));
  }

  /** Downloads a set of the base's float32 buffers into one flat buffer (paramLayout order). */
  readFlat(source: ParamBuffers): Promise<Float32Array> {
    return this.base.readFlat(source);
  }

  /**
   * Inference models: applies `lora` from now on (null: the base alone). An adapter of the same config is
   * overwritten in place, another replaces the old one's buffers; the base is never touched.
   */
  setAdapter(lora: LoraWeights | null): void {
    if (this.training) throw new ValidationError("a training model's adapter is fixed when it is made", ["lora"]);
    if (lora !== null && this.lora?.fits(lora)) {
      this.lora.write(lora);
      return;
    }
    this.ctx.flush(); // encoded work may still read the old adapter
    this.lora?.destroy();
    this.lora = null;
    if (lora !== null) this.lora = new GpuAdapter(this.ctx, this.config, lora, false);
  }

  /** Layer l's projection `name` (wq, ..., w_down) as a pass uses it: the base weight, its gradient when the
   * base trains, and the adapter when there is one and `useAdapter`. */
  projection(l: number, name: string, useAdapter: boolean): ProjectionWeights {
    const key = `layers.${l}.${name}`;
    return {
      w: this.base.params[key],
      format: this.base.matrixFormat,
      gw: this.base.training ? this.base.grads[key] : null,
      lora: useAdapter && this.lora !== null ? this.lora.of(l, name) : null,
    };
  }

  zeroGrads(): void {
    this.trained.zeroGrads();
  }

  /** The workspace for a micro-batch shape, reallocated only when a bigger one (or another adapter shape) is needed. */
  private ensureWorkspace(s: MicroShape): Workspace {
    const tokens = s.B * s.T;
    const responseRows = s.B * s.R;
    const lora = this.lora === null ? null : { r: this.lora.config.r, weights: this.lora.weights };
    if (this.workspace === null || !this.workspace.fits(tokens, responseRows, tokens, this.mode, lora)) {
      this.ctx.flush();
      this.workspace?.destroy();
      this.workspace = null;
      this.workspace = new Workspace(this.ctx, this.config, tokens, responseRows, tokens, this.mode, lora, this.lmHead);
    }
    return this.workspace;
  }

  /** Uploads the inputs and encodes the forward pass; the response log-probs/entropies land in ws.logprob/ws.entropy.
   * `adapter: false` runs the base alone (a LoRA model's reference log-probs); the logits are divided by
   * `temperature` [1] (the LM head's matmul scales them). */
  forward(s: MicroShape, inputs: MicroInputs, options: { adapter?: boolean; temperature?: number } = {}): Workspace {
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
    const bFormat = this.matrixFormat;
    ws.adapterUsed = this.lora !== null && options.adapter !== false;
    ws.temperature = options.temperature ?? 1;
    const scale = 1 / ws.temperature;
    embedding(ctx, ws.ids, P.tok_embeddings, ws.inputs[0], N, d, bFormat);
    for (let l = 0; l < c.n_layers; l++) this.layerForward(ws, s, l, true);
    rmsnorm(ctx, ws.xOut, P.norm, ws.hFinal, ws.rstdFinal, N, d, c.norm_eps);
    // Only the rows that predict response tokens go through the lm head.
    embedding(ctx, ws.predictRows, ws.hFinal, ws.hSel, NR, d);
    if (!this.lmHead) return ws;
    if (c.tie_embeddings) linear(ctx, ws.hSel, P.tok_embeddings, ws.logits, { M: NR, K: d, N: c.vocab_size, transB: true, bFormat, scale });
    else linear(ctx, ws.hSel, P.lm_head, ws.logits, { M: NR, K: d, N: c.vocab_size, bFormat, scale });
    logSoftmaxGatherEntropy(ctx, ws.logits, ws.targets, ws.logprob, ws.entropy, ws.stats, NR, c.vocab_size);
    return ws;
  }

  /**
   * Layer l from ws.inputs[l] into its activation set and, with `output`, on into ws.inputs[l + 1]. Without
   * `output` (recomputing for the backward) the residual sum after the MLP is skipped: the backward reads
   * none of it but the down projection's adapter input.
   */
  private layerForward(ws: Workspace, s: MicroShape, l: number, output: boolean): void {
    const ctx = this.ctx;
    const c = this.config;
    const N = s.B * s.T;
    const d = c.d_model;
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const att: AttentionShape = { batch: s.B, seq: s.T, heads: c.n_heads, kvHeads: c.n_kv_heads, headDim: hd };
    const a = ws.layer(l);
    const xIn = ws.inputs[l];
    const p = (n: string): GPUBuffer => this.params[`layers.${l}.${n}`];
    const proj = (name: string, x: GPUBuffer, y: GPUBuffer, dims: ProjectionDims): void =>
      projectForward(ctx, this.projection(l, name, ws.adapterUsed), x, y, a.loraT[name] ?? null, dims);
    rmsnorm(ctx, xIn, p("attn_norm"), a.h1, a.rstd1, N, d, c.norm_eps);
    proj("wq", a.h1, a.qProj, { M: N, K: d, N: qd });
    proj("wk", a.h1, a.kProj, { M: N, K: d, N: kvd });
    proj("wv", a.h1, a.v, { M: N, K: d, N: kvd });
    finishQkv(ctx, c, p, a, N);
    rope(ctx, a.q, ws.positions, this.rope, c.max_seq_len, N, c.n_heads, hd, false);
    rope(ctx, a.k, ws.positions, this.rope, c.max_seq_len, N, c.n_kv_heads, hd, false);
    attention(ctx, a.q, a.k, a.v, ws.mask, a.attn, a.lse, att);
    ctx.copy(xIn, a.xMid, N * d * 4);
    proj("wo", a.attn, a.xMid, { M: N, K: qd, N: d, accumulate: true });
    rmsnorm(ctx, a.xMid, p("ffn_norm"), a.h2, a.rstd2, N, d, c.norm_eps);
    proj("w_gate", a.h2, a.gate, { M: N, K: d, N: c.d_ff });
    proj("w_up", a.h2, a.up, { M: N, K: d, N: c.d_ff });
    swiglu(ctx, a.gate, a.up, a.act, N * c.d_ff);
    const down: ProjectionDims = { M: N, K: c.d_ff, N: d, accumulate: true };
    if (!output) {
      adapterInput(ctx, this.projection(l, "w_down", ws.adapterUsed), a.act, a.loraT.w_down ?? null, down);
      return;
    }
    const xNext = ws.inputs[l + 1];
    ctx.copy(a.xMid, xNext, N * d * 4);
    proj("w_down", a.act, xNext, down);
  }

  /** Encodes the backward pass from ws.dlogprob / ws.dentropy (filled by the loss; without the LM head, from
   * ws.dhSel), adding into the gradients of what trains: every parameter, or (LoRA) the adapter's alone, the
   * frozen base passing only dx through. */
  backward(s: MicroShape, ws: Workspace): void {
    if (!this.training) throw new ValidationError("an inference model has no gradients", ["training"]);
    if (this.lora !== null && !ws.adapterUsed) throw new ValidationError("the forward ran without the adapter being trained", ["adapter"]);
    const ctx = this.ctx;
    const c = this.config;
    const P = this.params;
    const trainBase = this.base.training;
    const G = this.base.grads;
    const N = s.B * s.T;
    const NR = s.B * s.R;
    const d = c.d_model;
    const V = c.vocab_size;
    const ff = c.d_ff;
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const att: AttentionShape = { batch: s.B, seq: s.T, heads: c.n_heads, kvHeads: c.n_kv_heads, headDim: hd };
    if (this.lmHead) this.lmHeadBackward(ws, NR);
    ctx.clear(ws.dh, N * d * 4);
    scatterRows(ctx, ws.predictRows, ws.dhSel, ws.dh, NR, d);
    if (trainBase) rmsnormBackwardWeight(ctx, ws.xOut, ws.rstdFinal, ws.dh, G.norm, N, d);
    rmsnormBackwardInput(ctx, ws.xOut, P.norm, ws.rstdFinal, ws.dh, ws.dx, N, d, false);
    for (let l = c.n_layers - 1; l >= 0; l--) {
      if (ws.mode === "recompute") this.layerForward(ws, s, l, false);
      const a = ws.layer(l);
      const xIn = ws.inputs[l];
      const p = (n: string): GPUBuffer => P[`layers.${l}.${n}`];
      const g = trainBase ? (n: string): GPUBuffer => G[`layers.${l}.${n}`] : null;
      const back = (name: string, x: GPUBuffer, dy: GPUBuffer, dx: GPUBuffer, dims: ProjectionDims): void =>
        projectBackward(ctx, this.projection(l, name, true), x, dy, dx, a.loraT[name] ?? null, ws.loraDt, dims);
      // x_{l+1} = xMid + act @ w_down
      back("w_down", a.act, ws.dx, ws.dAct, { M: N, K: ff, N: d });
      swigluBackward(ctx, a.gate, a.up, ws.dAct, ws.dGate, ws.dUp, N * ff);
      back("w_gate", a.h2, ws.dGate, ws.dh, { M: N, K: d, N: ff });
      back("w_up", a.h2, ws.dUp, ws.dh, { M: N, K: d, N: ff, accumulate: true });
      if (g) rmsnormBackwardWeight(ctx, a.xMid, a.rstd2, ws.dh, g("ffn_norm"), N, d);
      rmsnormBackwardInput(ctx, a.xMid, p("ffn_norm"), a.rstd2, ws.dh, ws.dx, N, d, true);
      // xMid = xIn + attn @ wo
      back("wo", a.attn, ws.dx, ws.dAttn, { M: N, K: qd, N: d });
      attentionBackward(
        ctx,
        { q: a.q, k: a.k, v: a.v, mask: ws.mask, out: a.attn, lse: a.lse, dout: ws.dAttn, dq: ws.dq, dk: ws.dk, dv: ws.dv, D: ws.D },
        att,
      );
      rope(ctx, ws.dq, ws.positions, this.rope, c.max_seq_len, N, c.n_heads, hd, true);
      rope(ctx, ws.dk, ws.positions, this.rope, c.max_seq_len, N, c.n_kv_heads, hd, true);
      // q/k/v = finishQkv(h1 @ wq, h1 @ wk, h1 @ wv)
      const { dq, dk } = finishQkvBackward(ctx, c, p, g, a, ws, N);
      back("wq", a.h1, dq, ws.dh, { M: N, K: d, N: qd });
      back("wk", a.h1, dk, ws.dh, { M: N, K: d, N: kvd, accumulate: true });
      back("wv", a.h1, ws.dv, ws.dh, { M: N, K: d, N: kvd, accumulate: true });
      if (g) rmsnormBackwardWeight(ctx, xIn, a.rstd1, ws.dh, g("attn_norm"), N, d);
      rmsnormBackwardInput(ctx, xIn, p("attn_norm"), a.rstd1, ws.dh, ws.dx, N, d, true);
    }
    if (trainBase) embeddingBackward(ctx, ws.ids, ws.dx, G.tok_embeddings, N, d, V);
  }

  /** ws.dhSel from ws.dlogprob / ws.dentropy through the log-softmax and the LM head (its gradient when the base trains). */
  private lmHeadBackward(ws: Workspace, NR: number): void {
    const { ctx, config: c, params: P } = this;
    const G = this.base.grads;
    const trainBase = this.base.training;
    const d = c.d_model;
    const V = c.vocab_size;
    const bFormat = this.matrixFormat;
    logSoftmaxGatherEntropyBackward(ctx, ws.logits, ws.targets, ws.stats, ws.dlogprob, ws.dentropy, NR, V);
    // the gradient of the scaled logits, through the forward's division by the temperature
    const dLogits = ws.logits;
    const scale = 1 / ws.temperature;
    if (c.tie_embeddings) {
      linear(ctx, dLogits, P.tok_embeddings, ws.dhSel, { M: NR, K: V, N: d, bFormat, scale });
      if (trainBase) matmul(ctx, dLogits, ws.hSel, G.tok_embeddings, { M: V, K: NR, N: d, transA: true, accumulate: true, scale });
    } else {
      linear(ctx, dLogits, P.lm_head, ws.dhSel, { M: NR, K: V, N: d, transB: true, bFormat, scale });
      if (trainBase) matmul(ctx, ws.hSel, dLogits, G.lm_head, { M: d, K: NR, N: V, transA: true, accumulate: true, scale });
    }
  }

  destroy(): void {
    this.ctx.flushBeforeRelease();
    this.workspace?.destroy();
    this.base.destroy();
    this.lora?.destroy();
    this.rope.destroy();
  }
}

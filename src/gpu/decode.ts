/**
 * KV-cached decoding of a batch of sequences on the GPU. The prompts, left-padded to the longest (T),
 * go once through the model's forward (prefill); their keys (after RoPE) and values are copied into a
 * per-layer cache of S slots per sequence. Each later step feeds one token per sequence through every
 * layer at M = B rows, appends its k/v to slot n-1 and attends over the n filled slots
 * (kernels/kv-cache.ts). Only the last position's logits ([B, V]) come back per step. A model's adapter
 * (set before the decoder is made) applies to the prefill and every step, unmerged (projection.ts).
 */
import { headDim, type ModelConfig } from "../model/config.ts";
import { ValidationError } from "../types/errors.ts";
import type { GpuContext } from "./context.ts";
import { embedding } from "./kernels/embedding.ts";
import { attentionDecode, kvCacheWrite } from "./kernels/kv-cache.ts";
import { linear } from "./kernels/matmul-rows.ts";
import { rmsnorm } from "./kernels/rmsnorm.ts";
import { rope } from "./kernels/rope.ts";
import { swiglu } from "./kernels/swiglu.ts";
import type { GpuModel, MicroInputs, MicroShape } from "./model.ts";
import { projectForward, type ProjectionDims } from "./projection.ts";
import { allocQkNorm, finishQkv, qkvBuffers, type QkvBuffers } from "./qk.ts";

/** Sequences left-padded to the longest as one forward batch whose predicted rows are the last positions
 * (each sequence's last token): positions count from 0 at each sequence's first real token. */
export function leftPaddedBatch(seqs: readonly (readonly number[])[]): { shape: MicroShape; inputs: MicroInputs } {
  const B = seqs.length;
  const T = Math.max(...seqs.map((q) => q.length));
  const ids = new Uint32Array(B * T),
    mask = new Uint32Array(B * T),
    positions = new Uint32Array(B * T);
  const predictRows = new Uint32Array(B);
  seqs.forEach((seq, b) => {
    const pad = T - seq.length;
    seq.forEach((id, j) => {
      ids[b * T + pad + j] = id;
      mask[b * T + pad + j] = 1;
      positions[b * T + pad + j] = j;
    });
    predictRows[b] = b * T + T - 1;
  });
  return { shape: { B, T, R: 1 }, inputs: { ids, mask, positions, predictRows, targets: new Uint32Array(B) } };
}

/** f32 elements per sequence of the largest single buffer a decoder of `slots` slots (prefill length T) binds. */
export function decoderRowElements(c: ModelConfig, T: number, slots: number): number {
  const hd = headDim(c);
  const qd = c.n_heads * hd;
  return Math.max(slots * c.n_kv_heads * hd, T * Math.max(c.d_ff, qd, c.d_model), c.vocab_size);
}

/** The most sequences one decoder may hold on this device for prompts of T tokens and S slots. */
export function maxDecoderBatch(ctx: GpuContext, c: ModelConfig, T: number, slots: number): number {
  const limits = ctx.device.limits;
  const maxBytes = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
  return Math.max(1, Math.floor(maxBytes / (4 * decoderRowElements(c, T, slots))));
}

export class GpuDecoder {
  /** Prompt slots (the longest prompt); slot T + t holds the t-th fed token. */
  readonly promptSlots: number;
  // cache rows, replaced when sequences are dropped (keep)
  private kCache: GPUBuffer[] = [];
  private vCache: GPUBuffer[] = [];
  private mask: GPUBuffer;
  /** Prompt length of each sequence still held. */
  private lengths: number[];
  private filled = 0;
  // one-token step workspace, [B, *]
  private readonly x: GPUBuffer;
  private readonly h: GPUBuffer;
  private readonly rstd: GPUBuffer;
  private readonly qkv: QkvBuffers;
  private readonly attn: GPUBuffer;
  private readonly gate: GPUBuffer;
  private readonly up: GPUBuffer;
  private readonly act: GPUBuffer;
  private readonly logits: GPUBuffer;
  private readonly ids: GPUBuffer;
  private readonly positions: GPUBuffer;
  /** x · lora_a of the projection being computed [B, r], when the model has an adapter. */
  private readonly loraT: GPUBuffer | null;
  private readonly loraR: number;
  private readonly all: GPUBuffer[] = [];

  /** A cache of `slots` slots per prompt (at least the longest prompt). */
  constructor(
    readonly model: GpuModel,
    readonly prompts: readonly (readonly number[])[],
    readonly slots: number,
  ) {
    const c = model.config;
    const ctx = model.ctx;
    this.lengths = prompts.map((p) => p.length);
    this.promptSlots = Math.max(...this.lengths);
    if (this.batch === 0 || this.promptSlots === 0) throw new ValidationError("a decoder needs at least one non-empty prompt", ["prompts"]);
    if (slots < this.promptSlots)
      throw new ValidationError(`${slots} cache slots cannot hold a ${this.promptSlots}-token prompt`, ["slots"]);
    const B = this.batch;
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const a = (n: number, label: string): GPUBuffer => {
      const b = ctx.alloc(n, label);
      this.all.push(b);
      return b;
    };
    for (let l = 0; l < c.n_layers; l++) {
      this.kCache.push(ctx.alloc(B * slots * kvd, `kv_cache.${l}.k`));
      this.vCache.push(ctx.alloc(B * slots * kvd, `kv_cache.${l}.v`));
    }
    // Real slots: a prompt's own (after its left padding) and every decoded one.
    const mask = new Uint32Array(B * slots);
    this.lengths.forEach((len, b) => mask.fill(1, b * slots + this.promptSlots - len, (b + 1) * slots));
    this.mask = ctx.upload(mask, "kv_cache.mask");
    this.x = a(B * c.d_model, "decode.x");
    this.h = a(B * c.d_model, "decode.h");
    this.rstd = a(B, "decode.rstd");
    this.qkv = qkvBuffers(a(B * qd, "decode.q"), a(B * kvd, "decode.k"), a(B * kvd, "decode.v"), allocQkNorm(c, B, a));
    this.attn = a(B * qd, "decode.attn");
    this.gate = a(B * c.d_ff, "decode.gate");
    this.up = a(B * c.d_ff, "decode.up");
    this.act = a(B * c.d_ff, "decode.act");
    this.logits = a(B * c.vocab_size, "decode.logits");
    this.ids = a(B, "decode.ids");
    this.positions = a(B, "decode.positions");
    const adapter = model.adapter;
    this.loraR = adapter?.config.r ?? 0;
    this.loraT = adapter === null ? null : a(B * this.loraR, "decode.lora_t");
  }

  /** Sequences held (fewer after {@link keep}). */
  get batch(): number {
    return this.lengths.length;
  }

  /**
   * Keeps only the sequences `rows` (ascending indices into the current batch), in that order: their
   * cache rows move to new, smaller buffers and later steps compute only them. Their results do not
   * change: each sequence's arithmetic is its own.
   */
  keep(rows: readonly number[]): void {
    if (this.filled === 0) throw new ValidationError("prefill before dropping sequences", ["keep"]);
    if (rows.length === 0 || rows.some((b, i) => !Number.isInteger(b) || b < 0 || b >= this.batch || (i > 0 && b <= rows[i - 1])))
      throw new ValidationError(`rows must be ascending indices into a batch of ${this.batch}, at least one`, ["rows"]);
    if (rows.length === this.batch) return;
    const ctx = this.model.ctx;
    const kvd = this.model.config.n_kv_heads * headDim(this.model.config);
    const old: GPUBuffer[] = [];
    const move = (src: GPUBuffer, width: number, label: string): GPUBuffer => {
      const bytes = this.slots * width * 4;
      const dst = ctx.alloc(rows.length * this.slots * width, label);
      rows.forEach((b, i) => ctx.copy(src, dst, bytes, b * bytes, i * bytes));
      old.push(src);
      return dst;
    };
    this.kCache = this.kCache.map((b, l) => move(b, kvd, `kv_cache.${l}.k`));
    this.vCache = this.vCache.map((b, l) => move(b, kvd, `kv_cache.${l}.v`));
    this.mask = move(this.mask, 1, "kv_cache.mask");
    this.lengths = rows.map((b) => this.lengths[b]);
    ctx.flush(); // the copies are submitted before their sources go
    for (const b of old) b.destroy();
  }

  /** Filled slots (prompt slots plus fed tokens). */
  get length(): number {
    return this.filled;
  }

  /** Runs the prompts through the model, fills the cache, returns each prompt's last-position logits [B, V]. */
  async prefill(): Promise<Float32Array> {
    if (this.filled !== 0) throw new ValidationError("prefill runs once per decoder", ["prefill"]);
    const c = this.model.config;
    const B = this.batch;
    const T = this.promptSlots;
    const { shape, inputs } = leftPaddedBatch(this.prompts);
    const ws = this.model.forward(shape, inputs);
    const kvd = c.n_kv_heads * headDim(c);
    for (let l = 0; l < c.n_layers; l++) {
      kvCacheWrite(this.model.ctx, ws.layer(l).k, this.kCache[l], B, T, this.slots, 0, kvd);
      kvCacheWrite(this.model.ctx, ws.layer(l).v, this.vCache[l], B, T, this.slots, 0, kvd);
    }
    this.filled = T;
    return this.model.ctx.read(ws.logits, B * c.vocab_size);
  }

  /**
   * Feeds one token per sequence and returns the logits it gives [B, V]. A null token marks a finished
   * sequence: it is fed a dummy token (its slot is never read by the others) and its logits row is
   * left zero; only the rows from the first to the last live one are read back.
   */
  async step(tokens: readonly (number | null)[]): Promise<Float32Array> {
    const c = this.model.config;
    const ctx = this.model.ctx;
    const B = this.batch;
    if (this.filled === 0) throw new ValidationError("prefill before decoding", ["step"]);
    if (tokens.length !== B) throw new ValidationError(`step needs ${B} tokens, got ${tokens.length}`, ["tokens"]);
    if (this.filled >= this.slots) throw new ValidationError(`the cache's ${this.slots} slots are full`, ["tokens"]);
    const ids = new Uint32Array(B),
      positions = new Uint32Array(B);
    let lo = B,
      hi = -1;
    tokens.forEach((t, b) => {
      if (t === null) return;
      const position = this.lengths[b] + this.filled - this.promptSlots;
      if (!(Number.isInteger(t) && t >= 0 && t < c.vocab_size))
        throw new ValidationError(`token id ${t} outside [0, ${c.vocab_size})`, ["tokens", b]);
      if (position >= c.max_seq_len) throw new ValidationError(`sequence ${b} would pass max_seq_len ${c.max_seq_len}`, ["tokens", b]);
      ids[b] = t;
      positions[b] = position;
      lo = Math.min(lo, b);
      hi = b;
    });
    const out = new Float32Array(B * c.vocab_size);
    if (hi < 0) return out;
    ctx.write(this.ids, ids);
    ctx.write(this.positions, positions);
    this.encodeStep();
    const V = c.vocab_size;
    out.set(await ctx.read(this.logits, (hi - lo + 1) * V, lo * V), lo * V);
    return out;
  }

  /** One token per row through every layer, appending k/v at slot `filled`. */
  private encodeStep(): void {
    const { ctx, config: c, params: P } = this.model;
    const B = this.batch;
    const d = c.d_model;
    const hd = headDim(c);
    const qd = c.n_heads * hd;
    const kvd = c.n_kv_heads * hd;
    const slot = this.filled;
    const bFormat = this.model.matrixFormat;
    if ((this.model.adapter?.config.r ?? 0) !== this.loraR)
      throw new ValidationError("the model's adapter changed shape since this decoder was made", ["adapter"]);
    embedding(ctx, this.ids, P.tok_embeddings, this.x, B, d, bFormat);
    for (let l = 0; l < c.n_layers; l++) {
      const p = (n: string): GPUBuffer => P[`layers.${l}.${n}`];
      const proj = (name: string, x: GPUBuffer, y: GPUBuffer, dims: ProjectionDims): void =>
        projectForward(ctx, this.model.projection(l, name, true), x, y, this.loraT, dims, linear);
      rmsnorm(ctx, this.x, p("attn_norm"), this.h, this.rstd, B, d, c.norm_eps);
      const { q, k, v } = this.qkv;
      proj("wq", this.h, this.qkv.qProj, { M: B, K: d, N: qd });
      proj("wk", this.h, this.qkv.kProj, { M: B, K: d, N: kvd });
      proj("wv", this.h, v, { M: B, K: d, N: kvd });
      finishQkv(ctx, c, p, this.qkv, B);
      rope(ctx, q, this.positions, this.model.ropeBuffer, c.max_seq_len, B, c.n_heads, hd, false);
      rope(ctx, k, this.positions, this.model.ropeBuffer, c.max_seq_len, B, c.n_kv_heads, hd, false);
      kvCacheWrite(ctx, k, this.kCache[l], B, 1, this.slots, slot, kvd);
      kvCacheWrite(ctx, v, this.vCache[l], B, 1, this.slots, slot, kvd);
      attentionDecode(ctx, q, this.kCache[l], this.vCache[l], this.mask, this.attn, {
        batch: B,
        slots: this.slots,
        filled: slot + 1,
        heads: c.n_heads,
        kvHeads: c.n_kv_heads,
        headDim: hd,
      });
      proj("wo", this.attn, this.x, { M: B, K: qd, N: d, accumulate: true });
      rmsnorm(ctx, this.x, p("ffn_norm"), this.h, this.rstd, B, d, c.norm_eps);
      proj("w_gate", this.h, this.gate, { M: B, K: d, N: c.d_ff });
      proj("w_up", this.h, this.up, { M: B, K: d, N: c.d_ff });
      swiglu(ctx, this.gate, this.up, this.act, B * c.d_ff);
      proj("w_down", this.act, this.x, { M: B, K: c.d_ff, N: d, accumulate: true });
    }
    rmsnorm(ctx, this.x, P.norm, this.h, this.rstd, B, d, c.norm_eps);
    if (c.tie_embeddings) linear(ctx, this.h, P.tok_embeddings, this.logits, { M: B, K: d, N: c.vocab_size, transB: true, bFormat });
    else linear(ctx, this.h, P.lm_head, this.logits, { M: B, K: d, N: c.vocab_size, bFormat });
    this.filled = slot + 1;
  }

  destroy(): void {
    this.model.ctx.flushBeforeRelease();
    for (const b of [...this.all, ...this.kCache, ...this.vCache, this.mask]) b.destroy();
  }
}

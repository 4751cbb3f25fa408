/**
 * The policy the server answers with: a model name, a version that changes with every published
 * update, and batched generation. {@link ModelPolicy} serves a model config and flat parameters through
 * a {@link GenerationEngine} (CPU by default); the GRPO loop calls `update` after each step. With a LoRA
 * adapter the base weights stay as they are and `update` swaps only the adapter: serving a new adapter
 * version never reloads or copies the base.
 */
import type { ModelConfig } from "../model/config.ts";
import { Rng } from "../model/init.ts";
import { paramViews, type ModelParams } from "../model/params.ts";
import { loraState, type LoraWeights } from "../model/lora.ts";
import { byteTokenizer } from "../model/tokenizer.ts";
import type { Tokenizer } from "../model/tokenizer-api.ts";
import type { Generation, GenerationEngine, GenerationRequest } from "../model/generation.ts";
import { cpuGenerationEngine } from "../cpu/generation.ts";

export interface Policy {
  /** The model name clients put in their requests. */
  readonly model: string;
  /** Increases with every update of the weights. */
  readonly version: number;
  /** Model context length: prompt + output never exceed it. */
  readonly maxSeqLen: number;
  /** Turns chats into prompt ids and sampled ids into text. */
  readonly tokenizer: Tokenizer;
  generate(requests: readonly GenerationRequest[], options?: PolicyGenerateOptions): Promise<Generation[]>;
  /** A fresh sampler seed for a request that names none (so repeated calls give different samples). */
  nextSeed(): number;
}

export interface PolicyGenerateOptions {
  /**
   * Apply the policy's LoRA adapter (default true); false serves the frozen base alone, as the policy
   * server does for agents that are not trained (docs/agents.md#training-only-some-agents). A policy
   * without an adapter serves its weights either way.
   */
  adapter?: boolean;
}

export interface ModelPolicyOptions {
  model: string;
  config: ModelConfig;
  /** The flat buffer or tensors by name (e.g. a `loadPretrained` model's weights). */
  params: ModelParams;
  /** [the byte tokenizer of our presets] */
  tokenizer?: Tokenizer;
  /** A LoRA adapter applied on top of `params` (then the frozen base); `update` replaces its tensors. */
  lora?: LoraWeights;
  version?: number;
  engine?: GenerationEngine;
  /** Seed of the stream of per-request seeds [0]. */
  seed?: number;
}

export class ModelPolicy implements Policy {
  readonly model: string;
  readonly config: ModelConfig;
  readonly tokenizer: Tokenizer;
  private params: ModelParams;
  private lora: LoraWeights | undefined;
  private currentVersion: number;
  private readonly engine: GenerationEngine;
  private readonly seeds: Rng;

  constructor(o: ModelPolicyOptions) {
    this.model = o.model;
    this.config = o.config;
    this.params = checked(o.config, o.params);
    this.lora = o.lora && checkedAdapter(o.config, o.lora);
    this.tokenizer = o.tokenizer ?? byteTokenizer;
    this.currentVersion = o.version ?? 0;
    this.engine = o.engine ?? cpuGenerationEngine;
    this.seeds = new Rng(o.seed ?? 0);
  }

  get version(): number {
    return this.currentVersion;
  }
  get maxSeqLen(): number {
    return this.config.max_seq_len;
  }
  get backend(): "cpu" | "webgpu" {
    return this.engine.backend;
  }

  /** The adapter being served on top of the base, if any. */
  get adapter(): LoraWeights | undefined {
    return this.lora;
  }

  /** Publishes new trained weights (copied, so the trainer may keep changing its own): the whole model's,
   * or, for a policy serving a LoRA adapter, the adapter's (flat in `loraLayout` order or by name). */
  update(params: ModelParams, version = this.currentVersion + 1): void {
    if (this.lora) this.lora = checkedAdapter(this.config, { config: this.lora.config, params });
    else this.params = checked(this.config, params);
    this.currentVersion = version;
  }

  generate(requests: readonly GenerationRequest[], options: PolicyGenerateOptions = {}): Promise<Generation[]> {
    const lora = options.adapter === false ? undefined : this.lora;
    return this.engine.generate(this.config, this.params, requests, this.tokenizer, lora);
  }

  nextSeed(): number {
    return this.seeds.nextU32();
  }
}

/** An adapter checked against the model, its flat buffer copied. */
function checkedAdapter(config: ModelConfig, lora: LoraWeights): LoraWeights {
  loraState(config, lora);
  return { config: lora.config, params: lora.params instanceof Float32Array ? lora.params.slice() : { ...lora.params } };
}

/** A private copy of flat weights (the trainer keeps changing its own); tensors by name are checked and kept. */
function checked(config: ModelConfig, params: ModelParams): ModelParams {
  paramViews(config, params);
  return params instanceof Float32Array ? params.slice() : { ...params };
}

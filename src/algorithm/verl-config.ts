/**
 * verl's config (docs/training.md#config): a zod schema of verl's nested keys — verl 0.5 and 0.6, the versions
 * Agent Lightning v0.3 installs, plus Agent Lightning's `agentlightning` section — and their mapping onto the
 * PPO algorithm's options ({@link PpoOptions}, {@link PolicyLossOptions}, {@link CriticOptions}).
 *
 * Every key of verl's defaults is classified, and the classification lives on the schema itself:
 *  - used: it maps to an option;
 *  - ignored: accepted whatever its value, because it places work on GPUs (FSDP, offload, tensor
 *    parallelism, the vLLM engine, dtypes...) or tunes something that has no counterpart here and does
 *    not change what is learned (logging, profiling, Ray);
 *  - refused: accepted only at the value(s) this trainer honours (mostly: off), else an error naming the key.
 * A key verl does not have is refused with its path, so a typo never passes silently. Keys a config leaves
 * out take verl's defaults, as Hydra's merge does: a verl config stands for verl's whole config.
 */
import { z } from "zod";
import { AGGREGATION_LEVELS, type AggregationLevel } from "../adapter/batch.ts";
import { LORA_TARGETS, type LoraTarget } from "../model/lora.ts";
import type { KlLossType, LossAggMode, OptimizerOptions, PolicyLossMode, PolicyLossOptions } from "../model/train-types.ts";
import { ValidationError } from "../types/errors.ts";
import { KL_ALIASES } from "../wasm/types.ts";
import { POLICY_LOSS_MODES as LOSS_MODES } from "../model/ppo-loss.ts";
import type { AdvantageEstimator, CriticOptions, PpoOptions } from "./ppo-options.ts";

/** Every value of a string union, checked both ways at compile time. */
const allOf =
  <T extends string>() =>
  <const L extends readonly T[]>(list: L & ([T] extends [L[number]] ? unknown : never)): L =>
    list;

export const ADV_ESTIMATORS = allOf<AdvantageEstimator>()([
  "gae",
  "grpo",
  "grpo_passk",
  "rloo",
  "opo",
  "gpg",
  "reinforce_plus_plus",
  "reinforce_plus_plus_baseline",
  "remax",
]);
/** The loss's own list (src/model/ppo-loss.ts), checked here to name every mode. */
export const POLICY_LOSS_MODES = allOf<PolicyLossMode>()(LOSS_MODES);
export const LOSS_AGG_MODES = allOf<LossAggMode>()(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]);
export const KL_TYPES = Object.keys(KL_ALIASES) as [KlLossType, ...KlLossType[]];
export const LR_SCHEDULERS = ["constant", "cosine"] as const;
export type LrSchedulerType = (typeof LR_SCHEDULERS)[number];

// ---- the classification, attached to each schema node --------------------------------------------------

/** What the trainer does with a key: maps it, ignores it (`why`), or refuses values other than those it `accepts` (`why`). */
export type VerlKeyClass =
  | { kind: "used" }
  | { kind: "ignored"; why: string }
  | { kind: "refused"; why: string; accepts: readonly unknown[] };
type NodeInfo = VerlKeyClass | { kind: "section"; keys: Readonly<Record<string, z.ZodType>> };
const NODES = new WeakMap<z.ZodType, NodeInfo>();

function used<T extends z.ZodType>(schema: T): T {
  NODES.set(schema, { kind: "used" });
  return schema;
}
/** Any value, a whole subtree included. */
function ignored(why: string) {
  const schema = z.unknown().optional();
  NODES.set(schema, { kind: "ignored", why });
  return schema;
}
/** Only the values `accepts` lists (verl's default among them; `{}` an empty object); any other is refused with `why`. */
function refused(accepts: readonly (string | number | boolean | null | Record<string, never>)[], why: string) {
  const ok = (v: unknown): boolean => accepts.some((a) => (isEmptyObject(a) ? isEmptyObject(v) : a === v));
  const schema = z
    .unknown()
    .superRefine((v, ctx) => {
      if (!ok(v)) ctx.addIssue({ code: "custom", message: `${JSON.stringify(v)} is refused (only ${orList(accepts)}): ${why}` });
    })
    .optional();
  NODES.set(schema, { kind: "refused", why, accepts });
  return schema;
}
const isEmptyObject = (v: unknown): boolean => typeof v === "object" && v !== null && !Array.isArray(v) && Object.keys(v).length === 0;
const orList = (values: readonly unknown[]): string => values.map((v) => JSON.stringify(v)).join(" or ");

/** A nested section: strict (an unknown key is an error), absent = all defaults; Hydra's `_target_` is accepted. */
function section<S extends Record<string, z.ZodType>>(keys: S) {
  const all = { _target_: ignored("Hydra's class to build the section with"), ...keys };
  const schema = z.strictObject(all).prefault({} as never);
  NODES.set(schema, { kind: "section", keys: all });
  return schema;
}

const int = () => z.number().int();
const positiveInt = () => z.number().int().min(1);
const rowsOrNull = () => positiveInt().nullable().default(null);

const FSDP = "FSDP sharding, offload and dtype across GPUs: one process trains here, in float32";
const PROFILER = "GPU profilers (Nsight, torch, NPU)";
const ENGINE = "vLLM/SGLang engine settings: the policy server generates with the trainer's own weights";
const TORCH = "a PyTorch speed or memory knob that leaves the math unchanged";
const CHECKPOINT = "what verl's checkpoints hold: here always the weights and the optimizer state";
const LOG_PROB_BATCH = "micro-batching of a log-prob forward: here the actor's micro-batch size";
const DYNAMIC_BATCH = "token-budget micro-batches: micro-batches here count rows";
const ULYSSES = "Ulysses sequence parallelism across GPUs";
const SAMPLING = "Agent Lightning's agent mode hands the agents' LLM only the temperature";
const VERL_LOOP = "verl's own rollout loop: in agent mode the agent drives the turns and calls the tools";
const DATASET = "how verl loads its parquet datasets: here the tasks are JSONL lines handed to the agent";
const TRACKING = "experiment tracking: here the output folder's metrics, reward curve and store";
const RAY = "Ray cluster settings: no Ray here";
const NOT_LOADED = "no Python code is loaded";
const CODE_EXTENSION = "a Python class or function of your own has no counterpart here";

/** The keys of verl's optimizer section that the actor and the critic treat alike. */
const optimCommon = (lr: number) => ({
  lr: used(z.number().positive().default(lr)),
  weight_decay: used(z.number().min(0).default(0.01)),
  betas: used(z.tuple([z.number().min(0).lt(1), z.number().min(0).lt(1)]).default([0.9, 0.999])),
  clip_grad: ignored("read by verl's new engine workers only; the default workers read grad_clip"),
  total_training_steps: ignored("verl fills it in from the trainer's step count"),
  optimizer: refused(["AdamW"], "the optimizer is AdamW"),
  optimizer_impl: ignored("the Python module of the optimizer class"),
  override_optimizer_config: refused([null, {}], "extra optimizer arguments have no counterpart"),
});

const actorOptim = section({
  ...optimCommon(1e-6),
  /** -1: lr_warmup_steps_ratio of the steps. */
  lr_warmup_steps: used(int().min(-1).nullable().default(-1)),
  lr_warmup_steps_ratio: used(z.number().min(0).max(1).default(0)),
  lr_scheduler_type: used(z.enum(LR_SCHEDULERS).default("constant")),
  /** Deprecated spelling of lr_scheduler_type; wins when set, as in verl. */
  warmup_style: used(z.enum(LR_SCHEDULERS).nullable().default(null)),
  min_lr_ratio: used(z.number().min(0).max(1).nullable().default(0)),
  num_cycles: used(z.number().default(0.5)),
});

const CONSTANT_CRITIC_LR = "the critic's learning rate is constant";
const criticOptim = section({
  ...optimCommon(1e-5),
  lr_warmup_steps: refused([null, -1, 0], CONSTANT_CRITIC_LR),
  lr_warmup_steps_ratio: refused([0], CONSTANT_CRITIC_LR),
  lr_scheduler_type: refused(["constant"], CONSTANT_CRITIC_LR),
  warmup_style: refused([null, "constant"], CONSTANT_CRITIC_LR),
  min_lr_ratio: ignored("used only with a cosine schedule"),
  num_cycles: ignored("used only with a cosine schedule"),
});

const actor = section({
  strategy: ignored(FSDP),
  /** Prompts per optimizer update; verl multiplies it by rollout.n. */
  ppo_mini_batch_size: used(positiveInt().default(256)),
  /** Deprecated: rows per forward/backward over all GPUs. */
  ppo_micro_batch_size: used(rowsOrNull()),
  ppo_micro_batch_size_per_gpu: used(rowsOrNull()),
  use_dynamic_bsz: ignored(DYNAMIC_BATCH),
  ppo_max_token_len_per_gpu: ignored(DYNAMIC_BATCH),
  clip_ratio: used(z.number().positive().default(0.2)),
  clip_ratio_low: used(z.number().positive().nullable().default(0.2)),
  clip_ratio_high: used(z.number().positive().nullable().default(0.2)),
  clip_ratio_c: used(z.number().gt(1).default(3)),
  freeze_vision_tower: ignored("vision towers: the supported models are text-only"),
  policy_loss: section({
    loss_mode: used(z.enum(POLICY_LOSS_MODES).default("vanilla")),
    clip_cov_ratio: used(z.number().min(0).max(1).default(0.0002)),
    clip_cov_lb: used(z.number().default(1)),
    clip_cov_ub: used(z.number().default(5)),
    kl_cov_ratio: used(z.number().min(0).max(1).default(0.0002)),
    ppo_kl_coef: used(z.number().min(0).default(0.1)),
  }),
  loss_agg_mode: used(z.enum(LOSS_AGG_MODES).default("token-mean")),
  entropy_coeff: used(z.number().default(0)),
  use_kl_loss: used(z.boolean().default(false)),
  kl_loss_coef: used(z.number().min(0).default(0.001)),
  kl_loss_type: used(z.enum(KL_TYPES).default("low_var_kl")),
  ppo_epochs: used(positiveInt().default(1)),
  shuffle: ignored("the rows are shuffled into mini-batches every epoch here (seeded)"),
  use_torch_compile: ignored(TORCH),
  checkpoint: ignored(CHECKPOINT),
  use_fused_kernels: ignored(TORCH),
  profiler: ignored(PROFILER),
  grad_clip: used(z.number().min(0).default(1)),
  ulysses_sequence_parallel_size: ignored(ULYSSES),
  entropy_from_logits_with_chunking: ignored(TORCH),
  entropy_checkpointing: ignored(TORCH),
  use_remove_padding: ignored(TORCH),
  fsdp_config: ignored(FSDP),
  optim: actorOptim,
});

const ref = section({
  strategy: ignored(FSDP),
  use_torch_compile: ignored(TORCH),
  log_prob_micro_batch_size: ignored(LOG_PROB_BATCH),
  log_prob_micro_batch_size_per_gpu: ignored(LOG_PROB_BATCH),
  log_prob_use_dynamic_bsz: ignored(DYNAMIC_BATCH),
  log_prob_max_token_len_per_gpu: ignored(DYNAMIC_BATCH),
  profiler: ignored(PROFILER),
  fsdp_config: ignored(FSDP),
  model: refused([null], "a reference model of its own: the reference is the base without the adapter (LoRA)"),
  ulysses_sequence_parallel_size: ignored(ULYSSES),
  entropy_from_logits_with_chunking: ignored(TORCH),
  entropy_checkpointing: ignored(TORCH),
});

const rollout = section({
  name: ignored(ENGINE),
  mode: ignored(ENGINE),
  temperature: used(z.number().min(0).default(1)),
  top_k: ignored(SAMPLING),
  top_p: ignored(SAMPLING),
  do_sample: ignored(SAMPLING),
  prompt_length: ignored("the engine's prompt limit: rows keep data.max_prompt_length tokens"),
  response_length: ignored("the engine's response limit: rows keep data.max_response_length tokens"),
  dtype: ignored(ENGINE),
  gpu_memory_utilization: ignored(ENGINE),
  ignore_eos: refused([false], "generation stops at the end-of-sequence token"),
  enforce_eager: ignored(ENGINE),
  cudagraph_capture_sizes: ignored(ENGINE),
  free_cache_engine: ignored(ENGINE),
  tensor_model_parallel_size: ignored(ENGINE),
  data_parallel_size: ignored(ENGINE),
  expert_parallel_size: ignored(ENGINE),
  pipeline_model_parallel_size: ignored(ENGINE),
  max_num_batched_tokens: ignored(ENGINE),
  max_model_len: ignored(ENGINE),
  max_num_seqs: ignored(ENGINE),
  enable_chunked_prefill: ignored(ENGINE),
  enable_prefix_caching: ignored(ENGINE),
  load_format: ignored(ENGINE),
  log_prob_micro_batch_size: ignored(LOG_PROB_BATCH),
  log_prob_micro_batch_size_per_gpu: ignored(LOG_PROB_BATCH),
  log_prob_use_dynamic_bsz: ignored(DYNAMIC_BATCH),
  log_prob_max_token_len_per_gpu: ignored(DYNAMIC_BATCH),
  disable_log_stats: ignored(ENGINE),
  /** Rollouts per task (the group size). */
  n: used(positiveInt().default(1)),
  over_sample_rate: ignored(VERL_LOOP),
  multi_stage_wake_up: ignored(ENGINE),
  engine_kwargs: ignored(ENGINE),
  val_kwargs: ignored("validation runs greedily (temperature 0), one rollout per task"),
  multi_turn: ignored(VERL_LOOP),
  calculate_log_probs: ignored("the old log-probs are recomputed by the trainer, as verl does by default"),
  agent: ignored(VERL_LOOP),
  update_weights_bucket_megabytes: ignored(ENGINE),
  trace: ignored("rollout tracing backends: the store records every LLM call's span"),
  skip_rollout: refused([false], "replaying dumped rollouts is a verl debugging aid"),
  skip_dump_dir: ignored("used only with skip_rollout"),
  skip_tokenizer_init: ignored(ENGINE),
  profiler: ignored(PROFILER),
  prometheus: ignored(ENGINE),
  layered_summon: ignored(FSDP),
});

const model = section({
  /** The actor's Hugging Face folder. */
  path: used(z.string().min(1).nullable().default(null)),
  hf_config_path: refused([null], "config.json is read from the model folder"),
  tokenizer_path: refused([null], "tokenizer.json is read from the model folder"),
  use_shm: ignored("loading through /dev/shm"),
  trust_remote_code: ignored(NOT_LOADED),
  custom_chat_template: refused([null], "the chat template is the model folder's"),
  external_lib: refused([null], NOT_LOADED),
  override_config: refused([null, {}], "the model's config.json is used as it is"),
  enable_gradient_checkpointing: used(z.boolean().default(true)),
  enable_activation_offload: ignored(FSDP),
  use_remove_padding: ignored(TORCH),
  /** 0: full fine-tuning. */
  lora_rank: used(int().min(0).default(0)),
  lora_alpha: used(z.number().positive().default(16)),
  target_modules: used(
    z
      .union([z.literal("all-linear"), z.array(z.enum(LORA_TARGETS)).min(1)], {
        error: `must be "all-linear" or a list of ${LORA_TARGETS.join(", ")}`,
      })
      .default("all-linear"),
  ),
  exclude_modules: refused([null], "give target_modules instead"),
  lora_adapter_path: refused([null], "training starts from a fresh adapter (resume from the output folder instead)"),
  use_liger: ignored(TORCH),
  use_fused_kernels: ignored(TORCH),
  fused_kernel_options: ignored(TORCH),
});

const data = section({
  tokenizer: refused([null], "the tokenizer is the model folder's"),
  use_shm: ignored("loading through /dev/shm"),
  train_files: ignored("Agent Lightning hands the datasets to fit(); here --data"),
  val_files: ignored("Agent Lightning hands the datasets to fit(); here --val-data"),
  train_max_samples: refused([null, -1], "every task of --data is used"),
  val_max_samples: refused([null, -1], "every task of --val-data is used"),
  prompt_key: ignored(DATASET),
  reward_fn_key: ignored(DATASET),
  /** Prompt/response tokens kept per row (transition level). */
  max_prompt_length: used(positiveInt().default(512)),
  max_response_length: used(positiveInt().default(512)),
  /** Tasks (prompts) per step. */
  train_batch_size: used(positiveInt().default(1024)),
  val_batch_size: ignored("validation runs every task at once"),
  tool_config_path: ignored(VERL_LOOP),
  return_raw_input_ids: ignored(DATASET),
  return_raw_chat: ignored(DATASET),
  return_full_prompt: ignored(DATASET),
  shuffle: refused([true], "the tasks are always shuffled (seeded)"),
  /** Seed of the task order. */
  seed: used(int().min(0).nullable().default(null)),
  dataloader_num_workers: ignored(DATASET),
  image_patch_size: ignored("images: the supported models are text-only"),
  validation_shuffle: ignored("the order of the validation tasks does not change their score"),
  filter_overlong_prompts: ignored("in agent mode the prompts are the agent's: rows with over-long prompts are dropped at training"),
  filter_overlong_prompts_workers: ignored(DATASET),
  truncation: ignored("in agent mode the prompts are the agent's: rows with over-long prompts are dropped at training"),
  image_key: ignored("images: the supported models are text-only"),
  video_key: ignored("videos: the supported models are text-only"),
  trust_remote_code: ignored(NOT_LOADED),
  custom_cls: section({ path: refused([null], CODE_EXTENSION), name: ignored("used only with custom_cls.path") }),
  return_multi_modal_inputs: ignored(DATASET),
  sampler: section({ class_path: refused([null], CODE_EXTENSION), class_name: ignored("used only with sampler.class_path") }),
  datagen: section({ path: refused([null], CODE_EXTENSION), name: ignored("used only with datagen.path") }),
  apply_chat_template_kwargs: ignored(DATASET),
});

const critic = section({
  /** null: a critic exactly when the estimator is gae. */
  enable: used(z.boolean().nullable().default(null)),
  optim: criticOptim,
  model: section({
    /** The critic's Hugging Face folder [the actor's]. */
    path: used(z.string().min(1).nullable().default(null)),
    tokenizer_path: ignored("the critic reads the actor's token ids"),
    override_config: refused([null, {}], "the model's config.json is used as it is"),
    external_lib: refused([null], NOT_LOADED),
    trust_remote_code: ignored(NOT_LOADED),
    use_shm: ignored("loading through /dev/shm"),
    enable_gradient_checkpointing: ignored(TORCH),
    enable_activation_offload: ignored(FSDP),
    use_remove_padding: ignored(TORCH),
    lora_rank: refused([0], "the critic trains every weight"),
    lora_alpha: ignored("used only with a LoRA critic"),
    target_modules: ignored("used only with a LoRA critic"),
    fsdp_config: ignored(FSDP),
  }),
  rollout_n: ignored("a copy of actor_rollout_ref.rollout.n"),
  strategy: ignored(FSDP),
  /** Prompts per critic update [the actor's]; verl multiplies it by rollout.n. */
  ppo_mini_batch_size: used(positiveInt().nullable().default(null)),
  ppo_micro_batch_size: used(rowsOrNull()),
  ppo_micro_batch_size_per_gpu: used(rowsOrNull()),
  use_dynamic_bsz: ignored(DYNAMIC_BATCH),
  ppo_max_token_len_per_gpu: ignored(DYNAMIC_BATCH),
  forward_max_token_len_per_gpu: ignored(DYNAMIC_BATCH),
  forward_micro_batch_size: ignored(LOG_PROB_BATCH),
  forward_micro_batch_size_per_gpu: ignored(LOG_PROB_BATCH),
  ppo_epochs: used(positiveInt().nullable().default(null)),
  shuffle: ignored("the rows are shuffled into mini-batches every epoch here (seeded)"),
  cliprange_value: used(z.number().positive().default(0.5)),
  loss_agg_mode: used(z.enum(LOSS_AGG_MODES).nullable().default(null)),
  checkpoint: ignored(CHECKPOINT),
  profiler: ignored(PROFILER),
  ulysses_sequence_parallel_size: ignored(ULYSSES),
  grad_clip: used(z.number().min(0).default(1)),
});

const NO_REWARD_MODEL = "used only with reward_model.enable";
const rewardModel = section({
  enable: refused([false], "rewards are the ones the agent's rollouts emit: no reward model runs here"),
  enable_resource_pool: ignored(NO_REWARD_MODEL),
  n_gpus_per_node: ignored(NO_REWARD_MODEL),
  nnodes: ignored(NO_REWARD_MODEL),
  strategy: ignored(NO_REWARD_MODEL),
  model: ignored(NO_REWARD_MODEL),
  micro_batch_size: ignored(NO_REWARD_MODEL),
  micro_batch_size_per_gpu: ignored(NO_REWARD_MODEL),
  max_length: ignored(NO_REWARD_MODEL),
  use_dynamic_bsz: ignored(NO_REWARD_MODEL),
  forward_max_token_len_per_gpu: ignored(NO_REWARD_MODEL),
  reward_manager: ignored("rewards are the ones the agent's rollouts emit"),
  launch_reward_fn_async: ignored("rewards are the ones the agent's rollouts emit"),
  sandbox_fusion: ignored("rewards are the ones the agent's rollouts emit"),
  profiler: ignored(PROFILER),
  ulysses_sequence_parallel_size: ignored(NO_REWARD_MODEL),
});

const algorithm = section({
  gamma: used(z.number().min(0).max(1).default(1)),
  lam: used(z.number().min(0).max(1).default(1)),
  adv_estimator: used(z.enum(ADV_ESTIMATORS).default("gae")),
  norm_adv_by_std_in_grpo: used(z.boolean().default(true)),
  use_kl_in_reward: used(z.boolean().default(false)),
  kl_penalty: used(z.enum(KL_TYPES).default("kl")),
  kl_ctrl: section({
    type: used(z.enum(["fixed", "adaptive"]).default("fixed")),
    kl_coef: used(z.number().min(0).default(0.001)),
    horizon: used(z.number().positive().default(10000)),
    target_kl: used(z.number().positive().default(0.1)),
  }),
  use_pf_ppo: refused([false], "preference-feedback PPO (resampling by reward) is not implemented"),
  pf_ppo: ignored("used only with use_pf_ppo"),
  // rollout importance sampling (verl 0.6): the rollouts come from the trainer's own weights, in float32
  rollout_is: refused([null, false], "rollout importance sampling: the rollouts are the trained policy's own"),
  rollout_is_level: ignored("used only with rollout_is"),
  rollout_is_mode: ignored("used only with rollout_is"),
  rollout_is_threshold: ignored("used only with rollout_is"),
  rollout_is_threshold_lower: ignored("used only with rollout_is"),
  rollout_is_veto_threshold: ignored("used only with rollout_is"),
  rollout_correction: section({
    rollout_is: refused([null], "rollout importance sampling: the rollouts are the trained policy's own"),
    rollout_is_threshold: ignored("used only with rollout_is"),
    rollout_is_batch_normalize: ignored("used only with rollout_is"),
    rollout_rs: refused([null], "rollout rejection sampling: the rollouts are the trained policy's own"),
    rollout_rs_threshold: ignored("used only with rollout_rs"),
    rollout_rs_threshold_lower: ignored("used only with rollout_rs"),
    rollout_token_veto_threshold: refused([null], "rollout correction: the rollouts are the trained policy's own"),
    bypass_mode: refused([false], "rollout correction: the old log-probs are always recomputed"),
    use_policy_gradient: refused([false], "rollout correction: the loss is the actor's policy loss"),
  }),
});

const trainer = section({
  balance_batch: ignored("balances tokens across data-parallel GPUs"),
  /** Passes over the training tasks (steps = total_epochs x floor(tasks / train_batch_size)). */
  total_epochs: used(positiveInt().default(30)),
  /** Steps; wins over total_epochs. */
  total_training_steps: used(positiveInt().nullable().default(null)),
  project_name: ignored(TRACKING),
  experiment_name: ignored(TRACKING),
  logger: ignored(TRACKING),
  log_val_generations: ignored(TRACKING),
  /** Each step's prompts, responses, rewards and advantages as JSONL. */
  rollout_data_dir: used(z.string().min(1).nullable().default(null)),
  validation_data_dir: refused([null], "validation generations are not dumped; the store holds their spans"),
  nnodes: ignored("GPU placement: one process trains here"),
  n_gpus_per_node: ignored("GPU placement: one process trains here"),
  /** Steps between checkpoints; <= 0: only the last step's. */
  save_freq: used(int().default(-1)),
  esi_redundant_time: ignored("a cloud-preemption margin for checkpoints"),
  resume_mode: refused(["auto"], "a run resumes from its output folder; use another --out to start afresh"),
  resume_from_path: refused([null], "a run resumes from its output folder"),
  val_before_train: refused([true], "validation always runs before the first step (the curve's step 0)"),
  val_only: refused([false], "agl train trains; evaluate with agl serve and your agent"),
  /** Validate every test_freq steps; <= 0: before the first step and after the last only. */
  test_freq: used(int().default(-1)),
  /** Steps that train only the critic. */
  critic_warmup: used(int().min(0).default(0)),
  default_hdfs_dir: refused([null], "checkpoints go to the output folder"),
  del_local_ckpt_after_load: ignored("used only with default_hdfs_dir"),
  default_local_dir: ignored("checkpoints go to OUT/checkpoints (--out)"),
  max_actor_ckpt_to_keep: ignored("every checkpoint is kept"),
  max_critic_ckpt_to_keep: ignored("every checkpoint is kept"),
  ray_wait_register_center_timeout: ignored(RAY),
  device: ignored("CUDA or NPU: here --device"),
  use_legacy_worker_impl: ignored("verl's worker implementation"),
  profile_steps: ignored(PROFILER),
  controller_nsight_options: ignored(PROFILER),
  worker_nsight_options: ignored(PROFILER),
  npu_profile: ignored(PROFILER),
});

const agentlightning = section({
  port: ignored("Agent Lightning's server port: the store and the policy server run in this process"),
  trace_aggregator: section({
    level: used(z.enum(AGGREGATION_LEVELS as [AggregationLevel, ...AggregationLevel[]]).default("transition")),
    /** Trajectory level: prompt tokens kept per row (the first turn's prompt). */
    trajectory_max_prompt_length: used(positiveInt().default(2048)),
    /** Trajectory level: tokens kept after the prompt (every turn's reply and what comes between). */
    trajectory_max_response_length: used(positiveInt().default(8192)),
    debug: ignored("diagnostics of Agent Lightning's trace merging"),
    mismatch_log_dir: ignored("diagnostics of Agent Lightning's trace merging"),
  }),
});

const root = section({
  actor_rollout_ref: section({
    hybrid_engine: ignored("the policy server always serves the trainer's own weights"),
    nccl_timeout: ignored("GPU collectives"),
    profiler: ignored(PROFILER),
    actor,
    ref,
    rollout,
    model,
  }),
  data,
  critic,
  reward_model: rewardModel,
  custom_reward_function: section({
    path: refused([null], "rewards are the ones the agent's rollouts emit"),
    name: ignored("used only with custom_reward_function.path"),
  }),
  algorithm,
  trainer,
  global_profiler: ignored(PROFILER),
  transfer_queue: ignored("verl's data-transfer service between workers"),
  ray_kwargs: ignored(RAY),
  ray_init: ignored(RAY),
  agentlightning,
});

/** verl's config (as Agent Lightning's `VERL(config)` takes it), every key with verl's default. */
export const VerlConfigSchema = root.superRefine((c, ctx) => {
  const actorCfg = c.actor_rollout_ref.actor;
  // verl's own checks (verl/trainer/ppo/ray_trainer.py, validate_config)
  if (c.data.train_batch_size < actorCfg.ppo_mini_batch_size)
    ctx.addIssue({
      code: "custom",
      path: ["actor_rollout_ref", "actor", "ppo_mini_batch_size"],
      message: `must be at most data.train_batch_size (${c.data.train_batch_size}): both count prompts`,
    });
  for (const [name, s] of [
    ["actor", actorCfg],
    ["critic", c.critic],
  ] as const)
    if (s.ppo_micro_batch_size !== null && s.ppo_micro_batch_size_per_gpu !== null)
      ctx.addIssue({
        code: "custom",
        path: [...(name === "actor" ? ["actor_rollout_ref", "actor"] : ["critic"]), "ppo_micro_batch_size"],
        message: "give ppo_micro_batch_size or ppo_micro_batch_size_per_gpu, not both",
      });
});

export type VerlConfig = z.infer<typeof VerlConfigSchema>;
/** verl's top-level sections (a config with one of them is a verl config). */
export const VERL_SECTIONS: readonly string[] = Object.keys(sectionKeys(root));

function sectionKeys(schema: z.ZodType): Readonly<Record<string, z.ZodType>> {
  const info = NODES.get(schema);
  if (info?.kind !== "section") throw new Error("not a section");
  return info.keys;
}

/** How a key path (`["algorithm", "adv_estimator"]`) is treated; null for a path verl's config does not have. */
export function classifyVerlKey(path: readonly string[]): VerlKeyClass | null {
  let node: z.ZodType = root;
  for (let i = 0; ; i++) {
    const info = NODES.get(node);
    if (info === undefined) return null;
    if (info.kind === "ignored") return info; // the whole subtree
    if (info.kind !== "section") return i === path.length ? info : null;
    if (i === path.length) return null; // a section is not a key
    const next = Object.hasOwn(info.keys, path[i]!) ? info.keys[path[i]!] : undefined;
    if (next === undefined) return null;
    node = next;
  }
}

/** Every key of the schema in order (an ignored section as one key; Hydra's `_target_` left out): the docs' table. */
export function listVerlKeys(): { path: string; class: VerlKeyClass }[] {
  const out: { path: string; class: VerlKeyClass }[] = [];
  const walk = (node: z.ZodType, path: string[]): void => {
    const info = NODES.get(node)!;
    if (info.kind !== "section") out.push({ path: path.join("."), class: info });
    else for (const [k, child] of Object.entries(info.keys)) if (k !== "_target_") walk(child, [...path, k]);
  };
  walk(root, []);
  return out;
}

// ---- reading a config ------------------------------------------------------------------------------------

/** The first unresolved Hydra value (`${...}` interpolation, `???` mandatory) under a key that is not ignored. */
function unresolved(value: unknown, path: string[]): { path: string[]; value: string } | null {
  if (typeof value === "string")
    return (value.includes("${") || value === "???") && classifyVerlKey(path)?.kind !== "ignored" ? { path, value } : null;
  if (typeof value !== "object" || value === null) return null;
  if (classifyVerlKey(path)?.kind === "ignored") return null;
  for (const [k, v] of Object.entries(value)) {
    const hit = unresolved(v, Array.isArray(value) ? path : [...path, k]);
    if (hit) return hit;
  }
  return null;
}

const dotted = (path: readonly PropertyKey[]): string => path.map(String).join(".");

/** A verl config checked against verl's keys; a bad one is a ValidationError naming the key path. */
export function parseVerlConfig(input: unknown): VerlConfig {
  const hole = unresolved(input, []);
  if (hole)
    throw new ValidationError(
      `${dotted(hole.path)}: ${JSON.stringify(hole.value)} is unresolved: give the resolved config (OmegaConf.to_container(cfg, resolve=True))`,
      hole.path,
    );
  const parsed = VerlConfigSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  if (issue.code === "unrecognized_keys") {
    const path = [...issue.path.map(String), issue.keys[0]!];
    throw new ValidationError(`${dotted(path)}: not a key of verl's config (verl 0.5-0.6; docs/training.md#config)`, path);
  }
  const path = issue.path.map(String);
  throw new ValidationError(`${dotted(path) || "config"}: ${issue.message}`, path);
}

// ---- the mapping -----------------------------------------------------------------------------------------

/** verl's learning-rate schedule: linear warmup, then constant or cosine (verl's torch_functional). */
export interface LrScheduleOptions {
  /** Steps of linear warmup from 0 [0]. */
  warmupSteps: number;
  /** ["constant"] */
  type: LrSchedulerType;
  /** cosine: the floor, as a share of the peak [0]. */
  minLrRatio: number;
  /** cosine: waves over the steps after warmup [0.5: half a wave, peak to floor]. */
  numCycles: number;
}

/** The lr factor of step `step` (1-based) of `steps`: verl's scheduler at its count `step - 1`. */
export function verlLrFactor(step: number, steps: number, s: LrScheduleOptions): number {
  const t = step - 1;
  if (t < s.warmupSteps) return t / Math.max(1, s.warmupSteps);
  if (s.type === "constant") return 1;
  const progress = (t - s.warmupSteps) / Math.max(1, steps - s.warmupSteps);
  const wave = Math.cos(Math.PI * s.numCycles * 2 * progress);
  return Math.max(s.minLrRatio, (wave * (1 - s.minLrRatio)) / 2 + (1 + s.minLrRatio) / 2);
}

/** Warmup steps as verl computes them: lr_warmup_steps when >= 0, else the ratio of the run's steps. */
export function warmupSteps(o: { warmupSteps: number | null; warmupRatio: number }, steps: number): number {
  return o.warmupSteps !== null && o.warmupSteps >= 0 ? o.warmupSteps : Math.floor(o.warmupRatio * steps);
}

/** verl's step count: total_training_steps, else total_epochs passes of floor(tasks / train_batch_size) steps. */
export function stepsOfEpochs(totalEpochs: number, tasks: number, batchSize: number): number {
  const perEpoch = Math.floor(tasks / batchSize);
  if (perEpoch === 0)
    throw new ValidationError(
      `trainer.total_epochs: ${tasks} training tasks make no full batch of ${batchSize} (data.train_batch_size); set trainer.total_training_steps`,
      ["trainer", "total_epochs"],
    );
  return totalEpochs * perEpoch;
}

/** The options of the PPO algorithm a verl config sets: PpoOptions less its runtime parts. */
export type VerlPpoOptions = Required<
  Pick<
    PpoOptions,
    | "batchSize"
    | "nSamples"
    | "maxPromptLength"
    | "maxResponseLength"
    | "traceAggregator"
    | "temperature"
    | "lr"
    | "ppoEpochs"
    | "miniBatchSize"
    | "normByStd"
    | "valEvery"
    | "checkpointEvery"
    | "advEstimator"
    | "gamma"
    | "lam"
    | "useKlInReward"
    | "klPenalty"
    | "klCtrl"
    | "criticWarmup"
    | "rolloutDataDir"
  >
> &
  Pick<PpoOptions, "microBatchSize" | "seed"> & { loss: Required<PolicyLossOptions> };

export interface VerlSettings {
  ppo: VerlPpoOptions;
  /** The actor's optimizer and its schedule (`lrSchedule` of the options: `verlLrFactor`). */
  optimizer: Required<Pick<OptimizerOptions, "lr" | "weightDecay" | "beta1" | "beta2" | "maxGradNorm">>;
  lrSchedule: { warmupSteps: number | null; warmupRatio: number; type: LrSchedulerType; minLrRatio: number; numCycles: number };
  /** The actor's model: its folder (null: not in the config), LoRA rank (0: full fine-tuning), alpha and targets. */
  model: { path: string | null; loraRank: number; loraAlpha: number; targetModules: LoraTarget[]; gradientCheckpointing: boolean };
  /** The critic (its trainer aside), when verl would run one: critic.enable, or null and the gae estimator. */
  critic:
    | (Required<Omit<CriticOptions, "trainer">> & {
        /** Its folder; null: the actor's. */
        modelPath: string | null;
        optimizer: Required<Pick<OptimizerOptions, "weightDecay" | "beta1" | "beta2" | "maxGradNorm">>;
      })
    | null;
  /** Run length: total_training_steps when set, else total_epochs (resolve with `stepsOfEpochs`). */
  totalTrainingSteps: number | null;
  totalEpochs: number;
}

/**
 * The options a checked verl config stands for. Batch sizes become rows: data.train_batch_size prompts per
 * step, rollout.n rollouts each; ppo_mini_batch_size counts prompts, so an update takes
 * ppo_mini_batch_size x n rows; ppo_micro_batch_size_per_gpu counts rows (one device here).
 */
export function verlSettings(c: VerlConfig): VerlSettings {
  const { actor, rollout } = c.actor_rollout_ref;
  const n = rollout.n;
  const agg = c.agentlightning.trace_aggregator;
  const trajectory = agg.level === "trajectory";
  const micro = actor.ppo_micro_batch_size_per_gpu ?? actor.ppo_micro_batch_size;
  const pl = actor.policy_loss;
  const useCritic = c.critic.enable ?? c.algorithm.adv_estimator === "gae";
  const criticMicro = c.critic.ppo_micro_batch_size_per_gpu ?? c.critic.ppo_micro_batch_size ?? micro;
  const optim = actor.optim;
  const kl = c.algorithm.kl_ctrl;
  return {
    ppo: {
      batchSize: c.data.train_batch_size,
      nSamples: n,
      // Agent Lightning's trajectory level keeps its own, longer limits
      maxPromptLength: trajectory ? agg.trajectory_max_prompt_length : c.data.max_prompt_length,
      maxResponseLength: trajectory ? agg.trajectory_max_response_length : c.data.max_response_length,
      traceAggregator: { level: agg.level },
      temperature: rollout.temperature,
      lr: optim.lr,
      ppoEpochs: actor.ppo_epochs,
      miniBatchSize: actor.ppo_mini_batch_size * n,
      ...(micro !== null ? { microBatchSize: micro } : {}),
      normByStd: c.algorithm.norm_adv_by_std_in_grpo,
      valEvery: Math.max(c.trainer.test_freq, 0),
      checkpointEvery: c.trainer.save_freq > 0 ? c.trainer.save_freq : Number.POSITIVE_INFINITY,
      ...(c.data.seed !== null ? { seed: c.data.seed } : {}),
      advEstimator: c.algorithm.adv_estimator,
      gamma: c.algorithm.gamma,
      lam: c.algorithm.lam,
      useKlInReward: c.algorithm.use_kl_in_reward,
      klPenalty: c.algorithm.kl_penalty,
      klCtrl: { type: kl.type, klCoef: kl.kl_coef, targetKl: kl.target_kl, horizon: kl.horizon },
      criticWarmup: c.trainer.critic_warmup,
      rolloutDataDir: c.trainer.rollout_data_dir,
      loss: {
        lossMode: pl.loss_mode,
        clipCovRatio: pl.clip_cov_ratio,
        clipCovLb: pl.clip_cov_lb,
        clipCovUb: pl.clip_cov_ub,
        klCovRatio: pl.kl_cov_ratio,
        ppoKlCoef: pl.ppo_kl_coef,
        clipRatio: actor.clip_ratio,
        // verl: a one-sided ratio left null falls back to clip_ratio
        clipRatioLow: actor.clip_ratio_low ?? actor.clip_ratio,
        clipRatioHigh: actor.clip_ratio_high ?? actor.clip_ratio,
        clipRatioC: actor.clip_ratio_c,
        lossAggMode: actor.loss_agg_mode,
        entropyCoeff: actor.entropy_coeff,
        klLossCoef: actor.use_kl_loss ? actor.kl_loss_coef : 0,
        klLossType: actor.kl_loss_type,
      },
    },
    optimizer: {
      lr: optim.lr,
      weightDecay: optim.weight_decay,
      beta1: optim.betas[0],
      beta2: optim.betas[1],
      maxGradNorm: actor.grad_clip,
    },
    lrSchedule: {
      warmupSteps: optim.lr_warmup_steps,
      warmupRatio: optim.lr_warmup_steps_ratio,
      type: optim.warmup_style ?? optim.lr_scheduler_type,
      minLrRatio: optim.min_lr_ratio ?? 0,
      numCycles: optim.num_cycles,
    },
    model: {
      path: c.actor_rollout_ref.model.path,
      loraRank: c.actor_rollout_ref.model.lora_rank,
      loraAlpha: c.actor_rollout_ref.model.lora_alpha,
      targetModules:
        c.actor_rollout_ref.model.target_modules === "all-linear" ? [...LORA_TARGETS] : c.actor_rollout_ref.model.target_modules,
      gradientCheckpointing: c.actor_rollout_ref.model.enable_gradient_checkpointing,
    },
    critic: useCritic
      ? {
          modelPath: c.critic.model.path,
          cliprangeValue: c.critic.cliprange_value,
          lr: c.critic.optim.lr,
          ppoEpochs: c.critic.ppo_epochs ?? actor.ppo_epochs,
          miniBatchSize: (c.critic.ppo_mini_batch_size ?? actor.ppo_mini_batch_size) * n,
          microBatchSize: criticMicro ?? (c.critic.ppo_mini_batch_size ?? actor.ppo_mini_batch_size) * n,
          lossAggMode: c.critic.loss_agg_mode ?? actor.loss_agg_mode,
          optimizer: {
            weightDecay: c.critic.optim.weight_decay,
            beta1: c.critic.optim.betas[0],
            beta2: c.critic.optim.betas[1],
            maxGradNorm: c.critic.grad_clip,
          },
        }
      : null,
    totalTrainingSteps: c.trainer.total_training_steps,
    totalEpochs: c.trainer.total_epochs,
  };
}

/**
 * The settings of `agl train`: one zod schema (docs/lora.md#agl-train), filled from a JSON config file
 * (`--config FILE`: keys as below, and/or verl's nested config, docs/training.md#config) and then from flags
 * (`--lora-r 16` sets `loraR`). Precedence: flags, then the file's own keys, then its verl keys, then defaults.
 */
import { z } from "zod";
import { AGGREGATION_LEVELS, GROUPINGS, type AggregationLevel, type Grouping } from "../adapter/batch.ts";
import {
  ADV_ESTIMATORS,
  KL_TYPES,
  LOSS_AGG_MODES,
  LR_SCHEDULERS,
  parseVerlConfig,
  POLICY_LOSS_MODES,
  VERL_SECTIONS,
  verlSettings,
} from "../algorithm/verl-config.ts";
import { LORA_TARGETS } from "../model/lora.ts";
import { UsageError } from "../server/config.ts";
import { ValidationError } from "../types/errors.ts";
import { type CommandSpec, formatHelp, parseFlags } from "./flags.ts";

const positive = z.number().int().min(1);

export const TrainConfigSchema = z
  .object({
    /** Hugging Face model folder (Llama, Qwen2, Qwen3). */
    model: z.string().min(1),
    /** Module exporting the agent: a LitAgent, or a rollout function `(task, llm) => reward` (default or `agent` export). */
    agent: z.string().min(1),
    /** Training tasks, one JSON value per line. */
    data: z.string().min(1),
    /** Validation tasks (JSONL) [none]. */
    valData: z.string().min(1).nullable().default(null),
    /** Output folder: adapters, checkpoints, metrics, reward curve, the embedded store. */
    out: z.string().min(1).default("runs/train"),
    /** Store URL for `openStore` ("memory", file:..., libsql://..., a libSQL server's http(s)://...) [file:OUT/store.db]. */
    store: z.string().min(1).nullable().default(null),
    /** URL of an `agl store` server instead (the HTTP client) [none]. */
    storeServer: z.string().url().nullable().default(null),
    device: z.enum(["cpu", "webgpu", "auto"]).default("auto"),
    /** Train every weight of the model instead of a LoRA adapter (the LoRA settings are then unused). */
    fullFinetune: z.boolean().default(false),
    loraR: positive.default(16),
    loraAlpha: z.number().positive().default(32),
    loraTargets: z
      .array(z.enum(LORA_TARGETS))
      .min(1)
      .default(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    steps: positive.default(20),
    /** Tasks per step. */
    batch: positive.default(8),
    /** Rollouts per task (GRPO group size). */
    group: positive.default(8),
    lr: z.number().positive().default(1e-4),
    /** Share of the steps, at the end, over which the learning rate decays linearly to `lrFinal` x lr [0: constant]. */
    lrDecayShare: z.number().min(0).max(1).default(0),
    lrFinal: z.number().min(0).max(1).default(0.1),
    weightDecay: z.number().min(0).default(0),
    /** PPO epochs per step. */
    epochs: positive.default(1),
    /** Rows per optimizer update [all of the step's rows]. */
    miniBatch: positive.nullable().default(null),
    /** Rows per forward/backward (gradient accumulation) [all of an update's rows]. */
    microBatch: positive.nullable().default(null),
    klCoef: z.number().min(0).default(0),
    klType: z.enum(KL_TYPES).default("low_var_kl"),
    clipRatio: z.number().positive().default(0.2),
    // ---- the PPO family (verl's names in camelCase; docs/training.md#config) ----
    /** Passes over the training tasks: steps = totalEpochs x floor(tasks / batch); wins over `steps` [none]. */
    totalEpochs: positive.nullable().default(null),
    /** Linear warmup from 0 over this many steps (null: `lrWarmupRatio` of the steps), then `lrScheduler`. */
    lrWarmupSteps: z.number().int().min(0).nullable().default(null),
    lrWarmupRatio: z.number().min(0).max(1).default(0),
    lrScheduler: z.enum(LR_SCHEDULERS).default("constant"),
    /** Cosine: the floor as a share of lr, and the waves after the warmup. */
    lrMinRatio: z.number().min(0).max(1).default(0),
    lrNumCycles: z.number().default(0.5),
    betas: z.tuple([z.number().min(0).lt(1), z.number().min(0).lt(1)]).default([0.9, 0.999]),
    /** Clip the gradient's global L2 norm to this (0: no clipping). */
    gradClip: z.number().min(0).default(1),
    advEstimator: z.enum(ADV_ESTIMATORS).default("grpo"),
    gamma: z.number().min(0).max(1).default(1),
    lam: z.number().min(0).max(1).default(1),
    /** GRPO divides by the group's std (false: Dr. GRPO). */
    normAdvByStd: z.boolean().default(true),
    useKlInReward: z.boolean().default(false),
    klPenalty: z.enum(KL_TYPES).default("kl"),
    klCtrl: z
      .object({
        type: z.enum(["fixed", "adaptive"]).default("fixed"),
        klCoef: z.number().min(0).default(0.001),
        targetKl: z.number().positive().default(0.1),
        horizon: z.number().positive().default(10000),
      })
      .strict()
      .prefault({}),
    lossMode: z.enum(POLICY_LOSS_MODES).default("vanilla"),
    clipCovRatio: z.number().min(0).max(1).default(0.0002),
    clipCovLb: z.number().default(1),
    clipCovUb: z.number().default(5),
    klCovRatio: z.number().min(0).max(1).default(0.0002),
    ppoKlCoef: z.number().min(0).default(0.1),
    /** One-sided clip ratios [clipRatio]. */
    clipRatioLow: z.number().positive().nullable().default(null),
    clipRatioHigh: z.number().positive().nullable().default(null),
    clipRatioC: z.number().gt(1).default(3),
    lossAggMode: z.enum(LOSS_AGG_MODES).default("token-mean"),
    entropyCoeff: z.number().default(0),
    /** The critic (GAE's value model): `enable` null runs one exactly when advEstimator is gae. */
    critic: z
      .object({
        enable: z.boolean().nullable().default(null),
        /** Its Hugging Face folder [the policy's model]. */
        model: z.string().min(1).nullable().default(null),
        lr: z.number().positive().default(1e-5),
        cliprangeValue: z.number().positive().default(0.5),
        /** [the actor's epochs, mini-batch and micro-batch (rows), loss aggregation] */
        epochs: positive.nullable().default(null),
        miniBatch: positive.nullable().default(null),
        microBatch: positive.nullable().default(null),
        lossAggMode: z.enum(LOSS_AGG_MODES).nullable().default(null),
        weightDecay: z.number().min(0).default(0.01),
        betas: z.tuple([z.number().min(0).lt(1), z.number().min(0).lt(1)]).default([0.9, 0.999]),
        gradClip: z.number().min(0).default(1),
      })
      .strict()
      .prefault({}),
    /** Steps that train only the critic before the actor starts. */
    criticWarmup: z.number().int().min(0).default(0),
    /** Each step's prompts, responses, rewards and advantages as `<step>.jsonl` here [none]. */
    rolloutDataDir: z.string().min(1).nullable().default(null),
    /** What becomes a training row (Agent Lightning's `trace_aggregator.level`; the file may also spell it
     * `trace_aggregator`): each LLM call, or each rollout's chain of calls with the tokens between the
     * model's replies masked out of the loss. */
    traceAggregator: z
      .object({ level: z.enum(AGGREGATION_LEVELS as [AggregationLevel, ...AggregationLevel[]]).default("transition") })
      .strict()
      .default({ level: "transition" }),
    /** Rows that share a GRPO baseline: same sample and turn index, or same sample. */
    grouping: z.enum(GROUPINGS as [Grouping, ...Grouping[]]).default("sample_turn"),
    /** Train only the calls of agents whose name matches (Agent Lightning's `agent_match`, a regex searched
     * in the name each call sends as `x-agent-name`); with LoRA the other agents' calls run on the frozen base [all]. */
    agentMatch: z.string().min(1).nullable().default(null),
    /** Tokens kept per row [null: from the model's context, fitRowLimits]. */
    maxPrompt: positive.nullable().default(null),
    maxResponse: positive.nullable().default(null),
    temperature: z.number().min(0).default(1),
    valEvery: z.number().int().min(0).default(5),
    /** Steps between checkpoints (0: the last step's only). */
    checkpointEvery: z.number().int().min(0).default(5),
    runners: positive.default(4),
    seed: z.number().int().min(0).default(0),
    /** How the frozen base's matrices sit on the GPU (LoRA on WebGPU). */
    gpuWeights: z.enum(["f32", "bf16", "f16"]).default("f32"),
    /** Recompute activations in the backward (WebGPU): less memory, one more forward. */
    recompute: z.boolean().default(false),
    progress: z.boolean().default(true),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.agentMatch !== null)
      try {
        new RegExp(c.agentMatch);
      } catch (e) {
        ctx.addIssue({ code: "custom", path: ["agentMatch"], message: `not a regular expression: ${(e as Error).message}` });
      }
    if (c.fullFinetune && c.klCoef > 0)
      ctx.addIssue({
        code: "custom",
        path: ["klCoef"],
        message: "a KL to the base needs a LoRA adapter (the base is the reference); full fine-tuning keeps no second copy",
      });
    if (c.fullFinetune && c.useKlInReward)
      ctx.addIssue({
        code: "custom",
        path: ["useKlInReward"],
        message: "a KL penalty in the reward needs a LoRA adapter (the base is the reference); full fine-tuning keeps no second copy",
      });
  });

export type TrainConfig = z.infer<typeof TrainConfigSchema>;

/** A config whose row limits are fitted to the model's context (fitRowLimits). */
export type FittedTrainConfig = TrainConfig & { maxPrompt: number; maxResponse: number };

/** The row limits when neither is given and the model's context holds both (else its context, split 2:1). */
export const DEFAULT_ROW_LIMITS = { maxPrompt: 512, maxResponse: 256 } as const;

/**
 * The row limits for a model of `context` tokens, known before anything runs: those not given come from
 * the context (the defaults, or as much of it as is left); limits that do not fit it are a UsageError
 * naming both flags, rather than a failure at the first training step.
 */
export function fitRowLimits(c: TrainConfig, context: number): FittedTrainConfig {
  const { maxPrompt: P, maxResponse: R } = DEFAULT_ROW_LIMITS;
  let maxPrompt: number, maxResponse: number;
  if (c.maxPrompt !== null || c.maxResponse !== null) {
    maxPrompt = c.maxPrompt ?? Math.min(P, context - (c.maxResponse ?? 0));
    maxResponse = c.maxResponse ?? Math.min(R, context - maxPrompt);
  } else if (P + R <= context) [maxPrompt, maxResponse] = [P, R];
  else {
    maxResponse = Math.floor((context * R) / (P + R));
    maxPrompt = context - maxResponse;
  }
  if (maxPrompt >= 1 && maxResponse >= 1 && maxPrompt + maxResponse <= context) return { ...c, maxPrompt, maxResponse };
  const window = `${c.model}'s context of ${context} tokens`;
  const problem =
    c.maxPrompt !== null && c.maxResponse !== null
      ? `--max-prompt ${c.maxPrompt} + --max-response ${c.maxResponse} = ${c.maxPrompt + c.maxResponse} tokens exceed ${window}`
      : c.maxPrompt !== null
        ? `--max-prompt ${c.maxPrompt} leaves no room for a response in ${window}`
        : c.maxResponse !== null
          ? `--max-response ${c.maxResponse} leaves no room for a prompt in ${window}`
          : `${window} has no room for a prompt and a response`;
  throw new UsageError(`${problem}: give --max-prompt and --max-response that add up to at most ${context}`);
}

/** Whether the run trains a critic: verl's rule (critic.enable, else the gae estimator). */
export const usesCritic = (c: TrainConfig): boolean => c.critic.enable ?? c.advEstimator === "gae";

type Flag = CommandSpec["sections"][number]["flags"][number];
const str = (name: string, value: string, help: string): Flag => ({ name, type: "string", value, help });
const int = (name: string, help: string, value = "N"): Flag => ({ name, type: "number", integer: true, value, help });
const num = (name: string, value: string, help: string): Flag => ({ name, type: "number", value, help });

/**
 * The flags: each sets the setting of its name in camel case (`--lora-r` sets `loraR`), but for
 * `--config` and `--no-progress`. The ranges are the schema's, checked once flags and file are merged.
 */
export const TRAIN_COMMAND: CommandSpec = {
  usage: "agl train --model DIR --agent FILE --data FILE.jsonl [options]",
  about: `Trains a LoRA adapter (or, with --full-finetune, every weight) of a Hugging Face model (Llama, Qwen2,
Qwen3) with GRPO: runners run the agent on the tasks against the policy server, the weights learn from the
rewards, and every step's weights are served to the runners without reloading the model. The output
folder is resumable: run the same command again after Ctrl-C or a crash and it continues from the last
checkpoint.`,
  sections: [
    {
      title: "Required:",
      flags: [
        str("model", "DIR", "the model folder (config.json, safetensors, tokenizer.json)"),
        str(
          "agent",
          "FILE",
          "module exporting the agent (default or `agent` export): a LitAgent, or a\nfunction (task, llm) => reward that calls llm.endpoint with the openai client",
        ),
        str("data", "FILE", "training tasks, one JSON value per line"),
      ],
    },
    {
      title: "Options (defaults in brackets; every option can also come from --config FILE.json, keys in camelCase):",
      flags: [
        str("config", "FILE", "JSON file of settings in camelCase, and/or a verl config (flags override it)"),
        str("val-data", "FILE", "validation tasks (JSONL), evaluated greedily every --val-every steps"),
        str("out", "DIR", "output folder [runs/train]"),
        str("store", "URL", "store: memory | file:PATH | libsql://... | http(s):// libSQL server [file:OUT/store.db]"),
        str("store-server", "URL", "an `agl store` server instead of a store URL"),
        str("device", "D", "cpu | webgpu | auto [auto: WebGPU on a hardware adapter, else the CPU]"),
        { name: "full-finetune", type: "boolean", help: "train every weight of the model instead of a LoRA adapter" },
        int("lora-r", "LoRA rank [16]"),
        num("lora-alpha", "X", "LoRA alpha [32]"),
        str("lora-targets", "LIST", "comma-separated: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj [all]"),
        int("steps", "GRPO steps [20]"),
        int("batch", "tasks per step [8]"),
        int("group", "rollouts per task [8]"),
        num("lr", "X", "learning rate [1e-4]"),
        num("lr-decay-share", "S", "over the last S (0..1) of the steps the lr decays linearly to --lr-final x lr [0]"),
        num("lr-final", "F", "the lr factor at the last step when decaying [0.1]"),
        num("weight-decay", "X", "AdamW weight decay [0]"),
        int("epochs", "PPO epochs per step [1]"),
        int("mini-batch", "rows per optimizer update [all]"),
        int("micro-batch", "rows per forward/backward, gradients accumulate [all]"),
        num("kl-coef", "X", "KL-to-base loss coefficient [0]"),
        str("kl-type", "K", "k1 | k2 | k3 (kl, mse, low_var_kl, abs) [low_var_kl]"),
        num("clip-ratio", "X", "PPO clip ratio [0.2]"),
        int("total-epochs", "passes over the tasks: steps = N x floor(tasks / batch), instead of --steps"),
        int("lr-warmup-steps", "the lr rises linearly from 0 over the first N steps [0]"),
        { ...str("lr-scheduler", "S", "constant | cosine: the lr after the warmup [constant]"), choices: LR_SCHEDULERS },
        num("lr-min-ratio", "R", "cosine: the lr's floor as a share of --lr [0]"),
        num("grad-clip", "X", "clip the gradient's global L2 norm to X (0: no clipping) [1]"),
        {
          ...str(
            "trace-aggregator-level",
            "L",
            "transition | trajectory: a training row per LLM call, or per rollout with\nthe tool results and chat scaffolding masked out of the loss [transition]",
          ),
          choices: AGGREGATION_LEVELS,
        },
        { ...str("grouping", "G", "sample_turn | sample: rows sharing a GRPO baseline [sample_turn]"), choices: GROUPINGS },
        str(
          "agent-match",
          "RE",
          "train only the calls of agents whose name (x-agent-name) matches the regex; with\nLoRA the other agents run on the frozen base [every call]",
        ),
        int("max-prompt", "prompt tokens kept per row [512; 2/3 of a model context under 768]"),
        int("max-response", "response tokens kept per row [256; 1/3 of a model context under 768]"),
        num("temperature", "X", "sampling temperature of training rollouts; the loss divides the logits by it [1]"),
        int("val-every", "validate every N steps (0: before and after only) [5]"),
        int("checkpoint-every", "steps between checkpoints (0: the last step's only) [5]"),
        int("runners", "concurrent agent runners [4]"),
        int("seed", "seed of the task order and the adapter's init [0]"),
        str("gpu-weights", "F", "f32 | bf16 | f16: the frozen base on the GPU [f32]"),
        { name: "recompute", type: "boolean", help: "recompute activations in the backward (less GPU memory)" },
        { name: "no-progress", type: "boolean", help: "no progress lines" },
      ],
    },
    {
      title: "The PPO family (verl's keys in a --config file too: docs/training.md#config):",
      flags: [
        {
          ...str(
            "adv-estimator",
            "E",
            "advantage estimator [grpo]: gae (trains a critic) | grpo | grpo_passk | rloo | opo | gpg |\nreinforce_plus_plus | reinforce_plus_plus_baseline | remax",
          ),
          choices: ADV_ESTIMATORS,
        },
        num("gamma", "X", "discount of gae and reinforce_plus_plus [1]"),
        num("lam", "X", "gae's lambda [1]"),
        { name: "no-norm-adv-by-std", type: "boolean", help: "grpo without the division by the group's std (Dr. GRPO)" },
        { name: "kl-in-reward", type: "boolean", help: "subtract beta x KL to the reference from the token rewards" },
        {
          ...str("kl-penalty", "K", "the KL estimator of --kl-in-reward: k1 | k2 | k3 | abs (kl, mse, low_var_kl) [kl]"),
          choices: KL_TYPES,
        },
        { ...str("kl-ctrl", "C", "fixed | adaptive: how beta moves [fixed]"), choices: ["fixed", "adaptive"] },
        num("kl-ctrl-coef", "X", "beta, or its start when adaptive [0.001]"),
        num("kl-target", "X", "adaptive: the KL that beta steers towards [0.1]"),
        num("kl-horizon", "N", "adaptive: rows over which beta moves by at most 20 % per unit of error [10000]"),
        { ...str("loss-mode", "M", `policy loss: ${POLICY_LOSS_MODES.join(" | ")} [vanilla]`), choices: POLICY_LOSS_MODES },
        {
          ...str("loss-agg-mode", "M", "token-mean | seq-mean-token-sum | seq-mean-token-mean |\nseq-mean-token-sum-norm [token-mean]"),
          choices: LOSS_AGG_MODES,
        },
        num("clip-ratio-low", "X", "PPO clip below 1 [--clip-ratio]"),
        num("clip-ratio-high", "X", "PPO clip above 1 (DAPO's clip-higher) [--clip-ratio]"),
        num("clip-ratio-c", "X", "dual clip of negative advantages, > 1 [3]"),
        num("entropy-coeff", "X", "entropy bonus coefficient [0]"),
        str("critic-model", "DIR", "the critic's model folder [--model]"),
        num("critic-lr", "X", "the critic's learning rate [1e-5]"),
        num("cliprange-value", "X", "how far a value may move from its old one per update [0.5]"),
        int("critic-warmup", "steps that train only the critic before the actor starts [0]"),
        str("rollout-data-dir", "DIR", "each step's prompts, responses, rewards and advantages as JSONL"),
      ],
    },
  ],
  footer: `Output: OUT/adapter (the latest adapter, PEFT layout: agl serve --model DIR --adapter OUT/adapter),
OUT/checkpoints/step-N (adapter + optimizer), OUT/metrics.jsonl, OUT/reward-curve.svg, OUT/store.db.
With --full-finetune: OUT/model (the latest model: agl serve --model OUT/model) instead of OUT/adapter,
and the whole model + optimizer in OUT/checkpoints/step-N.`,
};

export const TRAIN_USAGE = formatHelp(TRAIN_COMMAND);

const camel = (name: string): string => name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
const FLAG_NAMES = new Set(TRAIN_COMMAND.sections.flatMap((s) => s.flags.map((f) => f.name)));

/** Flags that set one field of an object setting: `--kl-ctrl adaptive` sets klCtrl.type. */
const NESTED_FLAGS: Readonly<Record<string, readonly [string, string]>> = {
  "trace-aggregator-level": ["traceAggregator", "level"],
  "kl-ctrl": ["klCtrl", "type"],
  "kl-ctrl-coef": ["klCtrl", "klCoef"],
  "kl-target": ["klCtrl", "targetKl"],
  "kl-horizon": ["klCtrl", "horizon"],
  "critic-model": ["critic", "model"],
  "critic-lr": ["critic", "lr"],
  "cliprange-value": ["critic", "cliprangeValue"],
};
/** Flags whose setting has another name (boolean `no-` flags set theirs to false). */
const RENAMED_FLAGS: Readonly<Record<string, string>> = {
  "no-progress": "progress",
  "no-norm-adv-by-std": "normAdvByStd",
  "kl-in-reward": "useKlInReward",
};
/** Object settings: a later source sets their fields, not the whole object. */
const OBJECT_SETTINGS = new Set(Object.values(NESTED_FLAGS).map(([key]) => key));

type Settings = Record<string, unknown>;

/** The flag of a setting's path (`["klCtrl", "klCoef"]` → kl-ctrl-coef) and how much of the path it covers. */
function flagOf(path: readonly string[]): { flag: string; covers: number } | null {
  const nested = Object.entries(NESTED_FLAGS).find(([, [key, field]]) => key === path[0] && field === path[1]);
  if (nested) return { flag: nested[0], covers: 2 };
  const renamed = Object.entries(RENAMED_FLAGS).find(([, key]) => key === path[0]);
  if (renamed) return { flag: renamed[0], covers: 1 };
  return path[0] !== undefined && FLAG_NAMES.has(kebab(path[0])) ? { flag: kebab(path[0]), covers: 1 } : null;
}

/** A bad setting as a UsageError named by its flag when it has one (else by its key). */
function settingError(path: readonly PropertyKey[], message: string): UsageError {
  const keys = path.map(String);
  const f = flagOf(keys);
  const where = f ? `--${f.flag}` : keys[0] || "config";
  const rest = keys.slice(f ? f.covers : 1);
  return new UsageError(`${where}${rest.length > 0 ? `[${rest.join(".")}]` : ""}: ${message}`);
}

/**
 * Sources in rising precedence, merged: a later one's settings win, an object setting field by field.
 * `steps` and `totalEpochs` are one setting (run length), as are `loraR` and `fullFinetune` (verl's lora_rank
 * 0 is full fine-tuning): a source that gives the first drops an earlier source's second.
 */
function mergeSources(sources: readonly Settings[]): Settings {
  const merged: Settings = {};
  for (const source of sources) {
    if ("steps" in source && !("totalEpochs" in source)) merged.totalEpochs = null;
    if ("loraR" in source && !("fullFinetune" in source)) merged.fullFinetune = false;
    for (const [k, v] of Object.entries(source))
      merged[k] = OBJECT_SETTINGS.has(k) && isObject(v) && isObject(merged[k]) ? { ...merged[k], ...v } : v;
  }
  return merged;
}

/** Flags (and `--config FILE` through `readText`) → a checked TrainConfig; `help` when asked. */
export function parseTrainArgs(
  argv: readonly string[],
  readText: (path: string) => string,
): { help: true } | { help: false; config: TrainConfig } {
  const { help, values } = parseFlags(TRAIN_COMMAND, argv);
  if (help) return { help: true };
  const flags: Settings = {};
  let file: Settings[] = [];
  for (const [name, value] of Object.entries(values)) {
    const nested = NESTED_FLAGS[name];
    if (name === "config") file = readConfigFile(String(value), readText);
    else if (nested) flags[nested[0]] = { ...(flags[nested[0]] as Settings | undefined), [nested[1]]: value };
    else if (name in RENAMED_FLAGS) flags[RENAMED_FLAGS[name]!] = !name.startsWith("no-");
    else if (name === "lora-targets")
      flags.loraTargets = String(value)
        .split(",")
        .map((s) => s.trim());
    else flags[camel(name)] = value;
  }
  if ("steps" in flags && "totalEpochs" in flags) throw new UsageError("--steps and --total-epochs both set the run's length: give one");
  const parsed = TrainConfigSchema.safeParse(mergeSources([...file, flags]));
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw settingError(issue.path, issue.message);
  }
  return { help: false, config: parsed.data };
}

/**
 * The file's sources, in rising precedence: its verl sections mapped to settings (none when it has none),
 * then its own keys. A top-level `data` that is an object is verl's section; a string is the tasks file.
 */
function readConfigFile(path: string, readText: (path: string) => string): Settings[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readText(path));
  } catch (e) {
    throw new UsageError(`--config ${path}: ${(e as Error).message}`);
  }
  if (!isObject(parsed)) throw new UsageError(`--config ${path}: must hold a JSON object`);
  const verl: Settings = {};
  const own: Settings = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (VERL_SECTIONS.includes(k) && !(k === "data" && typeof v === "string")) verl[k] = v;
    else own[k] = v;
  }
  let fromVerl: Settings = {};
  if (Object.keys(verl).length > 0)
    try {
      fromVerl = settingsOfVerl(verlSettings(parseVerlConfig(verl)));
    } catch (e) {
      if (e instanceof ValidationError) throw new UsageError(`--config ${path}: ${e.message}`);
      throw e;
    }
  // Agent Lightning's spelling of the row setting, `trace_aggregator: { level }`, read as `traceAggregator`
  if ("trace_aggregator" in own) {
    if ("traceAggregator" in own) throw new UsageError(`--config ${path}: give traceAggregator or trace_aggregator, not both`);
    const { trace_aggregator, ...rest } = own;
    return [fromVerl, { ...rest, traceAggregator: trace_aggregator }];
  }
  return [fromVerl, own];
}

/** The settings a verl config stands for (algorithm/verl-config.ts maps its keys; this lays them out flat). */
function settingsOfVerl(s: ReturnType<typeof verlSettings>): Settings {
  const { ppo, optimizer, lrSchedule, model, critic } = s;
  const { loss } = ppo;
  const gae = ppo.advEstimator === "gae";
  return {
    ...(model.path !== null ? { model: model.path } : {}),
    fullFinetune: model.loraRank === 0,
    ...(model.loraRank > 0 ? { loraR: model.loraRank } : {}),
    loraAlpha: model.loraAlpha,
    loraTargets: model.targetModules,
    recompute: model.gradientCheckpointing,
    ...(s.totalTrainingSteps !== null ? { steps: s.totalTrainingSteps } : { totalEpochs: s.totalEpochs }),
    batch: ppo.batchSize,
    group: ppo.nSamples,
    lr: optimizer.lr,
    weightDecay: optimizer.weightDecay,
    betas: [optimizer.beta1, optimizer.beta2],
    gradClip: optimizer.maxGradNorm,
    lrWarmupSteps: lrSchedule.warmupSteps !== null && lrSchedule.warmupSteps >= 0 ? lrSchedule.warmupSteps : null,
    lrWarmupRatio: lrSchedule.warmupRatio,
    lrScheduler: lrSchedule.type,
    lrMinRatio: lrSchedule.minLrRatio,
    lrNumCycles: lrSchedule.numCycles,
    epochs: ppo.ppoEpochs,
    miniBatch: ppo.miniBatchSize,
    microBatch: ppo.microBatchSize ?? null,
    klCoef: loss.klLossCoef,
    klType: loss.klLossType,
    clipRatio: loss.clipRatio,
    clipRatioLow: loss.clipRatioLow,
    clipRatioHigh: loss.clipRatioHigh,
    clipRatioC: loss.clipRatioC,
    lossAggMode: loss.lossAggMode,
    entropyCoeff: loss.entropyCoeff,
    lossMode: loss.lossMode,
    clipCovRatio: loss.clipCovRatio,
    clipCovLb: loss.clipCovLb,
    clipCovUb: loss.clipCovUb,
    klCovRatio: loss.klCovRatio,
    ppoKlCoef: loss.ppoKlCoef,
    traceAggregator: ppo.traceAggregator,
    maxPrompt: ppo.maxPromptLength,
    maxResponse: ppo.maxResponseLength,
    temperature: ppo.temperature,
    valEvery: ppo.valEvery,
    checkpointEvery: Number.isFinite(ppo.checkpointEvery) ? ppo.checkpointEvery : 0,
    ...(ppo.seed !== undefined ? { seed: ppo.seed } : {}),
    advEstimator: ppo.advEstimator,
    gamma: ppo.gamma,
    lam: ppo.lam,
    normAdvByStd: ppo.normByStd,
    useKlInReward: ppo.useKlInReward,
    klPenalty: ppo.klPenalty,
    klCtrl: ppo.klCtrl,
    criticWarmup: ppo.criticWarmup,
    rolloutDataDir: ppo.rolloutDataDir,
    // critic.enable as verl's rule would have it: null follows the estimator
    critic:
      critic === null
        ? { enable: gae ? false : null }
        : {
            enable: gae ? null : true,
            model: critic.modelPath,
            lr: critic.lr,
            cliprangeValue: critic.cliprangeValue,
            epochs: critic.ppoEpochs,
            miniBatch: critic.miniBatchSize,
            microBatch: critic.microBatchSize,
            lossAggMode: critic.lossAggMode,
            weightDecay: critic.optimizer.weightDecay,
            betas: [critic.optimizer.beta1, critic.optimizer.beta2],
            gradClip: critic.optimizer.maxGradNorm,
          },
  };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

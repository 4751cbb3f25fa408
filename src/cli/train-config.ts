/**
 * The settings of `agl train`: one zod schema (docs/lora.md#agl-train), filled from a JSON config file
 * (`--config FILE`, keys as below) and then from flags (`--lora-r 16` sets `loraR`), flags winning.
 */
import { z } from "zod";
import { AGGREGATION_LEVELS, GROUPINGS, type AggregationLevel, type Grouping } from "../adapter/batch.ts";
import { LORA_TARGETS } from "../model/lora.ts";
import { UsageError } from "../server/config.ts";
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
    klType: z.enum(["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]).default("low_var_kl"),
    clipRatio: z.number().positive().default(0.2),
    /** What becomes a training row (Agent Lightning's `trace_aggregator.level`; the file may also spell it
     * `trace_aggregator`): each LLM call, or each rollout's chain of calls with the tokens between the
     * model's replies masked out of the loss. */
    traceAggregator: z
      .object({ level: z.enum(AGGREGATION_LEVELS as [AggregationLevel, ...AggregationLevel[]]).default("transition") })
      .strict()
      .default({ level: "transition" }),
    /** Rows that share a GRPO baseline: same sample and turn index, or same sample. */
    grouping: z.enum(GROUPINGS as [Grouping, ...Grouping[]]).default("sample_turn"),
    maxPrompt: positive.default(512),
    maxResponse: positive.default(256),
    temperature: z.number().min(0).default(1),
    valEvery: z.number().int().min(0).default(5),
    checkpointEvery: positive.default(5),
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
    if (c.fullFinetune && c.klCoef > 0)
      ctx.addIssue({
        code: "custom",
        path: ["klCoef"],
        message: "a KL to the base needs a LoRA adapter (the base is the reference); full fine-tuning keeps no second copy",
      });
  });

export type TrainConfig = z.infer<typeof TrainConfigSchema>;

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
        str("config", "FILE", "JSON file with settings (flags override it)"),
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
        {
          ...str(
            "trace-aggregator-level",
            "L",
            "transition | trajectory: a training row per LLM call, or per rollout with\nthe tool results and chat scaffolding masked out of the loss [transition]",
          ),
          choices: AGGREGATION_LEVELS,
        },
        { ...str("grouping", "G", "sample_turn | sample: rows sharing a GRPO baseline [sample_turn]"), choices: GROUPINGS },
        int("max-prompt", "prompt tokens kept per row [512]"),
        int("max-response", "response tokens kept per row [256]"),
        num("temperature", "X", "sampling temperature of training rollouts [1]"),
        int("val-every", "validate every N steps (0: before and after only) [5]"),
        int("checkpoint-every", "steps between checkpoints [5]"),
        int("runners", "concurrent agent runners [4]"),
        int("seed", "seed of the task order and the adapter's init [0]"),
        str("gpu-weights", "F", "f32 | bf16 | f16: the frozen base on the GPU [f32]"),
        { name: "recompute", type: "boolean", help: "recompute activations in the backward (less GPU memory)" },
        { name: "no-progress", type: "boolean", help: "no progress lines" },
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

/** Flags (and `--config FILE` through `readText`) → a checked TrainConfig; `help` when asked. */
export function parseTrainArgs(
  argv: readonly string[],
  readText: (path: string) => string,
): { help: true } | { help: false; config: TrainConfig } {
  const { help, values } = parseFlags(TRAIN_COMMAND, argv);
  if (help) return { help: true };
  const flags: Record<string, unknown> = {};
  let file: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(values)) {
    if (name === "config") file = readConfigFile(String(value), readText);
    else if (name === "no-progress") flags.progress = false;
    else if (name === "trace-aggregator-level") flags.traceAggregator = { level: value };
    else if (name === "lora-targets")
      flags.loraTargets = String(value)
        .split(",")
        .map((s) => s.trim());
    else flags[camel(name)] = value;
  }
  const merged = { ...file, ...flags };
  if (isObject(file.traceAggregator) && isObject(flags.traceAggregator))
    merged.traceAggregator = { ...file.traceAggregator, ...flags.traceAggregator };
  const parsed = TrainConfigSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const key = String(issue.path[0] ?? "");
    // a nested setting is named by its flag when it has one (traceAggregator.level: --trace-aggregator-level)
    const nested = kebab(issue.path.map(String).join("-"));
    if (issue.path.length > 1 && FLAG_NAMES.has(nested)) throw new UsageError(`--${nested}: ${issue.message}`);
    const where = FLAG_NAMES.has(kebab(key)) ? `--${kebab(key)}` : key || "config";
    throw new UsageError(`${where}${issue.path.length > 1 ? `[${issue.path.slice(1).join(".")}]` : ""}: ${issue.message}`);
  }
  return { help: false, config: parsed.data };
}

function readConfigFile(path: string, readText: (path: string) => string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readText(path));
  } catch (e) {
    throw new UsageError(`--config ${path}: ${(e as Error).message}`);
  }
  if (!isObject(parsed)) throw new UsageError(`--config ${path}: must hold a JSON object`);
  // Agent Lightning's spelling of the row setting, `trace_aggregator: { level }`, read as `traceAggregator`
  if ("trace_aggregator" in parsed) {
    if ("traceAggregator" in parsed) throw new UsageError(`--config ${path}: give traceAggregator or trace_aggregator, not both`);
    const { trace_aggregator, ...rest } = parsed;
    return { ...rest, traceAggregator: trace_aggregator };
  }
  return parsed;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * What `agl train` trains, and how its checkpoints and latest weights are written: a LoRA adapter on the
 * frozen base (the default), or with `fullFinetune` every weight of the model.
 *
 *   LoRA:  OUT/checkpoints/step-N/  adapter (PEFT layout, float32) + optimizer state
 *          OUT/adapter/             the latest adapter, for `agl serve --model DIR --adapter OUT/adapter`
 *   full:  OUT/checkpoints/step-N/  the whole model + optimizer state (src/model/checkpoint.ts)
 *          OUT/model/               the latest model as a Hugging Face folder (float32, the base's tokenizer
 *                                   files), for `agl serve --model OUT/model`
 */
import { loadCheckpoint, saveCheckpoint } from "../model/checkpoint.ts";
import { saveHfModel, type PretrainedModel } from "../model/hf/index.ts";
import { loadLoraCheckpoint, saveLoraCheckpoint } from "../model/hf/lora-checkpoint.ts";
import { savePeftAdapter } from "../model/hf/peft.ts";
import { parseLoraConfig, type LoraConfig } from "../model/lora.ts";
import type { ModelParams } from "../model/params.ts";
import type { OptimizerState } from "../model/train-types.ts";
import { platform } from "../platform/index.ts";
import { UsageError } from "../server/config.ts";
import type { TrainConfig } from "./train-config.ts";

/** Trained parameters (the adapter's, or the whole model's, flat) and the optimizer state to resume. */
export interface TrainedState {
  params: Float32Array;
  optimizer?: OptimizerState;
}

export interface TrainedWeights {
  /** For the run's log line. */
  readonly description: string;
  /** Where the latest weights go (OUT/adapter or OUT/model). */
  readonly dir: string;
  /** The LoRA adapter's config; null for full fine-tuning. */
  readonly lora: LoraConfig | null;
  /** The state a checkpoint folder holds. */
  load(checkpointDir: string): Promise<TrainedState>;
  /** A checkpoint (parameters + optimizer) into `checkpointDir`, and the latest weights into `dir`. */
  save(checkpointDir: string, state: TrainedState): Promise<void>;
  saveLatest(params: Float32Array): Promise<void>;
  /** The trainer's options for these weights: what it trains, from `resume` when given. */
  trainerOptions(resume: TrainedState | null): {
    params?: ModelParams;
    lora?: { config: LoraConfig; base: ModelParams; adapter?: Float32Array; seed: number };
  };
  /** The policy's weights when the trainer holds `trained`. */
  policyWeights(trained: Float32Array): { params: ModelParams; lora?: { config: LoraConfig; params: Float32Array } };
}

const join = (dir: string, name: string): string => (dir.endsWith("/") ? dir + name : `${dir}/${name}`);

export function trainedWeights(c: TrainConfig, model: PretrainedModel): TrainedWeights {
  return c.fullFinetune ? fullWeights(c, model) : loraWeights(c, model);
}

function loraWeights(c: TrainConfig, model: PretrainedModel): TrainedWeights {
  const lora = parseLoraConfig({ r: c.loraR, alpha: c.loraAlpha, targetModules: c.loraTargets });
  const dir = join(c.out, "adapter");
  const saveLatest = (params: Float32Array) =>
    savePeftAdapter(dir, model.config, { config: lora, params }, { baseModel: c.model, dtype: "F32" });
  return {
    description: `LoRA r=${lora.r} alpha=${lora.alpha} on ${lora.targetModules.join(",")}`,
    dir,
    lora,
    async load(checkpointDir) {
      const ckpt = await loadLoraCheckpoint(checkpointDir, model.config);
      return { params: ckpt.adapter.params, optimizer: ckpt.optimizer };
    },
    async save(checkpointDir, s) {
      await saveLoraCheckpoint(checkpointDir, model.config, { config: lora, params: s.params }, s.optimizer, { baseModel: c.model });
    },
    saveLatest,
    trainerOptions: (resume) => ({ lora: { config: lora, base: model.weights, adapter: resume?.params, seed: c.seed } }),
    policyWeights: (trained) => ({ params: model.weights, lora: { config: lora, params: trained } }),
  };
}

function fullWeights(c: TrainConfig, model: PretrainedModel): TrainedWeights {
  const dir = join(c.out, "model");
  return {
    description: "full fine-tuning",
    dir,
    lora: null,
    async load(checkpointDir) {
      const ckpt = await loadCheckpoint(checkpointDir);
      if (JSON.stringify(ckpt.config) !== JSON.stringify(model.config))
        throw new UsageError(`${checkpointDir} holds a model of another shape than ${c.model}: use another --out`);
      return { params: ckpt.params, optimizer: ckpt.optimizer };
    },
    async save(checkpointDir, s) {
      await saveCheckpoint(checkpointDir, { config: model.config, params: s.params, optimizer: s.optimizer });
    },
    async saveLatest(params) {
      // the base's tokenizer files go along, so the folder is a model `agl serve` loads as it is
      const io = platform.files();
      const extraFiles: Record<string, Uint8Array> = {};
      for (const name of ["tokenizer.json", "tokenizer_config.json"])
        if (await io.exists(join(c.model, name))) extraFiles[name] = await io.readFile(join(c.model, name));
      await saveHfModel(dir, {
        config: model.config,
        params,
        architecture: model.architecture,
        dtype: "F32",
        generation: model.generation,
        extraFiles,
      });
    },
    trainerOptions: (resume) => ({ params: resume?.params ?? model.weights }),
    policyWeights: (trained) => ({ params: trained }),
  };
}

/**
 * A critic's checkpoint (docs/training.md#the-critic): the folder layout of src/model/checkpoint.ts
 * (`model.safetensors` + `optimizer.safetensors`, the config in the metadata) with the critic's tensors,
 * `valueLayout(config)`: the decoder's, `value_head.weight` and `value_head.bias`. Saved and loaded back,
 * a critic continues bit for bit.
 */
import { type FsAdapter, loadCheckpoint, saveCheckpoint } from "./checkpoint.ts";
import { ValidationError } from "../types/errors.ts";
import { valueLayout } from "./value-params.ts";
import type { ValueTrainerState } from "./value-types.ts";

/** Writes a critic's parameters and optimizer state (`ValueTrainer.getState()`) into `dir`. */
export function saveValueCheckpoint(dir: string, state: ValueTrainerState, fs?: FsAdapter): Promise<void> {
  return saveCheckpoint(dir, state, fs, valueLayout);
}

/** A critic's state from `dir`, for `ValueTrainer.setState` or a new trainer's `params` and `optimizer`. */
export async function loadValueCheckpoint(dir: string, fs?: FsAdapter): Promise<ValueTrainerState> {
  const { config, params, optimizer } = await loadCheckpoint(dir, fs, { optimizer: true, layoutOf: valueLayout });
  if (optimizer === undefined) throw new ValidationError(`${dir} holds no optimizer state`, ["optimizer"]);
  return { config, params, optimizer };
}

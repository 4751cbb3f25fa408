/**
 * A policy's weights as a store resource (`PolicyWeights`, src/types/resources.ts) and back: a whole model
 * as a `lightning-ts` checkpoint file, or a LoRA adapter as PEFT's two files, in base64, so a browser tab
 * can publish what it trained and the runners' side can serve it (docs/browser.md).
 */
import { ValidationError } from "../types/errors.ts";
import type { PolicyWeights } from "../types/resources.ts";
import { decodeModel, encodeModel } from "./checkpoint.ts";
import type { ModelConfig } from "./config.ts";
import { loadPeftAdapter, peftAdapterFiles, type PeftAdapter } from "./hf/peft.ts";

const CHUNK = 0x8000;
const ADAPTER_CONFIG = "adapter_config.json";
const ADAPTER_WEIGHTS = "adapter_model.safetensors";

function toBase64(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; i += CHUNK) text += String.fromCharCode(...bytes.subarray(i, i + CHUNK));
  return btoa(text);
}

function fromBase64(data: string): Uint8Array {
  let text: string;
  try {
    text = atob(data);
  } catch {
    throw new ValidationError("model_weights data is not base64", ["data"]);
  }
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

/** A whole model's weights as a resource. */
export function policyWeightsResource(config: ModelConfig, params: Float32Array, step = 0): PolicyWeights {
  return {
    resource_type: "model_weights",
    format: "lightning-ts",
    data: toBase64(encodeModel(config, params, step)),
    adapter_config: null,
    step,
  };
}

/** A LoRA adapter (its base stays with the runners) as a resource. */
export function loraWeightsResource(model: ModelConfig, adapter: PeftAdapter, step = 0): PolicyWeights {
  const files = peftAdapterFiles(model, adapter);
  return {
    resource_type: "model_weights",
    format: "peft",
    data: toBase64(files[ADAPTER_WEIGHTS]!),
    adapter_config: new TextDecoder().decode(files[ADAPTER_CONFIG]),
    step,
  };
}

/** The whole model of a `lightning-ts` resource. */
export function fromPolicyWeights(resource: PolicyWeights): { config: ModelConfig; params: Float32Array; step: number } {
  if (resource.format !== "lightning-ts")
    throw new ValidationError(`model_weights holds a ${resource.format} adapter, not a whole model: use fromLoraWeights`, ["format"]);
  const { config, params } = decodeModel(fromBase64(resource.data));
  return { config, params, step: resource.step };
}

/** The adapter of a `peft` resource, laid out for `model`. */
export async function fromLoraWeights(resource: PolicyWeights, model: ModelConfig): Promise<PeftAdapter & { step: number }> {
  if (resource.format !== "peft" || resource.adapter_config === null)
    throw new ValidationError("model_weights holds no PEFT adapter (format peft with adapter_config)", ["format"]);
  const adapter = await loadPeftAdapter(
    { [ADAPTER_CONFIG]: new TextEncoder().encode(resource.adapter_config), [ADAPTER_WEIGHTS]: fromBase64(resource.data) },
    model,
  );
  return { ...adapter, step: resource.step };
}

/**
 * A policy's weights as a store resource (`PolicyWeights`, src/types/resources.ts) and back: the
 * `lightning-ts` checkpoint file (config, parameters, step) in base64, so a browser tab can publish the
 * weights it trained and the runners' side can serve them (docs/browser.md).
 */
import type { PolicyWeights } from "../types/resources.ts";
import { ValidationError } from "../types/errors.ts";
import { decodeModel, encodeModel } from "./checkpoint.ts";
import type { ModelConfig } from "./config.ts";

const CHUNK = 0x8000;

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

export function policyWeightsResource(config: ModelConfig, params: Float32Array, step = 0): PolicyWeights {
  return { resource_type: "model_weights", format: "lightning-ts", data: toBase64(encodeModel(config, params, step)) };
}

export function fromPolicyWeights(resource: PolicyWeights): { config: ModelConfig; params: Float32Array; step: number } {
  if (resource.format !== "lightning-ts") throw new ValidationError(`unknown model_weights format ${resource.format}`, ["format"]);
  return decodeModel(fromBase64(resource.data));
}

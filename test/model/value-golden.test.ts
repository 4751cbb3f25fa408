// The critic against PyTorch autograd: test/fixtures/critic/make_golden.py (run by hand) builds verl's
// critic (AutoModelForTokenClassification, one label, from the tiny Qwen2 checkpoint), runs a padded batch
// in float64 and writes the values, verl's clipped value loss and every parameter's gradient. Our critic,
// from the same checkpoint and head, in float32, must reproduce them.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { createCpuValueTrainer } from "../../src/cpu/value-trainer.ts";
import { loadPretrained } from "../../src/model/hf/index.ts";
import { hfTensorName } from "../../src/model/hf/tensors.ts";
import { responseValues, positionGradients, valueBackward, valueForward } from "../../src/model/reference/value-model.ts";
import type { LossAggMode, TokenBatch } from "../../src/model/train-types.ts";
import { valueLoss } from "../../src/model/value-loss.ts";
import { VALUE_HEAD_BIAS, VALUE_HEAD_WEIGHT, valueLayout, valueParamsFromPolicy } from "../../src/model/value-params.ts";

interface Golden {
  model: string;
  cliprange_value: number;
  P: number;
  R: number;
  n: number;
  input_ids: number[];
  attention_mask: number[];
  position_ids: number[];
  score_weight: number[];
  score_bias: number;
  old_values: number[];
  returns: number[];
  losses: Record<LossAggMode, { vf_loss: number; vf_clipfrac: number }>;
  values: number[];
  vpred_mean: number;
  grad_norm: number;
  score_grad: { weight: number[]; bias: number };
  decoder_grads: Record<string, { shape: number[]; norm: number; samples: Array<[number, number]> }>;
}

const golden = JSON.parse(readFileSync("test/fixtures/critic/golden.json", "utf8")) as Golden;
const batch: TokenBatch = {
  n: golden.n,
  P: golden.P,
  R: golden.R,
  inputIds: Int32Array.from(golden.input_ids),
  attentionMask: Int32Array.from(golden.attention_mask),
  positionIds: Int32Array.from(golden.position_ids),
};
const { n, P, R } = batch;
const mask = Float32Array.from({ length: n * R }, (_, k) => golden.attention_mask[Math.floor(k / R) * (P + R) + P + (k % R)]);
const returns = Float32Array.from(golden.returns);
const oldValues = Float32Array.from(golden.old_values);

async function criticParams() {
  const model = await loadPretrained(golden.model);
  const params = valueParamsFromPolicy(model.config, model.weights);
  const head = valueLayout(model.config).filter((s) => s.name === VALUE_HEAD_WEIGHT || s.name === VALUE_HEAD_BIAS);
  params.set(golden.score_weight, head[0].offset);
  params[head[1].offset] = golden.score_bias;
  return { config: model.config, params };
}

/** Largest |a - b| relative to the largest |b|. */
function scaledErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let err = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    err = Math.max(err, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return err / scale;
}

describe("the critic against torch autograd (verl's critic on a Hugging Face Qwen2)", () => {
  it("values at [:, -R-1:-1], the clipped value loss in every aggregation mode, and its metrics", async () => {
    const { config, params } = await criticParams();
    const values = responseValues(valueForward(config, params, batch).values, n, P, R);
    for (let k = 0; k < n * R; k++) if (mask[k] === 1) expect(values[k]).toBeCloseTo(golden.values[k], 5);
    for (const [mode, want] of Object.entries(golden.losses) as Array<[LossAggMode, Golden["losses"][LossAggMode]]>) {
      const r = valueLoss(
        { rows: n, cols: R, values, returns, oldValues, responseMask: mask },
        { cliprangeValue: golden.cliprange_value, lossAggMode: mode },
      );
      expect(r.vf_loss / want.vf_loss, mode).toBeCloseTo(1, 5);
      expect(r.vf_clipfrac, mode).toBeCloseTo(want.vf_clipfrac, 6);
    }
    expect(golden.losses["token-mean"].vf_clipfrac).toBeGreaterThan(0);
  });

  it("every parameter's gradient (token-mean)", async () => {
    const { config, params } = await criticParams();
    const out = valueForward(config, params, batch);
    const loss = valueLoss(
      { rows: n, cols: R, values: responseValues(out.values, n, P, R), returns, oldValues, responseMask: mask },
      { cliprangeValue: golden.cliprange_value },
    );
    const grads = valueBackward(config, params, out.cache, positionGradients(loss.dValues, n, P, R));
    const layout = valueLayout(config);
    const at = (name: string) => {
      const s = layout.find((x) => x.name === name)!;
      return grads.subarray(s.offset, s.offset + s.size);
    };
    expect(scaledErr(at(VALUE_HEAD_WEIGHT), golden.score_grad.weight)).toBeLessThan(1e-5);
    expect(at(VALUE_HEAD_BIAS)[0] / golden.score_grad.bias).toBeCloseTo(1, 5);
    const decoderNames = layout.map((s) => s.name).filter((name) => !name.startsWith("value_head."));
    expect(decoderNames.map((name) => hfTensorName(name).hf).sort()).toEqual(Object.keys(golden.decoder_grads).sort());
    for (const name of decoderNames) {
      const { hf, transpose } = hfTensorName(name);
      const want = golden.decoder_grads[hf];
      const g = at(name);
      let sq = 0;
      for (const x of g) sq += x * x;
      expect(Math.sqrt(sq) / want.norm, name).toBeCloseTo(1, 4);
      // Hugging Face stores linear weights [out, in], we store [in, out]
      const [rows, cols] = want.shape.length === 2 ? want.shape : [1, want.shape[0]];
      let worst = 0;
      for (const [i, v] of want.samples) {
        const ours = transpose ? g[(i % cols) * rows + Math.floor(i / cols)] : g[i];
        worst = Math.max(worst, Math.abs(ours - v));
      }
      expect(worst / want.norm, name).toBeLessThan(1e-5);
    }
  });

  it("the CPU critic's valueStep reports the same loss, metrics and gradient norm", async () => {
    const { config, params } = await criticParams();
    const critic = createCpuValueTrainer({ config, params });
    const m = await critic.valueStep(batch, returns, oldValues, { cliprangeValue: golden.cliprange_value });
    expect(m.vf_loss / golden.losses["token-mean"].vf_loss).toBeCloseTo(1, 5);
    expect(m.vf_clipfrac).toBeCloseTo(golden.losses["token-mean"].vf_clipfrac, 6);
    expect(m.vpred_mean).toBeCloseTo(golden.vpred_mean, 5);
    expect(m.grad_norm / golden.grad_norm).toBeCloseTo(1, 5);
    critic.close();
  });
});

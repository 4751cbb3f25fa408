/**
 * Supervised fine-tuning on chat records (docs/training.md#sft-from-chat-records), on any policy
 * trainer: the CPU trainer with or without a LoRA adapter, or the WebGPU trainer.
 *
 * `trainSft` is the loop: tokenize every record once (sft-batch.ts), then for each epoch shuffle the
 * rows and take one `sftStep` (token-mean cross-entropy of the assistant tokens) per `batchSize` rows.
 * Validation records give a held-out loss before the first step and after every epoch.
 * `SFT` is the same loop as an `Algorithm` for `Trainer.fit`: the train and validation datasets are
 * chat records, and each step and validation is also an `sft.step` / `sft.validation` span in the store,
 * under one bookkeeping rollout with `metadata.kind = "sft-metrics"` (as GRPO writes `grpo.step`).
 */
import { microBatches } from "../model/batch.ts";
import type { Tokenizer } from "../model/tokenizer-api.ts";
import type { LossAggMode, PolicyTrainer, TokenBatch } from "../model/train-types.ts";
import type { Attributes } from "../types/span.ts";
import { BookkeepingRollout } from "./bookkeeping.ts";
import { ValidationError } from "../types/errors.ts";
import { Algorithm, type Dataset } from "./base.ts";
import { sftBatchFromRows, sftPadId, sftRowsFromChats, type SftRow, type SftTrainOn } from "./sft-batch.ts";

export interface SftOptions {
  /** The policy trainer; with a LoRA adapter only the adapter trains. */
  trainer: PolicyTrainer;
  /** Renders the records (its chat template) and supplies the pad and end-of-turn ids. */
  tokenizer: Tokenizer;
  /** Most tokens of one row; at most the model's max_seq_len [its max_seq_len]. */
  maxLength?: number;
  /** Which assistant turns carry the loss [assistant: all of them]. */
  trainOn?: SftTrainOn;
  /** Passes over the training records [1]. */
  epochs?: number;
  /** Records per optimizer step [8]. */
  batchSize?: number;
  /** Learning rate of each step [the trainer's]. */
  lr?: number;
  /** Learning rate of step `step` (1-based) of `steps`; overrides `lr`. */
  lrSchedule?: (step: number, steps: number) => number;
  /** Rows per forward/backward pass; gradients accumulate [all rows of the step]. */
  microBatchSize?: number;
  /** Aggregation of the token cross-entropy [token-mean]. */
  lossAggMode?: LossAggMode;
  /** Seed of the shuffles [0]. */
  seed?: number;
  /** Print a line per step and per validation [true]. */
  progress?: boolean;
  /** Called after each step and validation (awaited). */
  onReport?: (report: SftReport) => void | Promise<void>;
}

export interface SftStepReport {
  kind: "step";
  step: number;
  epoch: number;
  /** Cross-entropy of the step's trained tokens (before its update). */
  loss: number;
  rows: number;
  tokens: number;
  grad_norm: number;
  /** The learning rate given to the step; absent when the trainer's own was used. */
  lr?: number;
  tokens_per_second: number;
  seconds: number;
  skipped: boolean;
}

export interface SftValidationReport {
  kind: "validation";
  /** Steps taken before it. */
  step: number;
  epoch: number;
  /** Token-mean cross-entropy of the validation records' trained tokens. */
  loss: number;
  rows: number;
  tokens: number;
}

export type SftReport = SftStepReport | SftValidationReport;

export interface SftResult {
  reports: SftReport[];
  steps: number;
  /** Training / validation records whose prompt was cut from the left to fit maxLength. */
  truncated: { train: number[]; val: number[] };
  /** Training / validation records left out: their trained tokens alone do not fit maxLength. */
  dropped: { train: number[]; val: number[] };
}

function positiveInt(v: number, name: string): void {
  if (!(Number.isInteger(v) && v >= 1)) throw new ValidationError(`${name} must be a positive integer, got ${v}`, [name]);
}

/** Token-mean cross-entropy of `rows` under the trainer's current parameters (no update). */
async function heldOutLoss(trainer: PolicyTrainer, rows: readonly SftRow[], padId: number, chunk: number, micro?: number) {
  let nll = 0;
  let tokens = 0;
  for (const [r0, r1] of microBatches(rows.length, chunk)) {
    const batch: TokenBatch = sftBatchFromRows(rows.slice(r0, r1), padId);
    const { log_probs } = await trainer.logProbs(batch, { microBatchSize: micro });
    const mask = batch.responseMask!;
    for (let i = 0; i < mask.length; i++)
      if (mask[i]) {
        nll -= log_probs[i];
        tokens += 1;
      }
  }
  return { loss: tokens ? nll / tokens : 0, tokens };
}

/** Supervised fine-tuning of `trainer` on chat `records`; see the module comment. */
export async function trainSft(
  options: SftOptions & { records: Dataset<unknown>; valRecords?: Dataset<unknown> | null },
): Promise<SftResult> {
  const { trainer, tokenizer } = options;
  const epochs = options.epochs ?? 1;
  const batchSize = options.batchSize ?? 8;
  const maxLength = options.maxLength ?? trainer.config.max_seq_len;
  positiveInt(epochs, "epochs");
  positiveInt(batchSize, "batchSize");
  if (maxLength > trainer.config.max_seq_len)
    throw new ValidationError(`maxLength ${maxLength} exceeds the model's max_seq_len ${trainer.config.max_seq_len}`, ["maxLength"]);
  if (options.records.length === 0) throw new ValidationError("SFT needs at least one training record", ["records"]);
  const batchOptions = { maxLength, trainOn: options.trainOn };
  const train = sftRowsFromChats(options.records, tokenizer, batchOptions);
  const val = options.valRecords?.length ? sftRowsFromChats(options.valRecords, tokenizer, batchOptions) : null;
  if (train.rows.length === 0)
    throw new ValidationError(`every one of the ${train.dropped.length} training records is longer than maxLength ${maxLength}`, [
      "records",
    ]);
  const padId = sftPadId(tokenizer);
  const perEpoch = Math.ceil(train.rows.length / batchSize);
  const steps = epochs * perEpoch;
  const progress = options.progress ?? true;
  const result: SftResult = {
    reports: [],
    steps: 0,
    truncated: { train: train.truncated, val: val?.truncated ?? [] },
    dropped: { train: train.dropped, val: val?.dropped ?? [] },
  };
  if (progress && (train.truncated.length || train.dropped.length || val?.truncated.length || val?.dropped.length))
    console.log(
      `sft: records cut from the left / dropped (maxLength ${maxLength}): training ${train.truncated.length} / ${train.dropped.length}` +
        (val ? `, validation ${val.truncated.length} / ${val.dropped.length}` : ""),
    );
  const report = async (r: SftReport): Promise<void> => {
    result.reports.push(r);
    if (progress) console.log(progressLine(r, steps));
    await options.onReport?.(r);
  };
  const validate = async (step: number, epoch: number): Promise<void> => {
    if (!val || val.rows.length === 0) return;
    const { loss, tokens } = await heldOutLoss(trainer, val.rows, padId, batchSize, options.microBatchSize);
    await report({ kind: "validation", step, epoch, loss, rows: val.rows.length, tokens });
  };

  let seed = (options.seed ?? 0) >>> 0;
  const random = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 4294967296;
  await validate(0, 0);
  let step = 0;
  for (let epoch = 1; epoch <= epochs; epoch++) {
    const order = shuffled(train.rows.length, random);
    for (let b = 0; b < perEpoch; b++) {
      step += 1;
      const t0 = performance.now();
      const rows = order.slice(b * batchSize, (b + 1) * batchSize).map((i) => train.rows[i]);
      const lr = options.lrSchedule ? options.lrSchedule(step, steps) : options.lr;
      const m = await trainer.sftStep(sftBatchFromRows(rows, padId), {
        lr,
        microBatchSize: options.microBatchSize,
        lossAggMode: options.lossAggMode,
      });
      result.steps = step;
      await report({
        kind: "step",
        step,
        epoch,
        loss: m.loss,
        rows: rows.length,
        tokens: m.tokens,
        grad_norm: m.grad_norm,
        ...(lr === undefined ? {} : { lr }),
        tokens_per_second: m.tokens_per_second,
        seconds: (performance.now() - t0) / 1000,
        skipped: m.skipped,
      });
    }
    await validate(step, epoch);
  }
  return result;
}

function shuffled(n: number, random: () => number): number[] {
  const idx = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [idx[i], idx[j]] = [idx[j], idx[i]];
  }
  return idx;
}

function progressLine(r: SftReport, steps: number): string {
  if (r.kind === "validation") return `sft validation @ step ${r.step}: loss ${r.loss.toFixed(4)} (${r.rows} records, ${r.tokens} tokens)`;
  return (
    `sft step ${r.step}/${steps} epoch ${r.epoch} loss ${r.loss.toFixed(4)} grad ${r.grad_norm.toFixed(3)} rows ${r.rows} ` +
    `${r.tokens_per_second.toFixed(0)} tok/s ${r.seconds.toFixed(2)} s${r.skipped ? " (skipped: not finite)" : ""}`
  );
}

/** `trainSft` as an Algorithm: `run(train, val)` takes datasets of chat records and logs to the store. */
export class SFT extends Algorithm {
  /** Every report, in order. */
  readonly reports: SftReport[] = [];
  /** The last run's result (counts of cut and dropped records). */
  result: SftResult | null = null;

  constructor(readonly options: SftOptions) {
    super();
    for (const k of ["epochs", "batchSize"] as const) if (options[k] !== undefined) positiveInt(options[k], k);
  }

  async run(trainDataset?: Dataset<unknown> | null, valDataset?: Dataset<unknown> | null): Promise<void> {
    if (!trainDataset || trainDataset.length === 0)
      throw new ValidationError("SFT needs a non-empty training dataset of chat records", ["train_dataset"]);
    const store = this.getStore();
    const metrics = await BookkeepingRollout.start(store, { algorithm: "sft" }, "sft-metrics");
    await metrics.around(async () => {
      this.result = await trainSft({
        ...this.options,
        records: trainDataset,
        valRecords: valDataset ?? null,
        onReport: async (r) => {
          this.reports.push(r);
          const attributes: Attributes = {};
          for (const [k, v] of Object.entries(r))
            if (typeof v === "number" || typeof v === "boolean" || typeof v === "string") attributes[`sft.${k}`] = v;
          await metrics.record(r.kind === "step" ? "sft.step" : "sft.validation", attributes);
          await this.options.onReport?.(r);
        },
      });
    });
  }
}

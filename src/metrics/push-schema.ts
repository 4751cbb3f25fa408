/**
 * The body of `POST /v1/agl/metrics/push`: what one process's registry changed since its last push
 * (docs/metrics.md#metrics-from-other-processes). Counters and histograms carry their increments, gauges
 * their latest value; each metric carries its definition, so the server can register it on first sight.
 * Names, label names and buckets are checked further by the registry (registry.ts `checkDefinition`).
 */
import { z } from "zod";

const Labels = z.record(z.string(), z.string());
const head = {
  name: z.string(),
  help: z.string().max(1024).optional(),
  label_names: z.array(z.string()).max(32),
};
/** Series of one metric in one push. */
const MAX_SAMPLES = 10_000;

const PushedCounter = z.strictObject({
  ...head,
  type: z.literal("counter"),
  samples: z.array(z.strictObject({ labels: Labels, value: z.number().nonnegative() })).max(MAX_SAMPLES),
});
const PushedGauge = z.strictObject({
  ...head,
  type: z.literal("gauge"),
  samples: z.array(z.strictObject({ labels: Labels, value: z.number() })).max(MAX_SAMPLES),
});
const PushedHistogram = z.strictObject({
  ...head,
  type: z.literal("histogram"),
  buckets: z.array(z.number()).max(256),
  samples: z
    .array(z.strictObject({ labels: Labels, bucket_counts: z.array(z.number().int().nonnegative()), sum: z.number() }))
    .max(MAX_SAMPLES),
});

export const PushedMetric = z.discriminatedUnion("type", [PushedCounter, PushedGauge, PushedHistogram]);
export type PushedMetric = z.infer<typeof PushedMetric>;

export const MetricsPush = z.strictObject({
  /** The pushing registry's id (`MetricsRegistry.source`). */
  source: z.string().min(1).max(64),
  metrics: z.array(PushedMetric).max(1_000),
});
export type MetricsPush = z.infer<typeof MetricsPush>;

import { z } from "zod";

export const StoreStatistics = z.looseObject({
  name: z.string().optional(),
  total_rollouts: z.number().int().optional(),
  total_attempts: z.number().int().optional(),
  total_spans: z.number().int().optional(),
  total_resources: z.number().int().optional(),
  total_workers: z.number().int().optional(),
  uptime: z.number().optional(),
  total_span_bytes: z.number().optional(),
  eviction_threshold_bytes: z.number().optional(),
  safe_threshold_bytes: z.number().optional(),
  memory_capacity_bytes: z.number().optional(),
});
export type StoreStatistics = z.infer<typeof StoreStatistics>;

export const StoreCapabilities = z.object({
  thread_safe: z.boolean().default(false),
  async_safe: z.boolean().default(false),
  zero_copy: z.boolean().default(false),
  otlp_traces: z.boolean().default(false),
});
export type StoreCapabilities = z.infer<typeof StoreCapabilities>;

import { z } from "zod";

export const RolloutStatus = z.enum(["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]);
export type RolloutStatus = z.infer<typeof RolloutStatus>;

export const AttemptStatus = z.enum(["preparing", "running", "failed", "succeeded", "unresponsive", "timeout"]);
export type AttemptStatus = z.infer<typeof AttemptStatus>;

export const WorkerStatus = z.enum(["idle", "busy", "unknown"]);
export type WorkerStatus = z.infer<typeof WorkerStatus>;

export const RolloutMode = z.enum(["train", "val", "test"]);
export type RolloutMode = z.infer<typeof RolloutMode>;

export const StatusCode = z.enum(["UNSET", "OK", "ERROR"]);
export type StatusCode = z.infer<typeof StatusCode>;

export const FilterLogic = z.enum(["and", "or"]);
export type FilterLogic = z.infer<typeof FilterLogic>;

export const SortOrder = z.enum(["asc", "desc"]);
export type SortOrder = z.infer<typeof SortOrder>;

export const QUEUING_STATUSES: readonly RolloutStatus[] = ["queuing", "requeuing"];
export const RUNNING_STATUSES: readonly RolloutStatus[] = ["preparing", "running"];
export const TERMINAL_STATUSES: readonly RolloutStatus[] = ["failed", "succeeded", "cancelled"];

export const isQueuing = (s: RolloutStatus): boolean => s === "queuing" || s === "requeuing";
export const isRunning = (s: RolloutStatus): boolean => s === "preparing" || s === "running";
export const isTerminal = (s: RolloutStatus): boolean => s === "failed" || s === "succeeded" || s === "cancelled";

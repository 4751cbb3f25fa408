export * from "./base.ts";
export * from "./baseline.ts";
export * from "./functional.ts";
export { GRPO, type GrpoOptions, type GrpoReport, type StepReport, type ValidationReport } from "./grpo.ts";

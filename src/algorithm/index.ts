export * from "./base.ts";
export * from "./baseline.ts";
export * from "./functional.ts";
export { GRPO, type GrpoOptions, type GrpoReport, type StepReport, type ValidationReport } from "./grpo.ts";
export {
  SFT,
  trainSft,
  type SftOptions,
  type SftReport,
  type SftResult,
  type SftStepReport,
  type SftValidationReport,
} from "./sft.ts";
export * from "./sft-batch.ts";

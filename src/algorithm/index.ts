export * from "./base.ts";
export * from "./baseline.ts";
export * from "./functional.ts";
export { GRPO, type GrpoOptions, type GrpoReport, type StepReport, type ValidationReport } from "./grpo.ts";
export { dumpGenerations, PPO, type PpoReport } from "./ppo.ts";
export type { AdvantageEstimator, CriticOptions, KlControllerOptions, PpoOptions } from "./ppo-options.ts";
export { ADVANTAGE_ESTIMATORS, computeAdvantages, type EstimatorInput, type EstimatorOptions } from "./advantages.ts";
export { AdaptiveKlController, FixedKlController, klController, type KlController } from "./kl-controller.ts";
export { grpoUpdate, ppoUpdate, type GrpoUpdate, type GrpoUpdateOptions, type PpoUpdate, type PpoUpdateOptions } from "./grpo-step.ts";
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
export {
  APO,
  ApoModelError,
  type ApoCandidate,
  type ApoOptions,
  type ApoRound,
  type CandidateOrigin,
  type RolloutResultForApo,
  type VersionedPromptTemplate,
} from "./apo.ts";
export {
  completionText,
  createOpenAiClient,
  type ChatCompletionBody,
  type ChatCompletionsClient,
  type OpenAiClientOptions,
} from "./apo-client.ts";
export { CRITIQUE_PROMPTS, EDIT_PROMPTS, type ApoExperiment, type ChatMessage } from "./apo-prompts.ts";
export { BookkeepingRollout } from "./bookkeeping.ts";
export { TRAINING_METRICS_SPAN, TrainingMetrics, type TrainingMetricsOptions } from "./training-metrics.ts";
export {
  ADV_ESTIMATORS,
  classifyVerlKey,
  listVerlKeys,
  LOSS_AGG_MODES,
  parseVerlConfig,
  POLICY_LOSS_MODES,
  stepsOfEpochs,
  VerlConfigSchema,
  verlLrFactor,
  verlSettings,
  warmupSteps,
  type VerlConfig,
  type VerlKeyClass,
  type VerlPpoOptions,
  type VerlSettings,
} from "./verl-config.ts";

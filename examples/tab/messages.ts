/** What the page (main.ts) and the training worker (worker.ts) say to each other, and the run's defaults. */
import type { GrpoReport } from "../../src/browser.ts";
import type { RolloutView, TabOptions } from "./loop.ts";

/** The agents the tab trains (agents.ts). */
export const TAB_AGENTS = ["calc", "calc-x"] as const;
export type TabAgentName = (typeof TAB_AGENTS)[number];

/** The run's numbers and backend (runTab's options without the agent and the callbacks). */
export type TabRunSettings = Omit<TabOptions, "agent" | "signal" | "onReport" | "onRollouts" | "onCheckpoint" | "onStart" | "log">;

/** The run's settings, as the page's form (or URL) gives them: which agent, and its run's settings. */
export type TabSettings = TabRunSettings & { agent: TabAgentName };

/** `modelUrl`: the calc checkpoint's file, or the Calc-X model folder (the page's `calc-x/`). */
export type ToWorker = { type: "start"; settings: TabSettings; modelUrl: string } | { type: "stop" } | { type: "export-store" };

export type FromWorker =
  | { type: "log"; line: string }
  | { type: "report"; report: GrpoReport }
  | { type: "rollouts"; rollouts: RolloutView[] }
  /** The trained policy's files by name (loop.ts's `PolicyFiles`). */
  | { type: "checkpoint"; step: number; files: Record<string, ArrayBuffer> }
  | { type: "store"; json: string }
  | { type: "done"; backend: string; seconds: number; steps: number; probe: TabProbe }
  | { type: "error"; message: string };

/** The trained policy on one prompt, as the tab computed it (loop.ts's `TabResult.probe`). */
export interface TabProbe {
  ids: number[];
  logits: number[];
  trainerLogProbs: number[];
}

/** What the page shows as `window.tab`, readable from outside (tests, the console). */
export interface TabState {
  running: boolean;
  done: boolean;
  error: string | null;
  backend: string | null;
  /** Each step: its mean reward, its training rows (one per rollout at the trajectory level) and those that trained (tied groups do not). */
  steps: { step: number; reward: number; seconds: number; rows: number; trainedRows: number }[];
  validations: { step: number; accuracy: number }[];
  checkpointStep: number | null;
  /** The steps done when Stop was pressed (null: not pressed). */
  stepsAtStop: number | null;
  /** Main-thread tasks over 50 ms while training (PerformanceObserver "longtask"), their durations in ms, and the longest. */
  longTasksMs: number[];
  longestTaskMs: number;
  /** How long this page took to handle each message from the worker (drawing included), in ms. */
  messageMs: number[];
  probe: TabProbe | null;
  rollouts: RolloutView[];
  /** The chart's data: steps, training reward, held-out accuracy (null where not measured). */
  chart: [number[], (number | null)[], (number | null)[]];
}

/** The page's defaults: the calc demo's first 20 steps (16 problems x 8 rollouts), about +13 points held-out. */
export const TAB_DEFAULTS: TabRunSettings = {
  steps: 20,
  batch: 16,
  n: 8,
  lr: 1e-3,
  valTasks: 100,
  valEvery: 5,
  seed: 0,
  runners: 4,
  loraRank: 0,
  backend: "auto",
};

/**
 * The Calc-X agent's defaults: the Calc-X demo's (examples/calc-x/train.ts: a rank-16 LoRA adapter, lr
 * 5e-4, 8 rollouts a task) with smaller steps and fewer held-out problems, as a tab's CPU generation is slow.
 */
export const CALC_X_TAB_DEFAULTS: TabRunSettings = {
  steps: 20,
  batch: 8,
  n: 8,
  lr: 5e-4,
  valTasks: 50,
  valEvery: 5,
  seed: 0,
  runners: 8,
  loraRank: 16,
  backend: "auto",
};

export const AGENT_DEFAULTS: Record<TabAgentName, TabRunSettings> = { calc: TAB_DEFAULTS, "calc-x": CALC_X_TAB_DEFAULTS };

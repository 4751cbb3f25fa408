/** What the page (main.ts) and the training worker (worker.ts) say to each other, and the run's defaults. */
import type { GrpoReport } from "../../src/browser.ts";
import type { RolloutView, TabOptions } from "./loop.ts";

/** The run's settings, as the page's form (or URL) gives them. */
export type TabSettings = Omit<TabOptions, "checkpoint" | "signal" | "onReport" | "onRollouts" | "onCheckpoint" | "onStore" | "log">;

export type ToWorker = { type: "start"; settings: TabSettings; checkpointUrl: string } | { type: "stop" } | { type: "export-store" };

export type FromWorker =
  | { type: "log"; line: string }
  | { type: "report"; report: GrpoReport }
  | { type: "rollouts"; rollouts: RolloutView[] }
  | { type: "checkpoint"; step: number; weights: ArrayBuffer }
  | { type: "store"; json: string }
  | { type: "done"; backend: string; seconds: number; steps: number; probe: { ids: number[]; logits: number[] } }
  | { type: "error"; message: string };

/** What the page shows as `window.tab`, readable from outside (tests, the console). */
export interface TabState {
  running: boolean;
  done: boolean;
  error: string | null;
  backend: string | null;
  steps: { step: number; reward: number; seconds: number }[];
  validations: { step: number; accuracy: number }[];
  checkpointStep: number | null;
  /** The longest main-thread task seen while training (PerformanceObserver "longtask": tasks over 50 ms), and how many. */
  longestTaskMs: number;
  longTasks: number;
  probe: { ids: number[]; logits: number[] } | null;
  rollouts: RolloutView[];
  /** The chart's data: steps, training reward, held-out accuracy (null where not measured). */
  chart: [number[], (number | null)[], (number | null)[]];
}

/** The page's defaults: a run that shows a gain within minutes on a laptop's GPU. */
export const TAB_DEFAULTS: TabSettings = {
  steps: 200,
  batch: 8,
  n: 4,
  lr: 1e-3,
  valTasks: 50,
  valEvery: 10,
  seed: 0,
  runners: 4,
  backend: "auto",
};

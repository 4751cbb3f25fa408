/**
 * The watchdog (docs/store.md#the-watchdog): marks latest attempts that ran past `timeout_seconds` or stayed silent past
 * `unresponsive_seconds`. Lazy (debounced, before the scanning calls) and optionally on a timer.
 */
import type { Attempt, Clock, Rollout } from "../../types/index.ts";
import { watchdogVerdict } from "../decisions.ts";
import { platform } from "../../platform/index.ts";
import { nextTurn } from "../next-turn.ts";
import type { DueRollout, StorageTx } from "../storage.ts";
import type { Effects, TxBody, TxContext, TxDriver } from "./driver.ts";
import { applyAttemptPatch } from "./steps.ts";
import type { Waits } from "./waits.ts";

/**
 * Rollouts the watchdog judges per transaction; the event loop gets a turn between pages. Small enough
 * that a page of expiries on the libSQL store takes a few milliseconds.
 */
const WATCHDOG_PAGE = 100;

export class Watchdog {
  private lastScan: number;
  private scanning = false;
  private timer: ReturnType<typeof setInterval> | null = null;

  /** @param debounce minimum seconds between two lazy scans; <= 0 scans before every eligible call. */
  constructor(
    private readonly clock: Clock,
    private readonly debounce: number,
    private readonly driver: TxDriver,
    private readonly waits: Waits,
  ) {
    // The first scan may run at once.
    this.lastScan = clock.now() - debounce;
  }

  /**
   * The debounce gate: true when a lazy scan may run now, and then it records the scan time, so
   * among concurrent callers exactly one wins.
   */
  shouldScan(): boolean {
    if (this.scanning) return false;
    if (this.debounce <= 0) return true;
    const now = this.clock.now();
    if (now - this.lastScan < this.debounce) return false;
    this.lastScan = now;
    return true;
  }

  /**
   * Scans now (no debounce); returns how many attempts changed. A scan already in progress makes this a
   * no-op (0).
   *
   * It reads only rollouts whose deadline (decisions.ts `watchdogDeadline`, indexed by the storage) has
   * passed, a page at a time, and gives the event loop a turn between pages: with no rollout due, a scan
   * is one index lookup however many rollouts are unfinished, and a burst of expiries never holds the
   * loop for more than a page (docs/store.md).
   */
  async scan(): Promise<number> {
    if (this.scanning) return 0;
    this.scanning = true;
    try {
      const now = this.clock.now();
      let changed = 0;
      let after: DueRollout | null = null;
      for (;;) {
        // Look in a read transaction first and open a write transaction only for rollouts that are due
        // (a SQL write transaction is expensive and blocks writers).
        const cursor = after;
        const due: DueRollout[] = await this.driver.call("r", (t) => t.listDueRollouts(now, cursor, WATCHDOG_PAGE));
        if (due.length === 0) break;
        const fx: Effects = { finished: [] };
        changed += await this.driver.tx(
          "w",
          watchdogApplyTx,
          due.map((d) => d.rollout_id),
          fx,
        );
        this.waits.notifyFinished(fx);
        if (due.length < WATCHDOG_PAGE) break;
        // Rollouts judged and left alone (a heartbeat came in between) stay behind the cursor.
        after = due[due.length - 1]!;
        await nextTurn();
      }
      return changed;
    } finally {
      this.scanning = false;
    }
  }

  /** Runs `scan` (the store's `runWatchdog`, so it can be observed) every `seconds`. */
  startTimer(seconds: number, scan: () => Promise<number>): void {
    const timer = setInterval(() => {
      scan().catch((err: unknown) => {
        // A timer has no caller to throw to: report it loudly rather than lose it.
        console.error("[lightning-ts] background watchdog scan failed:", err);
      });
    }, seconds * 1000);
    // Do not keep the process alive just for the watchdog.
    platform.unrefTimer(timer);
    this.timer = timer;
  }

  stopTimer(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}

/**
 * The status the watchdog gives a rollout's latest attempt now, or null. Only a still-running
 * rollout's preparing/running/unresponsive attempt is judged (a finished attempt never becomes
 * `timeout`), and a verdict equal to the current status changes nothing.
 */
function dueVerdict(rollout: Rollout, attempt: Attempt | null, now: number): "timeout" | "unresponsive" | null {
  if (!attempt || !(rollout.status === "preparing" || rollout.status === "running")) return null;
  if (!(attempt.status === "preparing" || attempt.status === "running" || attempt.status === "unresponsive")) return null;
  const verdict = watchdogVerdict(attempt, rollout.config, now);
  return verdict === attempt.status ? null : verdict;
}

function* watchdogApplyTx(this: TxContext, t: StorageTx, due: string[], fx: Effects): TxBody<number> {
  const now = this.clock.now();
  const latest: Map<string, Attempt> = yield t.getLatestAttempts(due);
  let n = 0;
  for (const id of due) {
    // Judged again on fresh rows: a span or an update may have landed in between.
    const rollout: Rollout | null = yield t.getRollout(id);
    const attempt = latest.get(id) ?? null;
    const verdict = rollout && dueVerdict(rollout, attempt, now);
    if (!verdict || !rollout || !attempt) continue;
    yield* applyAttemptPatch(t, rollout, attempt, { status: verdict }, now, fx);
    n++;
  }
  return n;
}

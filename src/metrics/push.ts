/**
 * `MetricsPusher`: sends what a registry changed to a store server, at most once per interval and once
 * more when closed. It starts its timer when nudged (the store client nudges it after each of its
 * requests) and only when there is something to send, so an idle process keeps no timer. A push that
 * fails for a while (the server away) is put back and sent with the next one; a server without the
 * route (Agent Lightning's own) stops it for good; a push the server refuses (a metric registered
 * there with other labels) is dropped. Each is logged.
 */
import { platform } from "../platform/index.ts";
import { errorLine, type LogWriter } from "../platform/log.ts";
import type { MetricsPush } from "./push-schema.ts";
import type { MetricsRegistry } from "./registry.ts";

export interface MetricsPusherOptions {
  /** Least milliseconds between two pushes. */
  intervalMs: number;
  log: LogWriter;
  /** True for an error that says the server has no such route: the pusher stops. */
  isMissingRoute(e: unknown): boolean;
  /** True for an error worth retrying with the next push (the server unreachable or failing). */
  isTransient(e: unknown): boolean;
}

export class MetricsPusher {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private sending: Promise<void> | null = null;
  private stopped = false;
  private lastProblem: string | null = null;

  constructor(
    private readonly registry: MetricsRegistry,
    private readonly send: (push: MetricsPush, final: boolean) => Promise<void>,
    private readonly options: MetricsPusherOptions,
  ) {}

  /** Schedules a push if the registry has something to send and none is scheduled. */
  nudge(): void {
    if (this.stopped || this.timer !== null || !this.registry.hasPending()) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush(false);
    }, this.options.intervalMs);
    platform.unrefTimer(this.timer);
  }

  /** Sends what is pending now (after a push in flight, if any). */
  async flush(final = false): Promise<void> {
    while (this.sending) await this.sending;
    if (this.stopped) return;
    const push = this.registry.takePending();
    if (!push) return;
    this.sending = this.send(push, final)
      .then(
        () => void (this.lastProblem = null),
        (e: unknown) => this.failed(push, e, final),
      )
      .finally(() => (this.sending = null));
    await this.sending;
  }

  /** The last push (what is pending now); no more after it. */
  async close(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.flush(true);
    this.stopped = true;
  }

  private failed(push: MetricsPush, e: unknown, final: boolean): void {
    const names = push.metrics.map((m) => m.name).join(", ");
    const problem = errorLine(e);
    const log = this.options.log;
    if (this.options.isMissingRoute(e)) {
      this.stopped = true;
      log.warning(`the store server takes no metrics (${problem}): this process's metrics stay in it (${names})`);
    } else if (final) log.warning(`this process's last metrics (${names}) were not sent: ${problem}`);
    else if (this.options.isTransient(e)) {
      this.registry.returnPending(push);
      // Once per kind of problem, not once per interval.
      if (problem !== this.lastProblem) log.warning(`metrics not sent yet, kept for the next push: ${problem}`);
      this.nudge();
    } else if (problem !== this.lastProblem)
      log.warning(`the store server refused this process's metrics (${names}); they are dropped: ${problem}`);
    this.lastProblem = problem;
  }
}

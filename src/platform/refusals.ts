import type { ServeOptions } from "./types.ts";

/**
 * Counts connections refused or closed at a limit and reports them now and then, not once per
 * connection: `describe` turns the count since the last report into the warning.
 */
export function refusalReporter(log: ServeOptions["log"], describe: (count: number) => string): () => void {
  let count = 0;
  let lastReport = Number.NEGATIVE_INFINITY;
  return () => {
    count++;
    const now = Date.now();
    if (log && now - lastReport >= 60_000) {
      log.warning(describe(count));
      lastReport = now;
      count = 0;
    }
  };
}

/** The reporters of a server's connection limits (src/platform/types.ts, `ServeLimits`). */
export function limitReporters(log: ServeOptions["log"], max: number, perAddress: number) {
  return {
    refusedAtCap: refusalReporter(
      log,
      (n) => `connection cap reached (${max}): refused ${n} connection(s) since the last report; raise it with --max-connections`,
    ),
    refusedForAddress: refusalReporter(
      log,
      (n) =>
        `connections from one address capped at ${perAddress}: refused ${n} connection(s) since the last report; ` +
        "raise it with --max-connections-per-address (behind a reverse proxy every client shares one address: raise it or give 0)",
    ),
    evictedForAddress: refusalReporter(
      log,
      (n) =>
        `connections from one address capped at ${perAddress}: closed ${n} connection(s) of such an address still waiting for a request's headers ` +
        "since the last report, longest waiting first; raise it with --max-connections-per-address",
    ),
    evicted: refusalReporter(
      log,
      (n) =>
        `connection cap reached (${max}): closed ${n} connection(s) still waiting for a request's headers since the last report, ` +
        "longest waiting first, to let new ones in",
    ),
  };
}

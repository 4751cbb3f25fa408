import type { ServeOptions } from "./types.ts";

/** Counts connections refused at the cap and reports them now and then, not once per connection. */
export function refusalReporter(log: ServeOptions["log"], max: number): () => void {
  let count = 0;
  let lastReport = Number.NEGATIVE_INFINITY;
  return () => {
    count++;
    const now = Date.now();
    if (log && now - lastReport >= 60_000) {
      log.warning(`connection cap reached (${max}): refused ${count} connection(s) since the last report; raise it with --max-connections`);
      lastReport = now;
      count = 0;
    }
  };
}

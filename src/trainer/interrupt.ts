/**
 * Ctrl+C and SIGTERM for the strategies: the first SIGINT or SIGTERM asks for a graceful stop (a runner
 * finishes or gives back its rollout, then the process exits by itself: a service manager's SIGTERM
 * loses nothing). A second SIGINT exits at once (130); a SIGTERM once stopping ends the process as
 * SIGTERM does by default, so whoever sent it sees a death by SIGTERM.
 * Signals come through the platform (src/platform/); where there are none (browsers) this is a no-op.
 */
import { platform } from "../platform/index.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.execution");

/** Calls `onFirst` on the first SIGINT or SIGTERM; returns a remover. */
export function onInterrupt(onFirst: () => void): () => void {
  let stopping = false;
  const first = (what: string, again: string): void => {
    stopping = true;
    log.warn(`${what} received on main thread; stopping gracefully (${again})`);
    onFirst();
  };
  const removeInt = platform.onSignal("SIGINT", () => {
    if (!stopping) first("KeyboardInterrupt", "press Ctrl+C again to exit at once");
    else platform.exit(130);
  });
  const removeTerm = platform.onSignal("SIGTERM", () => {
    if (!stopping) first("SIGTERM", "a second SIGTERM ends the process at once");
    else platform.dieBySignal("SIGTERM");
  });
  return () => {
    removeInt();
    removeTerm();
  };
}

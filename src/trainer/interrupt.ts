/**
 * Ctrl+C for the strategies: the first SIGINT asks for a graceful stop; a second one exits at once.
 * Signals come through the platform (src/platform/); where there are none (browsers) this is a no-op.
 */
import { platform } from "../platform/index.ts";
import { getLogger } from "../platform/log.ts";

const log = getLogger("agentlightning.execution");

/** Calls `onFirst` on the first SIGINT; returns a remover. */
export function onInterrupt(onFirst: () => void): () => void {
  let count = 0;
  return platform.onSignal("SIGINT", () => {
    count++;
    if (count === 1) {
      log.warn("KeyboardInterrupt received on main thread; stopping gracefully (press Ctrl+C again to exit at once)");
      onFirst();
    } else platform.exit(130);
  });
}

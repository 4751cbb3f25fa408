/**
 * Ctrl+C for the strategies: the first SIGINT asks for a graceful stop; a second one exits at once.
 * `process.on("SIGINT")` works on Node, Deno 2 and Bun; elsewhere (browsers) this is a no-op.
 */
import { getLogger } from "../tracer/log.ts";

const log = getLogger("agentlightning.execution");

interface ProcessLike {
  on?(event: string, fn: () => void): unknown;
  off?(event: string, fn: () => void): unknown;
  exit?(code: number): never;
}

const proc = (globalThis as { process?: ProcessLike }).process;

/** Calls `onFirst` on the first SIGINT; returns a remover. */
export function onInterrupt(onFirst: () => void): () => void {
  if (!proc?.on || !proc.off) return () => {};
  let count = 0;
  const handler = () => {
    count++;
    if (count === 1) {
      log.warn("KeyboardInterrupt received on main thread; stopping gracefully (press Ctrl+C again to exit at once)");
      onFirst();
    } else proc.exit?.(130);
  };
  proc.on("SIGINT", handler);
  return () => proc.off?.("SIGINT", handler);
}

/**
 * Resolves on the next turn of the event loop (a macrotask), after every pending microtask and any
 * I/O callbacks already due. Group commit waits for this before it takes a batch: callers that arrive in
 * separate macrotasks (HTTP requests, timers) or whose await chains are several microtasks long then
 * join the same transaction, where a microtask wait would commit each of them alone.
 * `setImmediate` where the runtime has it (Node, Bun, Deno 2), else a 0 ms timer.
 */
export const scheduleNextTurn: (fn: () => void) => void =
  typeof (globalThis as { setImmediate?: unknown }).setImmediate === "function"
    ? (fn) => (globalThis as unknown as { setImmediate(fn: () => void): void }).setImmediate(fn)
    : (fn) => setTimeout(fn, 0);

export function nextTurn(): Promise<void> {
  return new Promise((resolve) => scheduleNextTurn(resolve));
}

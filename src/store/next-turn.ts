/**
 * Resolves on the next turn of the event loop (a macrotask), after every pending microtask and any
 * I/O callbacks already due. Group commit waits for this before it takes a batch: callers that arrive in
 * separate macrotasks (HTTP requests, timers) or whose await chains are several microtasks long then
 * join the same transaction, where a microtask wait would commit each of them alone.
 * How a runtime schedules the next turn is the platform's (src/platform/).
 */
import { nextTurn, platform } from "../platform/index.ts";

export const scheduleNextTurn = (fn: () => void): void => platform.scheduleNextTurn(fn);

export { nextTurn };

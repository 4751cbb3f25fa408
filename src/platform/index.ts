/**
 * The platform of this process, detected once. Bun and Deno also look like Node in places (they have
 * `process`), so they are tested first; a runtime without `process.versions.node` is a browser. Each
 * runtime's file is imported only on that runtime, so a browser never loads `node:*` modules.
 * The server runtimes' files are imported through variables, as src/gpu/navigator.ts does with `webgpu`:
 * a bundler building for a browser then leaves them out instead of failing on their `node:*` imports
 * (docs/browser.md). The browser's own file stays a literal import so bundlers include it.
 */
import type { Platform, ServeOptions } from "./types.ts";

export * from "./types.ts";

const BUN = "./bun.ts";
const DENO = "./deno.ts";
const NODE = "./node.ts";

async function detect(): Promise<Platform> {
  const g = globalThis as { Bun?: { version: string }; Deno?: { version: { deno: string } }; process?: { versions?: { node?: string } } };
  if (g.Bun !== undefined) return ((await import(/* @vite-ignore */ BUN)) as typeof import("./bun.ts")).bunPlatform(g.Bun as never);
  if (g.Deno !== undefined) return ((await import(/* @vite-ignore */ DENO)) as typeof import("./deno.ts")).denoPlatform(g.Deno as never);
  if (g.process?.versions?.node !== undefined) return ((await import(/* @vite-ignore */ NODE)) as typeof import("./node.ts")).nodePlatform;
  return (await import("./browser.ts")).browserPlatform;
}

export const platform: Platform = await detect();

/** Resolves on the next turn of the event loop (see `Platform.scheduleNextTurn`). */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => platform.scheduleNextTurn(resolve));
}

/** Serves a fetch handler with this runtime's server and limits (`Platform.serveFetch`). */
export const serveFetch: Platform["serveFetch"] = (fetch, options) => platform.serveFetch(fetch, options);

/** How long a handler may hold a request on this runtime's server (`Platform.longestHoldSeconds`). */
export const longestHoldSeconds: Platform["longestHoldSeconds"] = (limits) => platform.longestHoldSeconds(limits);

/**
 * Throws PortInUseError now if `at.port` is taken, by binding it for a moment: for a server that has
 * slow work to do before it listens (loading a model), so that a busy port is told before, not after.
 */
export async function checkPortFree(at: Pick<ServeOptions, "hostname" | "port" | "portSetting">): Promise<void> {
  if (at.port === 0) return;
  const probe = await serveFetch(() => new Response(null, { status: 503 }), at);
  await probe.stop(false);
}
